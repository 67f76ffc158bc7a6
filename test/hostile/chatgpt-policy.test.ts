/**
 * A hostile ChatGPT account-policy service (src/remote/chatgptPolicy.ts, `--chatgpt-token-stdin`): a loopback HTTPS
 * stand-in answering huge, deep, malformed, slow and redirecting bodies. Each ends with Codex's text ("could not load
 * ChatGPT account policy" or "timed out loading ChatGPT account policy"), within its bound (1 MiB read, the
 * deadline), no redirect is followed (the other host is never dialled, so it never sees the token), and the error's
 * text and detail never carry the token or the service's words. The policy URL's check: HTTPS, no userinfo, no
 * fragment.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import {
  loadChatgptAccountPolicy,
  MAX_POLICY_BYTES,
  POLICY_LOAD_FAILED,
  POLICY_TIMED_OUT,
  POLICY_URL_PROBLEM,
  PolicyError,
  policyUrl,
} from '../../src/remote/chatgptPolicy.js';
import { makeOriginCerts } from '../helpers/tlsOrigin.js';

const TOKEN = `header.payload.policySecret${'Q'.repeat(30)}`;
type Handler = (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => void;
let handler: Handler = (_q, r) => r.end('{}');
let server: https.Server;
let other: net.Server;
let otherDialled = 0;
let dir = '';
let ca: Buffer;
let url: URL;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'corral-policy-hostile-'));
  const certs = makeOriginCerts(dir);
  ca = readFileSync(certs.caPath);
  server = https.createServer(
    { key: readFileSync(certs.keyPath), cert: readFileSync(certs.certPath) },
    (q, r) => handler(q, r),
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  // The "other host" a redirect names: it only counts who dials it.
  other = net.createServer((s) => {
    otherDialled++;
    s.destroy();
  });
  await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
  const p = policyUrl(`https://127.0.0.1:${(server.address() as net.AddressInfo).port}/backend-api/`);
  assert.ok('url' in p);
  url = p.url;
});
after(() => {
  server.closeAllConnections();
  server.close();
  other.close();
  rmSync(dir, { recursive: true, force: true });
});

async function refused(expected: string, timeoutMs = 5000): Promise<PolicyError> {
  const t0 = performance.now();
  const e = await loadChatgptAccountPolicy(url, TOKEN, 'acct_1', { ca, timeoutMs }).then(
    () => assert.fail('the policy was accepted'),
    (err: unknown) => err,
  );
  assert.ok(e instanceof PolicyError, String(e));
  assert.equal(e.message, expected);
  assert.ok(!e.message.includes(TOKEN) && !e.detail.includes(TOKEN), 'the token is not in the error');
  assert.ok(!e.detail.includes('stand-in words'), "the service's words are not repeated");
  assert.ok(performance.now() - t0 < timeoutMs + 2000, 'bounded by the deadline');
  return e;
}

test('the policy URL: HTTPS without userinfo or fragment, /wham/config/bundle under the base', () => {
  for (const bad of ['http://127.0.0.1/', 'https://u:p@127.0.0.1/', 'https://127.0.0.1/#x', 'not a url', ''])
    assert.deepEqual(policyUrl(bad), { error: POLICY_URL_PROBLEM });
  const ok = policyUrl('https://chatgpt.com/backend-api');
  assert.ok('url' in ok && ok.url.href === 'https://chatgpt.com/backend-api/wham/config/bundle');
});

test('a JSON object is the policy; the request carries the token and the account', async () => {
  let seen: Record<string, unknown> = {};
  handler = (q, r) => {
    seen = { ...q.headers, url: q.url };
    r.end('{"config":{}}');
  };
  await loadChatgptAccountPolicy(url, TOKEN, 'acct_1', { ca });
  assert.equal(seen.authorization, `Bearer ${TOKEN}`);
  assert.equal(seen['chatgpt-account-id'], 'acct_1');
  assert.equal(seen.url, '/backend-api/wham/config/bundle');
});

test('huge bodies (declared and streamed past 1 MiB): refused without reading them whole', async () => {
  handler = (_q, r) => {
    r.writeHead(200, { 'content-length': String(MAX_POLICY_BYTES * 64) });
    r.write('{');
  };
  const declared = await refused(POLICY_LOAD_FAILED);
  assert.equal(declared.detail, 'answer too large');
  let sent = 0;
  handler = (_q, r) => {
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    const push = () => {
      while (sent < MAX_POLICY_BYTES * 16 && r.write(chunk)) sent += chunk.length;
      if (sent < MAX_POLICY_BYTES * 16 && !r.destroyed) r.once('drain', push);
    };
    r.on('close', () => {});
    push();
  };
  const streamed = await refused(POLICY_LOAD_FAILED);
  assert.equal(streamed.detail, 'answer too large');
  assert.ok(sent < MAX_POLICY_BYTES * 16, 'the client stopped reading long before the end');
});

test('deep, malformed and non-object bodies, error statuses: Codex text, no words of the service', async () => {
  const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
  for (const [status, body] of [
    [200, deep],
    [200, '{"a":'],
    [200, 'stand-in words'],
    [200, '[]'],
    [200, 'null'],
    [200, '"x"'],
    [200, '\u0000\u001b[2J'],
    [401, '{"error":"stand-in words"}'],
    [500, 'stand-in words'],
  ] as const) {
    handler = (_q, r) => {
      r.writeHead(status, { 'content-type': 'application/json' });
      r.end(body);
    };
    await refused(POLICY_LOAD_FAILED);
  }
});

test('a redirect to another host is not followed: the other host never sees the token', async () => {
  const to = `https://127.0.0.1:${(other.address() as net.AddressInfo).port}/steal`;
  for (const status of [301, 302, 307, 308]) {
    handler = (_q, r) => {
      r.writeHead(status, { location: to });
      r.end();
    };
    const e = await refused(POLICY_LOAD_FAILED);
    assert.equal(e.detail, `HTTP ${status}`);
  }
  assert.equal(otherDialled, 0);
});

test('a slow service (headers never sent, or a trickled body) ends at the deadline with Codex text', async () => {
  handler = () => {}; // never answers
  await refused(POLICY_TIMED_OUT, 300);
  handler = (_q, r) => {
    r.writeHead(200);
    const t = setInterval(() => (r.destroyed ? clearInterval(t) : r.write(' ')), 20);
  };
  await refused(POLICY_TIMED_OUT, 300);
});
