// Conformance: filesystem methods (protocol.md §6; checklist item 24), plain paths and file:// URIs.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { serverSuite } from '../helpers/server.js';

const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64');
const NOT_FOUND = 'No such file or directory (os error 2)';

describe('protocol fs methods (§6)', () => {
  const s = serverSuite();

  for (const form of ['path', 'uri'] as const) {
    const P = (p: string) => (form === 'path' ? p : pathToFileURL(p).href);

    it(`24 (${form}): writeFile/readFile round trip, binary-safe`, async () => {
      const file = `${s.dir.path}/${form} file ü.bin`;
      const data = Buffer.from([0, 1, 2, 255, 254, 10, 13]);
      assert.deepEqual(await s.c.request('fs/writeFile', { path: P(file), dataBase64: b64(data) }), {});
      assert.ok(readFileSync(file).equals(data));
      const r = await s.c.request<{ dataBase64: string }>('fs/readFile', { path: P(file) });
      assert.deepEqual(Object.keys(r), ['dataBase64']);
      assert.ok(Buffer.from(r.dataBase64, 'base64').equals(data));
      const empty = `${s.dir.path}/${form}-empty`;
      await s.c.request('fs/writeFile', { path: P(empty), dataBase64: '' });
      assert.deepEqual(await s.c.request('fs/readFile', { path: P(empty) }), { dataBase64: '' });
    });

    it(`24 (${form}): writeFile over a longer file leaves exactly the new bytes; into a missing directory, ENOENT`, async () => {
      const file = `${s.dir.path}/${form}-overwrite.txt`;
      writeFileSync(file, 'a much longer original content\n'.repeat(100));
      await s.c.request('fs/writeFile', { path: P(file), dataBase64: b64('short') });
      assert.equal(readFileSync(file, 'utf8'), 'short');
      // The same through a symlink (followed): the target is emptied and rewritten, the link stays.
      const link = `${s.dir.path}/${form}-overwrite-link`;
      symlinkSync(file, link);
      await s.c.request('fs/writeFile', { path: P(link), dataBase64: b64('via link') });
      assert.equal(readFileSync(file, 'utf8'), 'via link');
      await assert.rejects(
        s.c.request('fs/writeFile', { path: P(`${s.dir.path}/${form}-no-such-dir/f`), dataBase64: b64('x') }),
        (e: Error) => e.message.includes(NOT_FOUND),
      );
      assert.equal(existsSync(`${s.dir.path}/${form}-no-such-dir`), false);
      // A file where a directory is expected: ENOTDIR, the file untouched.
      await assert.rejects(
        s.c.request('fs/writeFile', { path: P(`${file}/f`), dataBase64: b64('x') }),
        (e: Error) => e.message.includes('Not a directory (os error 20)'),
      );
      assert.equal(readFileSync(file, 'utf8'), 'via link');
    });

    it(`24 (${form}): readFile of a /proc file (size 0, read a page at a time) gives all of it`, async () => {
      // /proc/crypto: many pages, the same for every reader.
      const want = readFileSync('/proc/crypto');
      assert.ok(want.length > 8192, `a file of several pages: ${want.length}`);
      const r = await s.c.request<{ dataBase64: string }>('fs/readFile', { path: P('/proc/crypto') });
      assert.equal(Buffer.from(r.dataBase64, 'base64').toString(), want.toString());
    });

    it(`24 (${form}): getMetadata returns all six fields for a file, a directory and a symlink`, async () => {
      const file = `${s.dir.path}/${form}-meta.txt`;
      writeFileSync(file, 'hello');
      const m = await s.c.request<Record<string, unknown>>('fs/getMetadata', { path: P(file) });
      assert.deepEqual(Object.keys(m).sort(), [
        'createdAtMs',
        'isDirectory',
        'isFile',
        'isSymlink',
        'modifiedAtMs',
        'size',
      ]);
      assert.equal(m.isFile, true);
      assert.equal(m.isDirectory, false);
      assert.equal(m.isSymlink, false);
      assert.equal(m.size, 5);
      assert.equal(m.modifiedAtMs, Math.trunc(statSync(file).mtimeMs));
      assert.ok(Number.isInteger(m.createdAtMs) && (m.createdAtMs as number) >= 0);
      const d = await s.c.request<Record<string, unknown>>('fs/getMetadata', { path: P(s.dir.path) });
      assert.equal(d.isDirectory, true);
      assert.equal(d.isFile, false);
      const link = `${s.dir.path}/${form}-link`;
      symlinkSync(file, link);
      const l = await s.c.request<Record<string, unknown>>('fs/getMetadata', { path: P(link) });
      assert.equal(l.isSymlink, true);
      assert.equal(l.isFile, true, 'other fields follow the link');
      assert.equal(l.size, 5);
    });

    it(`24 (${form}): createDirectory, readDirectory, copy and remove`, async () => {
      const root = `${s.dir.path}/${form}-tree`;
      assert.deepEqual(
        await s.c.request('fs/createDirectory', { path: P(`${root}/a/b`), recursive: true }),
        {},
      );
      assert.ok(statSync(`${root}/a/b`).isDirectory());
      writeFileSync(`${root}/a/b/f.txt`, 'f');
      writeFileSync(`${root}/z.txt`, 'z');
      symlinkSync(`${root}/a`, `${root}/link-to-a`);
      const r = await s.c.request<{ entries: { fileName: string; isDirectory: boolean; isFile: boolean }[] }>(
        'fs/readDirectory',
        { path: P(root) },
      );
      assert.deepEqual(
        [...r.entries].sort((x, y) => x.fileName.localeCompare(y.fileName)),
        [
          { fileName: 'a', isDirectory: true, isFile: false },
          { fileName: 'link-to-a', isDirectory: true, isFile: false },
          { fileName: 'z.txt', isDirectory: false, isFile: true },
        ],
      );
      await s.c.request('fs/copy', {
        sourcePath: P(`${root}/z.txt`),
        destinationPath: P(`${root}/z2.txt`),
        recursive: false,
      });
      assert.equal(readFileSync(`${root}/z2.txt`, 'utf8'), 'z');
      await s.c.request('fs/copy', {
        sourcePath: P(`${root}/a`),
        destinationPath: P(`${root}/a2`),
        recursive: true,
      });
      assert.equal(readFileSync(`${root}/a2/b/f.txt`, 'utf8'), 'f');
      const e = await s.c.requestError('fs/copy', {
        sourcePath: P(`${root}/a`),
        destinationPath: P(`${root}/a3`),
        recursive: false,
      });
      assert.equal(e.code, -32603);
      await s.c.request('fs/remove', { path: P(`${root}/z2.txt`), recursive: false, force: false });
      assert.ok(!existsSync(`${root}/z2.txt`));
      const ne = await s.c.requestError('fs/remove', {
        path: P(`${root}/a2`),
        recursive: false,
        force: false,
      });
      assert.equal(ne.code, -32603);
      assert.equal(ne.message, 'Directory not empty (os error 39)');
      await s.c.request('fs/remove', { path: P(`${root}/a2`), recursive: true, force: false });
      assert.ok(!existsSync(`${root}/a2`));
      await s.c.request('fs/remove', { path: P(`${root}/link-to-a`), recursive: true, force: false });
      assert.ok(existsSync(`${root}/a/b/f.txt`), 'removing a link keeps its target');
      assert.deepEqual(
        await s.c.request('fs/remove', { path: P(`${root}/missing`), recursive: true, force: true }),
        {},
      );
    });

    it(`24 (${form}): a missing target → -32004 ${NOT_FOUND}`, async () => {
      const missing = `${s.dir.path}/${form}-does-not-exist`;
      for (const method of ['fs/readFile', 'fs/getMetadata', 'fs/readDirectory']) {
        const e = await s.c.requestError(method, { path: P(missing) });
        assert.equal(e.code, -32004, method);
        assert.equal(e.message, NOT_FOUND, method);
      }
      let e = await s.c.requestError('fs/remove', { path: P(missing), recursive: false, force: false });
      assert.equal(e.code, -32004);
      assert.equal(e.message, NOT_FOUND);
      e = await s.c.requestError('fs/copy', {
        sourcePath: P(missing),
        destinationPath: P(`${missing}2`),
        recursive: false,
      });
      assert.equal(e.code, -32004);
      e = await s.c.requestError('fs/writeFile', { path: P(`${missing}/inner.txt`), dataBase64: '' });
      assert.equal(e.code, -32004);
    });
  }

  it('other OS failures are -32603 with the OS text', async () => {
    const file = `${s.dir.path}/plain`;
    writeFileSync(file, 'x');
    let e = await s.c.requestError('fs/readFile', { path: s.dir.path });
    assert.equal(e.code, -32603);
    assert.equal(e.message, 'Is a directory (os error 21)');
    e = await s.c.requestError('fs/readDirectory', { path: file });
    assert.equal(e.code, -32603);
    assert.equal(e.message, 'Not a directory (os error 20)');
    mkdirSync(`${s.dir.path}/exists`);
    e = await s.c.requestError('fs/createDirectory', { path: `${s.dir.path}/exists`, recursive: false });
    assert.equal(e.code, -32603);
    assert.equal(e.message, 'File exists (os error 17)');
    assert.deepEqual(
      await s.c.request('fs/createDirectory', { path: `${s.dir.path}/exists`, recursive: true }),
      {},
    );
  });

  it('a relative path → -32602; a non-file URI → -32602; missing path → -32602', async () => {
    for (const path of [
      'relative/file',
      'file.txt',
      './x',
      'http://127.0.0.1/x',
      'file://otherhost/etc/hostname',
    ]) {
      const e = await s.c.requestError('fs/readFile', { path });
      assert.equal(e.code, -32602, path);
    }
    let e = await s.c.requestError('fs/getMetadata', {});
    assert.equal(e.code, -32602);
    assert.equal(e.message, 'missing field `path`');
    e = await s.c.requestError('fs/writeFile', { path: `${s.dir.path}/x` });
    assert.equal(e.message, 'missing field `dataBase64`');
    e = await s.c.requestError('fs/readFile');
    assert.match(e.message, /^invalid type: null, expected struct/);
  });

  it('fs/writeFile with bad base64 → -32602 Invalid symbol', async () => {
    const e = await s.c.requestError('fs/writeFile', { path: `${s.dir.path}/bad`, dataBase64: 'ab!d' });
    assert.equal(e.code, -32602);
    assert.equal(e.message, 'Invalid symbol 33, offset 2.');
    assert.ok(!existsSync(`${s.dir.path}/bad`));
  });

  it('a null sandbox context (0.120 sandboxPolicy, 0.125+ sandbox) is accepted', async () => {
    const file = `${s.dir.path}/ctx`;
    await s.c.request('fs/writeFile', { path: file, dataBase64: b64('a'), sandboxPolicy: null });
    await s.c.request('fs/writeFile', { path: file, dataBase64: b64('b'), sandbox: null });
    assert.equal(readFileSync(file, 'utf8'), 'b');
  });
});
