// Health endpoints of the exec-server port (issue 18 item 5): /healthz and /readyz need no credential, reveal nothing
// but their status (and the names of failing readiness checks), readiness follows the sandbox backend and whatever
// checks modules register, and no other path answers without credentials.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { defaultReadiness, Readiness } from '../../src/server/connection/health.js';
import { tokenAuth } from '../../src/server/core/auth.js';
import { CORRAL_BIN } from '../helpers/cli.js';
import { RpcCallError, RpcClient } from '../helpers/client.js';
import { dialUrl, type Exchange, exchange, header, UPGRADE_HEADERS } from '../helpers/fleet/http.js';
import { startTestServer, type TestServer, tempDir } from '../helpers/server.js';
import { seed } from './sandbox-util.js';

const TOKEN = 'kube-health-token-0123456789';
const REPO = fileURLToPath(new URL('../..', import.meta.url));

async function get(
  url: string,
  path: string,
  method = 'GET',
  headers: [string, string][] = [],
): Promise<Exchange> {
  return exchange(await dialUrl(url), { method, path, headers: [['Host', new URL(url).host], ...headers] });
}

/** Only these headers: nothing that names the software, its version or a path. */
const ALLOWED_HEADERS = new Set([
  'content-type',
  'content-length',
  'cache-control',
  'x-content-type-options',
  'date',
  'connection',
  'keep-alive',
  'allow',
]);

function assertBare(x: Exchange): void {
  for (const [k] of x.headers) assert.ok(ALLOWED_HEADERS.has(k), `unexpected header ${k}`);
  assert.equal(header(x, 'content-type'), 'application/json');
  assert.equal(header(x, 'cache-control'), 'no-store');
}

for (const withToken of [false, true]) {
  describe(`health endpoints, ${withToken ? 'token required' : 'no token'}`, () => {
    let ts: TestServer;
    before(async () => {
      ts = await startTestServer({ listen: withToken ? { auth: tokenAuth(TOKEN) } : {} });
    });
    after(() => ts.close());

    it('GET /healthz and /readyz → 200 {"status":"ok"}, with no credential', async () => {
      for (const path of ['/healthz', '/readyz', '/healthz?probe=1']) {
        const x = await get(ts.url, path);
        assert.equal(x.status, 200, path);
        assert.equal(x.body, '{"status":"ok"}');
        assertBare(x);
      }
    });

    it('HEAD answers the same status without a body; other methods → 405', async () => {
      const head = await get(ts.url, '/readyz', 'HEAD');
      assert.equal(head.status, 200);
      assert.equal(head.body, '');
      for (const method of ['POST', 'PUT', 'DELETE', 'OPTIONS']) {
        const x = await get(ts.url, '/healthz', method);
        assert.equal(x.status, 405, method);
        assert.equal(header(x, 'allow'), 'GET, HEAD');
        assertBare(x);
      }
    });

    it('no other path answers without credentials', async () => {
      for (const path of ['/healthz/', '/readyz/x', '/HEALTHZ', '/%68ealthz', '/healthz.json', '/status']) {
        const x = await get(ts.url, path);
        assert.equal(x.status, 404, path);
      }
      // `//healthz` parses as an authority ("healthz") and the path `/`: the plain-GET-on-/ answer.
      for (const path of ['/', '//healthz']) assert.equal((await get(ts.url, path)).status, 400, path);
      // A WebSocket upgrade on the health paths is not a way in either.
      for (const path of ['/healthz', '/readyz']) {
        assert.equal((await get(ts.url, path, 'GET', UPGRADE_HEADERS)).status, 404, path);
      }
      const upgrade = await get(ts.url, '/', 'GET', UPGRADE_HEADERS);
      assert.equal(upgrade.status, withToken ? 401 : 101);
    });
  });
}

describe('readiness: the sandbox backend', () => {
  let ts: TestServer;
  const missing = '/nonexistent/corral-test/bwrap';
  before(async () => {
    ts = await startTestServer({
      launcher: { sandbox: { bwrapPath: missing } },
      listen: {
        auth: tokenAuth(TOKEN),
        readiness: defaultReadiness({ cacheMs: 0, sandbox: { bwrapPath: missing } }),
      },
    });
  });
  after(() => ts.close());

  it('bwrap missing → 503 naming only the failing check; liveness stays 200', async () => {
    const x = await get(ts.url, '/readyz');
    assert.equal(x.status, 503);
    assert.equal(x.body, '{"status":"unavailable","failing":["sandbox"]}');
    assert.ok(!x.body.includes(missing) && !x.body.includes('bwrap'));
    assertBare(x);
    assert.equal((await get(ts.url, '/healthz')).status, 200);
  });

  it('and a sandboxed start on that server does fail, as readiness said', async () => {
    const c = await RpcClient.open(`${ts.url}/?token=${TOKEN}`);
    try {
      const e = await c.requestError('process/start', {
        processId: 'p1',
        argv: ['/bin/true'],
        cwd: '/',
        env: {},
        tty: false,
        arg0: null,
        sandbox: seed({ cwd: '/' }),
      });
      assert.ok(e instanceof RpcCallError);
      assert.equal(e.code, -32603);
      assert.match(e.message, /bwrap|bubblewrap/);
    } finally {
      c.close();
    }
  });
});

describe('readiness: checks registered by other modules', () => {
  let ts: TestServer;
  before(async () => {
    ts = await startTestServer({ listen: { readiness: new Readiness({ cacheMs: 0, timeoutMs: 200 }) } });
  });
  after(() => ts.close());

  it('a module adds a check through listener.readiness; its state decides /readyz, and it can be removed', async () => {
    let open = true;
    let audit: () => boolean | Promise<boolean> = () => open;
    const remove = ts.listener.readiness.register('audit', () => audit());
    assert.equal((await get(ts.url, '/readyz')).status, 200);
    open = false;
    const x = await get(ts.url, '/readyz');
    assert.equal(x.status, 503);
    assert.equal(x.body, '{"status":"unavailable","failing":["audit"]}');
    audit = () => {
      throw new Error('SQLITE_CANTOPEN: /secret/path/audit.db');
    };
    assert.equal((await get(ts.url, '/readyz')).body, '{"status":"unavailable","failing":["audit"]}');
    audit = () => new Promise<boolean>(() => {});
    assert.equal((await get(ts.url, '/readyz')).status, 503, 'a check that never answers is failing');
    remove();
    assert.equal((await get(ts.url, '/readyz')).status, 200);
  });

  it('names are short lowercase words, and unique', () => {
    const r = new Readiness();
    r.register('sandbox', () => true);
    assert.throws(() => r.register('sandbox', () => true), /already registered/);
    assert.throws(() => r.register('Audit DB', () => true), /must match/);
    assert.deepEqual(r.names(), ['sandbox']);
  });

  it('a failing check is logged when it starts failing or its reason changes, not on every probe', async () => {
    const logged: string[] = [];
    let reason = 'disk gone';
    let ok = false;
    const r = new Readiness({ cacheMs: 0, onFailure: (name, why) => logged.push(`${name}: ${why}`) });
    r.register('audit', () => {
      if (ok) return true;
      throw new Error(reason);
    });
    for (let i = 0; i < 3; i++) assert.equal((await r.evaluate()).ready, false);
    reason = 'database locked';
    await r.evaluate();
    ok = true;
    assert.equal((await r.evaluate()).ready, true);
    ok = false;
    await r.evaluate();
    assert.deepEqual(logged, ['audit: disk gone', 'audit: database locked', 'audit: database locked']);
  });

  it('a flood of probes runs the checks once per cache period', async () => {
    let runs = 0;
    const r = new Readiness({ cacheMs: 60_000 });
    r.register('counted', () => {
      runs++;
      return true;
    });
    await Promise.all(Array.from({ length: 50 }, () => r.evaluate()));
    assert.equal(runs, 1);
  });
});

describe('readiness of the CLI in a pod without bubblewrap (root: a mount namespace hides /usr/bin/bwrap)', () => {
  const root = process.getuid?.() === 0;
  it('corral exec-server answers /readyz 503 ["sandbox"] and /healthz 200', {
    skip: !root && 'needs root',
  }, async () => {
    const d = tempDir('corral-kube-health-');
    const tokenFile = join(d.path, 'token');
    writeFileSync(tokenFile, TOKEN);
    chmodSync(tokenFile, 0o600);
    const blank = join(d.path, 'not-bwrap');
    writeFileSync(blank, '');
    const script = 'mount --bind "$0" /usr/bin/bwrap && exec "$@"';
    const proc = spawn(
      'unshare',
      [
        '-m',
        '--propagation',
        'private',
        '--',
        'sh',
        '-c',
        script,
        blank,
        process.execPath,
        CORRAL_BIN,
      ].concat(['exec-server', '--listen', 'ws://127.0.0.1:0', '--ws-token-file', tokenFile]),
      {
        cwd: REPO,
        env: { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: d.path },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    try {
      const [url] = await createInterface({ input: proc.stdout! })
        [Symbol.asyncIterator]()
        .next()
        .then((r) => [r.value]);
      assert.match(url, /^ws:\/\/127\.0\.0\.1:\d+/);
      const base = url.replace(/\/\?token=.*$/, '');
      const ready = await get(base, '/readyz');
      assert.equal(ready.status, 503);
      assert.equal(ready.body, '{"status":"unavailable","failing":["sandbox"]}');
      assert.equal((await get(base, '/healthz')).status, 200);
    } finally {
      proc.kill('SIGTERM');
      await new Promise((r) => proc.once('exit', r));
      d.cleanup();
    }
  });
});
