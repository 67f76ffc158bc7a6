import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RpcError } from '../../src/protocol/errors.js';
import { decodeBase64Strict } from '../../src/server/core/base64.js';

function err(s: string): string {
  try {
    decodeBase64Strict(s);
  } catch (e) {
    assert.ok(e instanceof RpcError);
    assert.equal(e.code, -32602);
    return e.message;
  }
  throw new Error(`${JSON.stringify(s)} decoded`);
}

describe('strict base64 decoder (process/write, fs/writeFile)', () => {
  it('decodes canonical standard-alphabet padded base64', () => {
    assert.deepEqual(decodeBase64Strict(''), Buffer.alloc(0));
    assert.equal(decodeBase64Strict('aGk=').toString(), 'hi');
    assert.equal(decodeBase64Strict('aGVsbG8=').toString(), 'hello');
    assert.equal(decodeBase64Strict('aA==').toString(), 'h');
    assert.equal(decodeBase64Strict('YWJj').toString(), 'abc');
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    assert.ok(decodeBase64Strict(all.toString('base64')).equals(all));
    assert.ok(decodeBase64Strict('+/+/').equals(Buffer.from('+/+/', 'base64')));
  });

  it('reports the first bad byte and its offset: `Invalid symbol 33, offset 0.`', () => {
    assert.equal(err('!!!!'), 'Invalid symbol 33, offset 0.');
    assert.equal(err('ab!d'), 'Invalid symbol 33, offset 2.');
    assert.equal(err('aGk-'), 'Invalid symbol 45, offset 3.', 'url-safe alphabet is not accepted');
    assert.equal(err('aG_k'), 'Invalid symbol 95, offset 2.');
    assert.equal(err('aGk =').startsWith('Invalid symbol 32, offset 3.'), true, 'no whitespace');
    assert.equal(err('aGk\n'), 'Invalid symbol 10, offset 3.');
    assert.equal(err('aG=k'), 'Invalid symbol 61, offset 2.', 'padding only at the end');
  });

  it('non-ASCII input reports the UTF-8 byte and byte offset (the wire is UTF-8)', () => {
    assert.equal(err('aé=='), 'Invalid symbol 195, offset 1.');
    assert.equal(err('€AAA'), 'Invalid symbol 226, offset 0.');
    assert.equal(err('AAAA€AAA'), 'Invalid symbol 226, offset 4.');
    assert.equal(err('€€A!'), 'Invalid symbol 226, offset 0.');
  });

  it('requires padding and canonical trailing bits', () => {
    assert.match(err('aGk'), /^Invalid (input length|padding)/);
    assert.match(err('a'), /^Invalid/);
    assert.match(err('aGk=='), /^Invalid/);
    assert.equal(err('aGl='), 'Invalid last symbol 108, offset 2.');
    assert.equal(err('aB=='), 'Invalid last symbol 66, offset 1.');
  });
});
