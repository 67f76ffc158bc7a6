// issue 33, item 6: `x-unix-socket` on Linux (network-proxy.md §3.8). An allowed absolute path (listed raw, or whose
// canonical form is listed, or any with dangerously_allow_all_unix_sockets) gets the request forwarded; anything else
// 403 JSON `not_allowed` for host `unix-socket`; limited mode's method rule first; every decision audited, none in
// the blocked ring. The socket is opened without following any symlink: a sandboxed child owning a directory on the
// listed path swaps the directory, or the socket itself, for a link to another daemon's socket, and reaches nothing.
// Malformed, deep, wide and huge header values are answered and the proxy serves on. Before: 501 for everything.
import assert from 'node:assert/strict';
import { mkdirSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { tempDir } from '../helpers/server.js';
import { type ProxyFixture, request, startProxy } from '../integration/network-helpers.js';

const dir = tempDir('corral-unix-proxy-');
const ws = join(dir.path, 'ws'); // the child's own directory
const run = join(ws, 'run');
const api = join(run, 'api.sock');
const secretDir = join(dir.path, 'secret');
const secret = join(secretDir, 'api.sock'); // another daemon's socket, never listed
const hits: { api: string[]; secret: string[] } = { api: [], secret: [] };
const servers: http.Server[] = [];

async function daemon(path: string, name: keyof typeof hits): Promise<void> {
  const s = http.createServer((req, res) => {
    hits[name].push(`${req.method} ${req.url} ${req.headers['x-unix-socket'] ?? '-'}`);
    res.end(`${name} ${req.method} ${req.url}`);
  });
  await new Promise<void>((r) => s.listen(path, () => r()));
  servers.push(s);
}

let full: ProxyFixture;
let limited: ProxyFixture;
let all: ProxyFixture;
before(async () => {
  mkdirSync(run, { recursive: true });
  mkdirSync(secretDir, { recursive: true });
  await daemon(api, 'api');
  await daemon(secret, 'secret');
  symlinkSync(api, join(ws, 'alias.sock'));
  full = await startProxy({ unix_sockets: { [api]: 'allow' } });
  limited = await startProxy({ mode: 'limited', unix_sockets: { [api]: 'allow' } });
  all = await startProxy({ dangerously_allow_all_unix_sockets: true });
});
after(async () => {
  await Promise.all([full.close(), limited.close(), all.close()]);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  dir.cleanup();
});

const ask = (p: ProxyFixture, path: string, method = 'GET', target = '/v1/info') =>
  request(
    p.proxy.httpPort,
    `${method} ${target} HTTP/1.1\r\nHost: localhost\r\nx-unix-socket: ${path}\r\nConnection: close\r\n\r\n`,
  );
const blocked = (reason: string) => JSON.stringify({ status: 'blocked', host: 'unix-socket', reason });
const decisions = (p: ProxyFixture) =>
  p.audits
    .filter((e) => e['network.policy.scope' as keyof typeof e] === 'non_domain')
    .map((e) => [
      e['network.policy.decision' as keyof typeof e],
      e['network.policy.reason' as keyof typeof e],
    ]);
/** The receipt of the last unix-socket decision (issue 37, item 2): the rule's id and origin. */
const lastReceipt = (p: ProxyFixture) => {
  const e = p.audits.filter((x) => x['network.policy.scope' as keyof typeof x] === 'non_domain').at(-1)!;
  return [e['network.policy.rule_id' as keyof typeof e], e['network.policy.rule_origin' as keyof typeof e]];
};

describe('x-unix-socket on Linux', { skip: process.platform !== 'linux' && 'Linux only' }, () => {
  test('a listed path is forwarded (HTTP/1.1, path and query; the header does not go on); audited as allowed', async () => {
    const r = await ask(full, api, 'GET', 'http://localhost/v1/info?x=1');
    assert.equal(r.status, 200, r.body);
    assert.equal(r.body, 'api GET /v1/info?x=1');
    assert.deepEqual(hits.api.at(-1), 'GET /v1/info?x=1 -');
    assert.deepEqual(decisions(full).at(-1), ['allow', 'allow']);
    assert.deepEqual(lastReceipt(full), [`allow_unix_sockets:${api}`, 'config']);
    assert.deepEqual(full.blocked, []);
  });

  test('a path whose canonical form is listed is forwarded to the canonical socket', async () => {
    const r = await ask(full, join(ws, 'alias.sock'));
    assert.equal(r.status, 200, r.body);
    assert.equal(r.body, 'api GET /v1/info');
    assert.deepEqual(
      lastReceipt(full),
      [`allow_unix_sockets:${api}`, 'config'],
      'the listed (canonical) path',
    );
  });

  test('an unlisted path is 403 not_allowed for host unix-socket, audited, not in the blocked ring', async () => {
    const before = hits.secret.length;
    const r = await ask(full, secret);
    assert.equal(r.status, 403);
    assert.equal(r.body, blocked('not_allowed'));
    assert.equal(hits.secret.length, before);
    assert.deepEqual(decisions(full).at(-1), ['deny', 'not_allowed']);
    assert.deepEqual(lastReceipt(full), ['not_allowed', 'default']);
    assert.deepEqual(full.blocked, []);
  });

  test('limited mode: a write method is 403 method_not_allowed before the list; GET goes through', async () => {
    const before = hits.api.length;
    const w = await ask(limited, api, 'POST');
    assert.equal(w.status, 403);
    assert.equal(w.body, blocked('method_not_allowed'));
    assert.equal(hits.api.length, before);
    assert.deepEqual(lastReceipt(limited), ['method_not_allowed', 'limited_mode']);
    const r = await ask(limited, api, 'GET');
    assert.equal(r.status, 200, r.body);
  });

  test('dangerously_allow_all_unix_sockets: any absolute path is forwarded', async () => {
    const r = await ask(all, secret);
    assert.equal(r.status, 200, r.body);
    assert.equal(r.body, 'secret GET /v1/info');
    assert.deepEqual(lastReceipt(all), ['dangerously_allow_all_unix_sockets', 'config']);
  });

  test('swapped links: a child that owns the directory swaps it, or the socket, for a link; nothing is reached', async () => {
    const before = { api: hits.api.length, secret: hits.secret.length };
    // The socket itself becomes a link to the other daemon's socket.
    renameSync(api, join(run, 'api.real'));
    symlinkSync(secret, api);
    let r = await ask(full, api);
    assert.equal(r.status, 502, r.body);
    assert.equal(r.body, 'unix socket proxy failed');
    rmSync(api);
    renameSync(join(run, 'api.real'), api);
    // A directory on the way becomes a link to the other daemon's directory.
    renameSync(run, join(ws, 'run.real'));
    symlinkSync(secretDir, run);
    r = await ask(full, api);
    assert.equal(r.status, 502, r.body);
    rmSync(run);
    renameSync(join(ws, 'run.real'), run);
    assert.deepEqual({ api: hits.api.length, secret: hits.secret.length }, before, 'no daemon saw a request');
    // Restored, it works again.
    assert.equal((await ask(full, api)).status, 200);
  });

  test('malformed, deep, wide and huge header values are answered; the proxy serves on', async () => {
    const before = hits.secret.length;
    for (const [path, status] of [
      ['relative.sock', 400],
      ['', 400],
      [`${run}/../../secret/api.sock`, 403],
      [`/${'a/'.repeat(4000)}s.sock`, 403],
      [`${api}/`, 403],
      ['/', 403],
      [`/${'x'.repeat(60_000)}`, 431], // over the head limit
    ] as const) {
      const r = await ask(full, path);
      assert.equal(r.status, status, `${path.slice(0, 40)}: ${r.status} ${r.body.slice(0, 80)}`);
    }
    // With every path allowed, the walk itself refuses what is not a plain path to a socket.
    for (const path of [`${run}/../../secret/api.sock`, `/${'a/'.repeat(4000)}s.sock`, '/', `${api}/x`]) {
      const r = await ask(all, path);
      assert.equal(r.status, 502, `${path.slice(0, 40)}: ${r.status}`);
    }
    // Two x-unix-socket headers (Node joins them with a comma): refused, not guessed.
    const two = await request(
      full.proxy.httpPort,
      `GET / HTTP/1.1\r\nHost: localhost\r\nx-unix-socket: ${api}\r\nx-unix-socket: ${secret}\r\nConnection: close\r\n\r\n`,
    );
    assert.ok(two.status === 400 || two.status === 403, String(two.status));
    assert.equal(hits.secret.length, before);
    assert.equal((await ask(full, api)).status, 200);
  });
});
