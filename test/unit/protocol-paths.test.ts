import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { AbsolutePath, decodePathOrFileUri } from '../../src/protocol/paths.js';

describe('path fields: absolute path or file:// URI (protocol.md §5.1, §6)', () => {
  it('plain absolute paths pass through', () => {
    assert.equal(decodePathOrFileUri('/tmp/x y'), '/tmp/x y');
    assert.equal(decodePathOrFileUri('/'), '/');
  });

  it('file URIs are percent-decoded, with an empty or localhost host', () => {
    assert.equal(decodePathOrFileUri('file:///tmp/a%20b/%C3%BC'), '/tmp/a b/ü');
    assert.equal(decodePathOrFileUri('file://localhost/etc/hosts'), '/etc/hosts');
    assert.equal(decodePathOrFileUri('file:///'), '/');
    for (const p of ['/tmp/with space/ü/#hash?q%', '/a/b%20c']) {
      assert.equal(decodePathOrFileUri(pathToFileURL(p).href), p, p);
    }
  });

  it('relative paths, other hosts, other schemes and NUL are refused', () => {
    for (const bad of [
      'tmp/x',
      './x',
      '',
      'file:relative',
      'file://remote.host/etc',
      'http://127.0.0.1/x',
      '/tmp/\0x',
      'file:///tmp/%00x',
      'file:///tmp/%E0%A4%A',
    ]) {
      assert.equal(decodePathOrFileUri(bad), null, JSON.stringify(bad));
    }
  });

  it('AbsolutePath transforms to the decoded path and reports a serde-like error', () => {
    assert.equal(AbsolutePath.parse('file:///tmp/a%20b'), '/tmp/a b');
    const r = AbsolutePath.safeParse('rel');
    assert.equal(r.success, false);
    assert.match(r.error!.issues[0]!.message, /^AbsolutePathBuf deserialized without a base path/);
  });
});
