/**
 * mitm_hooks and the credential broker (issue 34, items 5 and 6), on loopback: names resolve to 127.0.0.1 through
 * the test's resolver, and the origin (its own CA, trusted through the proxy's startup CA list) has a leaf for them.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { applyProxyEnv } from '../../src/network/env.js';
import { CredentialBroker, plainCarrier } from '../../src/network/mitm/broker.js';
import { createMitmTrust, type MitmTrust } from '../../src/network/mitm/trust.js';
import { NetworkLog } from '../../src/server/monitor/monitorNetwork.js';
import { connectVia, exchange, socksConnect, tlsOver } from '../helpers/mitmClient.js';
import { tempDir } from '../helpers/server.js';
import { startTlsOrigin, type TlsOrigin } from '../helpers/tlsOrigin.js';
import {
  type ProxyFixture,
  RawClient,
  request,
  startEcho,
  startOrigin,
  startProxy,
} from './network-helpers.js';

const toLoopback = () => Promise.resolve(['127.0.0.1']);
const SECRET = 's3cr3t-hook-value-0123456789';
const REAL = `ghp_${'Ab3'.repeat(12)}`;

let dir: { path: string; cleanup(): void };
let origin: TlsOrigin;
let trust: MitmTrust;
before(async () => {
  dir = tempDir('corral-mitm-hooks-');
  origin = await startTlsOrigin(dir.path, { names: ['git.corp.test', 'other.test', 'hooked.test'] });
  trust = createMitmTrust({ SSL_CERT_FILE: origin.caPath }, dir.path);
});
after(async () => {
  await origin.close();
  dir.cleanup();
});

async function ask(f: ProxyFixture, host: string, head: string): Promise<string> {
  const { socket } = await connectVia(f.proxy.httpPort, `${host}:${origin.port}`);
  const s = await tlsOver(socket, host, readFileSync(trust.bundlePath()));
  return exchange(s, `${head}host: ${host}:${origin.port}\r\n`);
}

describe('mitm_hooks', () => {
  let f: ProxyFixture;
  before(async () => {
    f = await startProxy(
      {
        mode: 'full',
        allow_local_binding: true,
        domains: { 'hooked.test': 'allow', '127.0.0.1': 'allow' },
        mitm_hooks: [
          {
            host: 'hooked.test',
            match: { methods: ['GET', 'POST'], path_prefixes: ['/api/'], headers: { 'x-team': ['blue'] } },
            actions: {
              strip_request_headers: ['x-drop', 'authorization'],
              inject_request_headers: [
                { name: 'authorization', secret_env_var: 'HOOK_SECRET', prefix: 'Bearer ' },
              ],
            },
          },
        ],
      },
      {
        mitmTrust: trust,
        resolver: toLoopback,
        secretEnv: { CORRAL_MITM_SECRET_ENV: 'HOOK_SECRET', HOOK_SECRET: SECRET },
      },
    );
  });
  after(() => f.close());

  test('a matching request has its headers stripped and the secret injected; the audit names the hook, never the value', async () => {
    const res = await ask(
      f,
      'hooked.test',
      'POST /api/x?q=1 HTTP/1.1\r\nx-team: blue\r\nx-drop: 1\r\nauthorization: Bearer from-the-agent\r\ncontent-length: 0\r\n',
    );
    assert.match(res, /^HTTP\/1\.1 200 [\s\S]*ok POST \/api\/x\?q=1$/);
    const seen = origin.seen.at(-1)!;
    assert.equal(seen.headers.authorization, `Bearer ${SECRET}`);
    assert.equal(seen.headers['x-drop'], undefined);
    const ev = f.audits.find((e) => e['url.path'] === '/api/x');
    assert.equal(ev?.['network.credential.injected'], 'mitm_hooks[0]');
    const everything = JSON.stringify([f.audits, f.blocked, f.logs]);
    assert.ok(!everything.includes(SECRET));
  });

  test('a request to the hooked host that matches no hook is 403 mitm_hook_denied and never reaches the origin', async () => {
    const before = origin.seen.length;
    for (const head of [
      'GET /other HTTP/1.1\r\nx-team: blue\r\n',
      'GET /api/x HTTP/1.1\r\nx-team: red\r\n',
      'DELETE /api/x HTTP/1.1\r\nx-team: blue\r\n',
    ]) {
      const res = await ask(f, 'hooked.test', head);
      assert.match(res, /^HTTP\/1\.1 403 /, head);
      assert.equal(JSON.parse(res.slice(res.indexOf('\r\n\r\n') + 4)).reason, 'mitm_hook_denied');
    }
    assert.equal(origin.seen.length, before);
    assert.equal(f.blocked.at(-1)?.record.reason, 'mitm_hook_denied');
    assert.equal(f.blocked.at(-1)?.record.protocol, 'https');
  });

  test('in full mode an unhooked host stays an opaque tunnel, and a hooked host that does not start TLS too', async () => {
    const res = await ask(f, '127.0.0.1', 'GET /plain HTTP/1.1\r\n');
    assert.match(res, /ok GET \/plain$/);
    assert.ok(!f.audits.some((e) => e['url.path'] === '/plain'), 'not intercepted');
    const echo = await startEcho();
    try {
      const c = await RawClient.open(f.proxy.httpPort);
      c.write(`CONNECT hooked.test:${echo.port} HTTP/1.1\r\nhost: hooked.test:${echo.port}\r\n\r\nping\n`);
      await c.readResponse();
      assert.equal((await c.read(5)).toString(), 'ping\n');
      c.socket.destroy();
    } finally {
      await echo.close();
    }
  });

  test('full mode: a WebSocket upgrade to a hooked host is checked, then spliced after the 101; SOCKS5 to it is intercepted too', async () => {
    const { socket } = await connectVia(f.proxy.httpPort, `hooked.test:${origin.port}`);
    const s = await tlsOver(socket, 'hooked.test', readFileSync(trust.bundlePath()));
    let got = '';
    const echoed = new Promise<void>((resolve) => {
      s.on('data', (d: Buffer) => {
        got += d.toString('latin1');
        if (got.includes('after-101')) resolve();
      });
    });
    s.write(
      `GET /api/ws HTTP/1.1\r\nhost: hooked.test:${origin.port}\r\nx-team: blue\r\nupgrade: echo\r\nconnection: upgrade\r\n\r\n`,
    );
    await new Promise<void>((r) => {
      const check = () => (got.includes('\r\n\r\n') ? r() : s.once('data', check));
      s.once('data', check);
    });
    assert.match(got, /^HTTP\/1\.1 101 /);
    s.write('after-101');
    await echoed;
    s.destroy();
    assert.equal(
      origin.seen.at(-1)!.headers.authorization,
      `Bearer ${SECRET}`,
      'the hook applied to the upgrade',
    );

    const { s: socks, reply: hello } = await socksConnect(f.proxy.socksPort!, 'hooked.test', origin.port);
    assert.equal(hello[3], 0);
    const t = await tlsOver(socks, 'hooked.test', readFileSync(trust.bundlePath()));
    assert.match(
      await exchange(t, `GET /nope HTTP/1.1\r\nhost: hooked.test:${origin.port}\r\n`),
      /mitm_hook_denied/,
    );
  });

  test('a secret the operator did not list, one not set, or a file outside the list fails the start naming the hook', async () => {
    const hook = (inject: Record<string, unknown>) => ({
      mode: 'full',
      mitm_hooks: [
        { host: 'hooked.test', actions: { inject_request_headers: [{ name: 'authorization', ...inject }] } },
      ],
    });
    await assert.rejects(
      startProxy(hook({ secret_env_var: 'PATH' }), { mitmTrust: trust, secretEnv: { PATH: '/bin' } }),
      /mitm_hooks\[0\]\.actions\.inject_request_headers\[0\]: secret_env_var PATH is not listed in the server's CORRAL_MITM_SECRET_ENV/,
    );
    await assert.rejects(
      startProxy(hook({ secret_env_var: 'NOPE' }), {
        mitmTrust: trust,
        secretEnv: { CORRAL_MITM_SECRET_ENV: 'NOPE' },
      }),
      /secret_env_var NOPE is not set/,
    );
    await assert.rejects(
      startProxy(hook({ secret_file: '/etc/shadow' }), {
        mitmTrust: trust,
        secretEnv: { CORRAL_MITM_SECRET_FILES: `${dir.path}/secrets` },
      }),
      /secret_file \/etc\/shadow is not under the server's CORRAL_MITM_SECRET_FILES/,
    );
    await assert.rejects(
      startProxy(hook({ secret_file: `${dir.path}/secrets/../ca.key` }), {
        mitmTrust: trust,
        secretEnv: { CORRAL_MITM_SECRET_FILES: `${dir.path}/secrets` },
      }),
      /is not under/,
    );
  });
});

describe('credential broker', () => {
  let f: ProxyFixture;
  let childEnv: Record<string, string>;
  before(async () => {
    f = await startProxy(
      {
        mode: 'full',
        allow_local_binding: true,
        credential_broker: true,
        domains: { 'git.corp.test': 'allow', 'other.test': 'allow' },
      },
      { mitmTrust: trust, resolver: toLoopback },
    );
    childEnv = applyProxyEnv(
      { PATH: '/bin', GH_TOKEN: REAL, GH_HOST: 'git.corp.test', OPENAI_API_KEY: 'sk-proj-abc123DEF456ghi' },
      f.proxy,
    );
  });
  after(() => f.close());

  test("the child's env holds shaped dummies (same prefix and length), never the real value", () => {
    const dummy = childEnv.GH_TOKEN!;
    assert.notEqual(dummy, REAL);
    assert.equal(dummy.length, REAL.length);
    assert.match(dummy, /^ghp_[A-Za-z0-9]{36}$/);
    assert.match(childEnv.OPENAI_API_KEY!, /^sk-proj-[a-z]{3}[0-9]{3}[A-Z]{3}[0-9]{3}[a-z]{3}$/);
    assert.ok(!JSON.stringify(childEnv).includes(REAL));
  });

  test('the dummy becomes the real token only for its host (GH_HOST here); elsewhere the dummy goes as it is', async () => {
    const auth = `authorization: token ${childEnv.GH_TOKEN}\r\n`;
    assert.match(await ask(f, 'git.corp.test', `GET /user HTTP/1.1\r\n${auth}`), /ok GET \/user$/);
    assert.equal(origin.seen.at(-1)!.headers.authorization, `token ${REAL}`);
    assert.match(await ask(f, 'other.test', `GET /leak HTTP/1.1\r\n${auth}`), /ok GET \/leak$/);
    assert.equal(origin.seen.at(-1)!.headers.authorization, `token ${childEnv.GH_TOKEN}`);
    // Two dummies (or one twice), or two Authorization headers: nothing is injected.
    await ask(
      f,
      'git.corp.test',
      `GET /twice HTTP/1.1\r\nauthorization: ${childEnv.GH_TOKEN} ${childEnv.GH_TOKEN}\r\n`,
    );
    assert.ok(!origin.seen.at(-1)!.headers.authorization?.includes(REAL));
    await ask(f, 'git.corp.test', `GET /two HTTP/1.1\r\n${auth}${auth}`);
    assert.ok(!JSON.stringify(origin.seen.at(-1)!.headers).includes(REAL));
    const ev = f.audits.find((e) => e['url.path'] === '/user');
    assert.equal(ev?.['network.credential.injected'], 'GH_TOKEN');
    assert.ok(!f.audits.some((e) => e['url.path'] === '/leak' && e['network.credential.injected']));
  });

  test('plain HTTP: injected only to a loopback target (here) or with the dangerous flag; the carrier rule', async () => {
    const plain = await startOrigin();
    try {
      const auth = `authorization: token ${childEnv.GH_TOKEN}\r\n`;
      const ask = (host: string) =>
        request(
          f.proxy.httpPort,
          `GET http://${host}:${plain.port}/p HTTP/1.1\r\nhost: ${host}:${plain.port}\r\n${auth}\r\n`,
        );
      assert.equal((await ask('git.corp.test')).status, 200);
      assert.equal(plain.requests.at(-1)!.headers.authorization, `token ${REAL}`);
      assert.equal((await ask('other.test')).status, 200);
      assert.equal(plain.requests.at(-1)!.headers.authorization, `token ${childEnv.GH_TOKEN}`);
    } finally {
      await plain.close();
    }
    assert.equal(plainCarrier(['127.0.0.1', '::1']), 'plain-loopback');
    assert.equal(plainCarrier(['127.0.0.1', '192.0.2.1']), 'plain');
    assert.equal(plainCarrier([]), 'plain');
    const strict = new CredentialBroker({ plaintext: false });
    const env = { GH_TOKEN: REAL };
    strict.virtualize(env);
    const raw = ['Authorization', `token ${env.GH_TOKEN}`];
    assert.equal(
      strict.rewrite('github.com', raw, 'plain'),
      undefined,
      'no injection into non-loopback plain HTTP',
    );
    assert.deepEqual(strict.rewrite('github.com', raw, 'tls')?.headers, ['Authorization', `token ${REAL}`]);
    assert.equal(strict.rewrite('api.github.com.evil.test', raw, 'tls'), undefined);
    assert.equal(strict.rewrite('evilgithub.com', raw, 'tls'), undefined);
    assert.ok(strict.rewrite('corp.ghe.com', raw, 'tls'));
    const dangerous = new CredentialBroker({ plaintext: true });
    const env2 = { GH_TOKEN: REAL };
    dangerous.virtualize(env2);
    assert.ok(dangerous.rewrite('github.com', ['authorization', `token ${env2.GH_TOKEN}`], 'plain'));
  });

  test("the panel's rows say intercepted and name the injected credential, never its value", () => {
    const log = new NetworkLog();
    const rows = f.audits.map((e) => log.addAudit(e));
    const user = rows.find((r) => r.path === '/user');
    assert.equal(user?.intercepted, true);
    assert.equal(user?.credential, 'GH_TOKEN');
    assert.equal(user?.protocol, 'https');
    assert.equal(rows.find((r) => r.path === '/leak')?.credential, undefined);
    assert.ok(!JSON.stringify(rows).includes(REAL));
  });

  test('the real value is in no file the server wrote, no log, no audit or blocked record', () => {
    const everything = JSON.stringify([f.audits, f.blocked, f.logs]);
    assert.ok(!everything.includes(REAL));
    const trustDir = join(trust.bundlePath(), '..');
    for (const name of readdirSync(trustDir)) {
      const p = join(trustDir, name);
      if (statSync(p).isFile()) assert.ok(!readFileSync(p, 'latin1').includes(REAL), p);
    }
  });
});
