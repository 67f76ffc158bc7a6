/**
 * TLS interception end to end (issue 34): a command in a bwrap sandbox with an enforced managed network in limited
 * mode with `mitm: true` reaches a loopback HTTPS origin (its own CA, trusted by the server because the server
 * process started with SSL_CERT_FILE naming it) with curl, node (https and tls with NODE_EXTRA_CA_CERTS), python3
 * (default context from SSL_CERT_FILE, plus VERIFY_X509_STRICT) and git (clone over https): GET works, POST is 403
 * method_not_allowed, and every inner request is an audit event with protocol https.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { NetworkAuditEvent } from '../../src/protocol/network.js';
import type { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { startTlsOrigin, type TlsOrigin } from '../helpers/tlsOrigin.js';
import { type Fixture, fixture, PATH, seed, workspaceEntries } from './sandbox-util.js';

let f: Fixture;
let ts: TestServer;
let c: RpcClient & { sessionId: string };
let origin: TlsOrigin;
const audits: NetworkAuditEvent[] = [];
let n = 0;

before(async () => {
  f = await fixture();
  // A tiny git repository, served as dumb HTTP (GETs only) under /files/repo.git/.
  const files = join(f.root, 'files');
  const work = join(f.root, 'src-repo');
  mkdirSync(work, { recursive: true });
  const git = (cwd: string, ...args: string[]) =>
    execFileSync('git', args, {
      cwd,
      stdio: 'pipe',
      env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1', HOME: f.root },
    });
  git(work, 'init', '-q', '-b', 'main');
  writeFileSync(join(work, 'hello.txt'), 'hello through the proxy\n');
  git(work, 'add', 'hello.txt');
  git(work, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'one');
  mkdirSync(files);
  git(f.root, 'clone', '-q', '--bare', work, join(files, 'repo.git'));
  git(join(files, 'repo.git'), 'update-server-info');
  origin = await startTlsOrigin(f.root, { files });
  // The server trusts the origin's CA as it would if started with SSL_CERT_FILE=… (read on first interception).
  process.env.SSL_CERT_FILE = origin.caPath;
  ts = await startTestServer({ launcher: { sandbox: { tmpdir: f.T } } });
  ts.server.networkEvents.on('audit', (e) => audits.push(e));
  c = await ts.client('mitm-sandbox');
});
after(async () => {
  await ts.close();
  await origin.close();
  await f.close();
});

async function runLimited(
  script: string,
  env: Record<string, string> = {},
  network: Record<string, unknown> = { mode: 'limited', mitm: true, domains: { '127.0.0.1': 'allow' } },
) {
  const processId = `mitm-${++n}`;
  await c.request('process/start', {
    processId,
    argv: ['/bin/sh', '-c', script],
    cwd: f.W,
    env: { PATH, HOME: f.T, ...env },
    tty: false,
    arg0: null,
    sandbox: seed({
      cwd: f.W,
      entries: workspaceEntries(),
      enforceManagedNetwork: true,
    }),
    managedNetwork: {
      config: { network: { enabled: true, ...network } },
    },
  });
  const events = await c.collect(processId, 30_000);
  const exited = events.find((e) => e.method === 'process/exited')!;
  return {
    exitCode: exited.params.exitCode as number,
    stdout: c.output(processId, 'stdout'),
    stderr: c.output(processId, 'stderr'),
  };
}

const NODE_CLIENT = `
const net = require('net'), tls = require('tls');
const proxy = new URL(process.env.HTTPS_PROXY);
function ask(method, path) {
  return new Promise((resolve, reject) => {
    const raw = net.connect(+proxy.port, proxy.hostname, () => raw.write('CONNECT ' + process.argv[1] + ' HTTP/1.1\\r\\n\\r\\n'));
    raw.once('data', (d) => {
      if (!/^HTTP\\/1\\.1 200/.test(String(d))) return reject(new Error(String(d)));
      const host = process.argv[1].split(':')[0];
      const s = tls.connect({ socket: raw, host }, () => {
        let out = '';
        s.on('data', (x) => (out += x));
        s.on('end', () => resolve(out.split('\\r\\n')[0] + ' | ' + out.slice(out.indexOf('\\r\\n\\r\\n') + 4)));
        s.write(method + ' ' + path + ' HTTP/1.1\\r\\nhost: ' + process.argv[1] + '\\r\\ncontent-length: 0\\r\\nconnection: close\\r\\n\\r\\n');
      });
      s.on('error', reject);
    });
  });
}
(async () => {
  console.log('node-get', await ask('GET', '/node'));
  console.log('node-post', (await ask('POST', '/node')).split(' | ')[0]);
})().catch((e) => { console.log('node-error', e.message); process.exit(1); });
`;

const PY_CLIENT = `
import ssl, sys, urllib.request, urllib.error
ctx = ssl.create_default_context()
ctx.verify_flags |= ssl.VERIFY_X509_STRICT
o = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx))
print('py-get', o.open('https://' + sys.argv[1] + '/py').read().decode())
try:
    o.open(urllib.request.Request('https://' + sys.argv[1] + '/py', data=b'x', method='POST'))
except urllib.error.HTTPError as e:
    print('py-post', e.code)
`;

describe('TLS interception inside a bwrap sandbox (limited mode, mitm: true)', { skip: needsSandbox }, () => {
  test('curl, node, python3 and git: GET succeeds, POST is 403 method_not_allowed, each request audited as https', async () => {
    const a = `127.0.0.1:${origin.port}`;
    const url = `https://${a}`;
    const r = await runLimited(
      [
        // NO_PROXY names loopback, and the origin is on loopback: the tools are told to use the proxy all the same.
        'unset NO_PROXY no_proxy',
        'echo "ca=$SSL_CERT_FILE"',
        `curl -sS -m10 ${url}/curl; echo`,
        `curl -sS -m10 -o /dev/null -w 'curl-post=%{http_code}\\n' -d x ${url}/curl`,
        `node -e "$NODE_CLIENT" ${a}`,
        `python3 -c "$PY_CLIENT" ${a}`,
        `git clone -q ${url}/files/repo.git "$HOME/clone" && cat "$HOME/clone/hello.txt"`,
      ].join('; '),
      { NODE_CLIENT, PY_CLIENT },
    );
    const out = r.stdout;
    assert.match(out, /ca=\/.*corral-ca-\d+\/\d+\.\d+\.\d+\.[0-9a-f]{64}\.pem/, r.stderr);
    assert.match(out, /^ok GET \/curl$/m, r.stderr);
    assert.match(out, /^curl-post=403$/m);
    assert.match(out, /^node-get HTTP\/1\.1 200 OK \| ok GET \/node$/m, r.stderr);
    assert.match(out, /^node-post HTTP\/1\.1 403 Forbidden$/m);
    assert.match(out, /^py-get ok GET \/py$/m, r.stderr);
    assert.match(out, /^py-post 403$/m);
    assert.match(out, /^hello through the proxy$/m, r.stderr);
    assert.ok(!origin.seen.some((s) => s.method === 'POST'), 'no POST reached the origin');
    const inner = audits.filter((e) => e['network.transport.protocol'] === 'https');
    const seen = (m: string, p: string, d: string) =>
      inner.some(
        (e) => e['http.request.method'] === m && e['url.path'] === p && e['network.policy.decision'] === d,
      );
    assert.ok(seen('GET', '/curl', 'allow') && seen('POST', '/curl', 'deny'), JSON.stringify(inner));
    assert.ok(seen('GET', '/node', 'allow') && seen('POST', '/node', 'deny'));
    assert.ok(seen('GET', '/py', 'allow') && seen('POST', '/py', 'deny'));
    assert.ok(inner.some((e) => e['url.path']?.startsWith('/files/repo.git/')));
    assert.ok(inner.every((e) => e['network.intercepted'] === true));
  });

  test('credential_broker: the sandboxed command sees a shaped dummy, never the token its start carried', async () => {
    const real = `ghp_${'Zq7'.repeat(12)}`;
    const r = await runLimited(
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion, not a template
      'echo "tok=$GH_TOKEN len=${#GH_TOKEN}"; env | grep -c "Zq7Zq7" || true',
      { GH_TOKEN: real },
      { mode: 'full', credential_broker: true, domains: { '127.0.0.1': 'allow' } },
    );
    assert.match(r.stdout, /^tok=ghp_[A-Za-z0-9]{36} len=40$/m, r.stderr);
    assert.ok(!r.stdout.includes(real));
    assert.match(r.stdout, /^0$/m, 'the real value is nowhere in the environment');
  });
});
