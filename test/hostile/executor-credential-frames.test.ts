// Hostile input to the `--executor-credential-stdin` reader (src/remote/executorCredential.ts) and to the registry
// answering a registration made with its token: huge lines, no newline, NUL, invalid UTF-8, deep and wide JSON,
// repeated keys, floats, a pipe that closes mid-frame, one byte at a time; a registry answering malformed or huge
// bodies. Every bad input ends the stream with one of Codex's texts, without keeping more than a frame's bytes, and
// no error text carries the token.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { realClock } from '../../src/clock.js';
import {
  CREDENTIAL_TEXT,
  ExecutorCredentialStream,
  executorCredentialAuth,
  MAX_CREDENTIAL_FRAME_BYTES,
  parseCredentialFrame,
} from '../../src/remote/executorCredential.js';
import { RegistryClient } from '../../src/remote/registry.js';

const ENV = 'env-hostile';
const TOKEN = `hostile-token-${'k'.repeat(32)}`;
const FUTURE = Math.floor(Date.now() / 1000) + 3600;
const NOW = Math.floor(Date.now() / 1000);
const good = (o: Record<string, unknown> = {}) =>
  JSON.stringify({ version: 1, environment_id: ENV, token: TOKEN, expires_at: FUTURE, ...o });

/** Feeds `chunks` to a fresh stream (ending it when `end`), and returns how it ended. */
async function feed(chunks: (string | Buffer)[], end = true): Promise<{ first: string; ended: string }> {
  const input = new PassThrough();
  const s = new ExecutorCredentialStream(input, {
    environmentId: ENV,
    clock: realClock,
    initialTimeoutMs: 5000,
  });
  for (const c of chunks) input.write(c);
  if (end) input.end();
  const first = await s.first.then(
    (c) => `ok:${c.token === TOKEN}`,
    (e: Error) => e.message,
  );
  const ended = await s.ended.then(
    () => 'ended',
    (e: Error) => e.message,
  );
  return { first, ended };
}

describe('executor credential frames: hostile input', () => {
  it('the parser refuses every malformed frame with Codex’s text, never with the token in it', () => {
    const cases: [string, string][] = [
      ['', CREDENTIAL_TEXT.invalid],
      ['   ', CREDENTIAL_TEXT.invalid],
      ['null', CREDENTIAL_TEXT.invalid],
      ['[]', CREDENTIAL_TEXT.invalid],
      [`[${good()}]`, CREDENTIAL_TEXT.invalid],
      ['{', CREDENTIAL_TEXT.invalid],
      [good({ version: 2 }), CREDENTIAL_TEXT.invalid],
      [good({ version: '1' }), CREDENTIAL_TEXT.invalid],
      [good().replace('"version":1', '"version":1.0'), CREDENTIAL_TEXT.invalid],
      [good().replace(`"expires_at":${FUTURE}`, `"expires_at":${FUTURE / 1e9}e9`), CREDENTIAL_TEXT.invalid],
      [good({ expires_at: -1 }), CREDENTIAL_TEXT.invalid],
      [good({ expires_at: 2 ** 60 }), CREDENTIAL_TEXT.invalid],
      [good({ expires_at: String(FUTURE) }), CREDENTIAL_TEXT.invalid],
      [good({ token: '' }), CREDENTIAL_TEXT.invalid],
      [good({ token: 'a b' }), CREDENTIAL_TEXT.invalid],
      [good({ token: 'a\u0000b' }), CREDENTIAL_TEXT.invalid],
      [good({ token: 'tok\u00e9' }), CREDENTIAL_TEXT.invalid],
      [good({ token: { nested: TOKEN } }), CREDENTIAL_TEXT.invalid],
      [good({ extra: true }), CREDENTIAL_TEXT.invalid],
      [good({ environment_id: 7 }), CREDENTIAL_TEXT.invalid],
      // A repeated key (JSON.parse would keep the last one).
      [good().replace('{', `{"token":"${TOKEN}x",`), CREDENTIAL_TEXT.invalid],
      // Deep and wide.
      [`${'{"a":'.repeat(3000)}1${'}'.repeat(3000)}`, CREDENTIAL_TEXT.invalid],
      [`{${Array.from({ length: 1500 }, (_, i) => `"k${i}":1`).join(',')}}`, CREDENTIAL_TEXT.invalid],
      [good({ environment_id: 'other' }), CREDENTIAL_TEXT.otherEnvironment],
      [good({ expires_at: NOW }), CREDENTIAL_TEXT.expired],
      [good({ expires_at: 0 }), CREDENTIAL_TEXT.expired],
    ];
    for (const [line, text] of cases) {
      const r = parseCredentialFrame(line, ENV, NOW);
      assert.deepEqual(r, { error: text }, line.slice(0, 120));
    }
    // What Codex accepts: white space around, a CRLF ending, JSON escapes in the token.
    for (const line of [
      `  ${good()}\t`,
      `${good()}\r`,
      good().replace(TOKEN, TOKEN.replace('k', '\\u006b')),
    ]) {
      const r = parseCredentialFrame(line, ENV, NOW);
      assert.ok('token' in r && r.token === TOKEN, line);
    }
  });

  it('a line past 16 KiB is refused as soon as its bytes pass the bound (no newline needed), and nothing is kept', async () => {
    const huge = Buffer.alloc(8 * 1024 * 1024, 0x61);
    const t0 = performance.now();
    const r = await feed([huge], false);
    assert.equal(r.first, CREDENTIAL_TEXT.tooLarge);
    assert.equal(r.ended, CREDENTIAL_TEXT.tooLarge);
    assert.ok(performance.now() - t0 < 2000);
    // Exactly at the bound it is a frame (here an invalid one); one byte more is too large.
    const at = `${good({ token: 'x'.repeat(MAX_CREDENTIAL_FRAME_BYTES - good({ token: '' }).length) })}`;
    assert.equal(Buffer.byteLength(at), MAX_CREDENTIAL_FRAME_BYTES);
    assert.equal((await feed([`${at}\n`])).first, 'ok:false');
    assert.equal((await feed([` ${at}\n`])).first, CREDENTIAL_TEXT.tooLarge);
    // A good frame followed by a huge one: the stream ends with the bound's text.
    assert.deepEqual(await feed([`${good()}\n`, huge]), {
      first: 'ok:true',
      ended: CREDENTIAL_TEXT.tooLarge,
    });
  });

  it('NUL, invalid UTF-8, a pipe closing mid-frame, one byte at a time', async () => {
    assert.equal(
      (await feed([`${good().slice(0, 20)}\0${good().slice(20)}\n`])).first,
      CREDENTIAL_TEXT.invalid,
    );
    const bad = Buffer.concat([
      Buffer.from(good().slice(0, -1)),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('}\n'),
    ]);
    assert.equal((await feed([bad])).first, CREDENTIAL_TEXT.invalid);
    assert.equal((await feed([good().slice(0, 30)])).first, CREDENTIAL_TEXT.invalid);
    assert.deepEqual(await feed([`${good()}\n`, good().slice(0, 30)]), {
      first: 'ok:true',
      ended: CREDENTIAL_TEXT.invalid,
    });
    const bytes = Buffer.from(`${good()}\n${good()}\n`);
    assert.deepEqual(await feed([...bytes].map((b) => Buffer.from([b]))), {
      first: 'ok:true',
      ended: 'ended',
    });
    // Many frames in one chunk, then a bad one: the good ones rotate, the bad one ends it.
    const many = `${Array.from({ length: 500 }, () => good()).join('\n')}\ngarbage\n`;
    assert.deepEqual(await feed([many]), { first: 'ok:true', ended: CREDENTIAL_TEXT.invalid });
  });
});

describe('a registry answering a registration made with the executor credential', () => {
  let server: Server;
  let base = '';
  let answer: (res: import('node:http').ServerResponse) => void = (res) => res.end();
  before(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => answer(res));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => server.close());

  it('malformed, huge, deep and wrong-typed bodies fail the registration; no message carries the token', async () => {
    const input = new PassThrough();
    const s = new ExecutorCredentialStream(input, { environmentId: ENV, clock: realClock });
    input.write(`${good()}\n`);
    await s.first;
    const client = new RegistryClient(base, ENV, executorCredentialAuth(s));
    const bodies: [number, string | Buffer][] = [
      [200, 'not json'],
      [200, Buffer.alloc(2 * 1024 * 1024, 0x7b)],
      [200, `${'['.repeat(100_000)}${']'.repeat(100_000)}`],
      [200, JSON.stringify({ environment_id: ENV, url: 42 })],
      [401, TOKEN],
      [500, `${'x'.repeat(100_000)}${TOKEN}`],
    ];
    for (const [status, body] of bodies) {
      answer = (res) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(body);
      };
      await assert.rejects(client.register(), (e: Error) => {
        assert.ok(!e.message.includes(TOKEN), `the token is in: ${e.message.slice(0, 200)}`);
        return true;
      });
    }
    s.close();
  });
});
