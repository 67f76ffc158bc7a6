// The agent-sandbox router's contract (issue 19.3b), as the stand-in in test/helpers/fleet/sandboxRouter.ts
// implements it, against "pods" in network namespaces of their own that echo what reached them: header
// validation with the router's exact 400 bodies, routing by namespace/ID/port, Host/Authorization/X-Forwarded-For
// rewritten, Origin removed on upgrades only, 502 when nothing answers, /healthz its own.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { dialUrl, type Exchange, exchange, header, UPGRADE_HEADERS } from '../helpers/fleet/http.js';
import { NetnsDialer, type NetnsProcess, netnsAvailable, spawnInNetns } from '../helpers/fleet/netns.js';
import { type SandboxRouter, startSandboxRouter } from '../helpers/fleet/sandboxRouter.js';

const avail = netnsAvailable();
const skip = avail.ok ? false : avail.reason;
if (!avail.ok) console.log(`# kube-router: skipped: ${avail.reason}`);

interface Echo {
  pod: string;
  port: number;
  method: string;
  url: string;
  rawHeaders: string[];
}

const ECHO = join(import.meta.dirname, '..', 'helpers', 'fleet', 'echoPod.mjs');

/** The echo's headers as lowercase name → values (in order). */
function received(x: Exchange): { echo: Echo; h: (name: string) => string[] } {
  const echo = JSON.parse(x.body) as Echo;
  const pairs: [string, string][] = [];
  for (let i = 0; i < echo.rawHeaders.length; i += 2)
    pairs.push([echo.rawHeaders[i]!, echo.rawHeaders[i + 1]!]);
  return { echo, h: (n) => pairs.filter(([k]) => k.toLowerCase() === n).map(([, v]) => v) };
}

describe('agent-sandbox router stand-in: the header contract', { skip }, () => {
  const pods = new Map<string, { proc: NetnsProcess; dialer: NetnsDialer }>();
  let router: SandboxRouter;

  async function startEcho(namespace: string, id: string, ports: number[]) {
    const proc = await spawnInNetns([process.execPath, ECHO, ...ports.map(String)], {
      env: { PATH: '/usr/bin:/bin', POD_NAME: `${namespace}/${id}` },
    });
    pods.set(`${namespace}/${id}`, { proc, dialer: await NetnsDialer.enter(proc.proc.pid!) });
  }

  before(async () => {
    if (skip) return;
    await startEcho('default', 'echo-a', [8888, 9000]);
    await startEcho('team-b', 'echo-a', [8888]);
    router = await startSandboxRouter({
      resolve: (ns, id) => pods.get(`${ns}/${id}`)?.dialer,
      retries: 2,
      retryInitialDelayMs: 10,
    });
  });
  after(async () => {
    await router?.close();
    for (const p of pods.values()) {
      p.dialer.close();
      p.proc.proc.kill('SIGKILL');
      await p.proc.exited;
    }
  });

  const send = async (headers: [string, string][], req: { method?: string; path?: string } = {}) =>
    exchange(await dialUrl(router.url), {
      ...req,
      headers: [['Host', `127.0.0.1:${router.port}`], ...headers],
    });

  it('the pods really are in namespaces of their own (nothing of theirs listens here)', async () => {
    const a = pods.get('default/echo-a')!;
    const b = pods.get('team-b/echo-a')!;
    assert.notEqual(a.dialer.netns, b.dialer.netns);
    assert.match(a.dialer.netns, /^net:\[\d+\]$/);
    await assert.rejects(dialUrl('http://127.0.0.1:9000'), /ECONNREFUSED/);
  });

  it('GET /healthz is the router’s own, whatever the method or routing headers', async () => {
    for (const [method, headers] of [
      ['GET', []],
      ['POST', [['X-Sandbox-ID', 'echo-a']]],
      ['GET', [['X-Sandbox-ID', 'Bad_Name'], ...UPGRADE_HEADERS]],
    ] as [string, [string, string][]][]) {
      const x = await send(headers, { method, path: '/healthz' });
      assert.equal(x.status, 200);
      assert.equal(x.body, '{"status":"ok"}');
      assert.equal(header(x, 'content-type'), 'application/json');
    }
  });

  it('invalid routing headers → 400 with the router’s detail messages (plain and upgrade requests)', async () => {
    const cases: [[string, string][], string][] = [
      [[], 'X-Sandbox-ID header is required.'],
      [[['X-Sandbox-ID', '']], 'X-Sandbox-ID header is required.'],
      ...['Echo-a', '-echo', 'echo-', 'echo.a.evil', 'echo/../x', 'a'.repeat(64), 'echo_a', 'échо'].map(
        (id) => [[['X-Sandbox-ID', id]], 'Invalid sandbox ID format.'] as [[string, string][], string],
      ),
      ...['Team-B', 'team.b', 'team-b/x', '-x', 'x'.repeat(64)].map(
        (ns) =>
          [
            [
              ['X-Sandbox-ID', 'echo-a'],
              ['X-Sandbox-Namespace', ns],
            ],
            'Invalid namespace format.',
          ] as [[string, string][], string],
      ),
      ...['0', '65536', '-1', 'abc', '80a', '1e3', '0x1f', '8888 9000', '99999999999999999999'].map(
        (port) =>
          [
            [
              ['X-Sandbox-ID', 'echo-a'],
              ['X-Sandbox-Port', port],
            ],
            'Invalid port format.',
          ] as [[string, string][], string],
      ),
      ...['127.0.0.1', '::1', '::ffff:127.0.0.1', 'not-an-ip', '127.0.0.1:8888', 'fe80::1%lo'].map(
        (ip) =>
          [
            [
              ['X-Sandbox-ID', 'echo-a'],
              ['X-Sandbox-Pod-IP', ip],
            ],
            'Invalid target IP address.',
          ] as [[string, string][], string],
      ),
    ];
    for (const [headers, detail] of cases) {
      for (const upgrade of [false, true]) {
        const x = await send(upgrade ? [...headers, ...UPGRADE_HEADERS] : headers);
        assert.equal(x.status, 400, `${JSON.stringify(headers)} upgrade=${upgrade}`);
        assert.equal(x.body, `${JSON.stringify({ detail })}\n`);
        assert.equal(header(x, 'content-type'), 'application/json');
      }
    }
  });

  it('routes by namespace, ID and port; an empty namespace is "default"; the first of repeated headers counts', async () => {
    const to = async (headers: [string, string][]) => received(await send(headers)).echo;
    assert.deepEqual(await to([['X-Sandbox-ID', 'echo-a']]).then((e) => [e.pod, e.port]), [
      'default/echo-a',
      8888,
    ]);
    const b = await to([
      ['X-Sandbox-ID', 'echo-a'],
      ['X-Sandbox-Namespace', 'team-b'],
    ]);
    assert.deepEqual([b.pod, b.port], ['team-b/echo-a', 8888]);
    const empty = await to([
      ['X-Sandbox-ID', 'echo-a'],
      ['X-Sandbox-Namespace', ''],
    ]);
    assert.equal(empty.pod, 'default/echo-a');
    for (const port of ['9000', '+9000', '09000']) {
      const e = await to([
        ['X-Sandbox-ID', 'echo-a'],
        ['X-Sandbox-Port', port],
      ]);
      assert.equal(e.port, 9000, port);
    }
    const first = await to([
      ['X-Sandbox-ID', 'echo-a'],
      ['X-Sandbox-Port', '9000'],
      ['X-Sandbox-Port', '8888'],
    ]);
    assert.equal(first.port, 9000);
  });

  it('forwards path and query verbatim; rewrites Host, drops Authorization and hop-by-hop headers, owns X-Forwarded-*', async () => {
    const x = await send(
      [
        ['X-Sandbox-ID', 'echo-a'],
        ['Authorization', 'Bearer for-the-router'],
        ['X-Corral-Token', 'for-the-pod'],
        ['X-Forwarded-For', '127.9.9.9'],
        ['X-Forwarded-Host', 'spoofed.example'],
        ['Origin', 'http://app.example'],
        ['Connection', 'keep-alive, X-Hop'],
        ['X-Hop', 'dropped'],
        ['Keep-Alive', 'timeout=5'],
        ['Proxy-Authorization', 'Basic eA=='],
        ['X-Kept', 'one'],
        ['X-Kept', 'two'],
      ],
      { method: 'POST', path: '/a/b%2Fc/?token=t%20k&x=1' },
    );
    const { echo, h } = received(x);
    assert.equal(echo.method, 'POST');
    assert.equal(echo.url, '/a/b%2Fc/?token=t%20k&x=1');
    assert.deepEqual(h('host'), ['echo-a.default.svc.cluster.local:8888']);
    assert.deepEqual(h('authorization'), []);
    assert.deepEqual(h('proxy-authorization'), []);
    assert.deepEqual(h('x-hop'), []);
    assert.deepEqual(h('keep-alive'), []);
    assert.deepEqual(h('x-corral-token'), ['for-the-pod']);
    assert.deepEqual(h('origin'), ['http://app.example'], 'a plain request keeps Origin');
    assert.deepEqual(h('x-forwarded-for'), ['127.0.0.1']);
    assert.deepEqual(h('x-forwarded-host'), [`127.0.0.1:${router.port}`]);
    assert.deepEqual(h('x-forwarded-proto'), ['http']);
    assert.deepEqual(h('x-kept'), ['one', 'two']);
    assert.deepEqual(h('x-sandbox-id'), ['echo-a'], 'the routing headers pass through (Go router)');
  });

  it('a WebSocket upgrade also loses Origin, keeps Upgrade/Connection and the handshake headers', async () => {
    const x = await send([
      ['X-Sandbox-ID', 'echo-a'],
      ['X-Sandbox-Port', '9000'],
      ['Origin', 'http://app.example'],
      ['Authorization', 'Bearer for-the-router'],
      ...UPGRADE_HEADERS,
    ]);
    assert.equal(x.status, 299, 'the pod’s answer comes back as it was');
    const { echo, h } = received(x);
    assert.equal(echo.port, 9000);
    assert.deepEqual(h('origin'), []);
    assert.deepEqual(h('authorization'), []);
    assert.deepEqual(h('connection'), ['Upgrade']);
    assert.deepEqual(h('upgrade'), ['websocket']);
    assert.deepEqual(h('sec-websocket-key'), ['dGhlIHNhbXBsZSBub25jZQ==']);
    assert.deepEqual(h('host'), ['echo-a.default.svc.cluster.local:9000']);
  });

  it('nothing to dial → 502 {"detail":"Could not connect to the backend sandbox: <id>"} after the retries', async () => {
    const detail = (id: string) =>
      `${JSON.stringify({ detail: `Could not connect to the backend sandbox: ${id}` })}\n`;
    for (const headers of [
      [['X-Sandbox-ID', 'ghost']],
      [
        ['X-Sandbox-ID', 'echo-a'],
        ['X-Sandbox-Namespace', 'nobody'],
      ],
      [
        ['X-Sandbox-ID', 'echo-a'],
        ['X-Sandbox-Port', '9001'],
      ],
    ] as [string, string][][]) {
      for (const upgrade of [false, true]) {
        const x = await send(upgrade ? [...headers, ...UPGRADE_HEADERS] : headers);
        assert.equal(x.status, 502, JSON.stringify(headers));
        assert.equal(x.body, detail(headers[0]![1]));
      }
    }
  });
});
