/**
 * The Landlock backend where namespaces are unavailable (issue 17), in the two environments of
 * test/helpers/namespaceless.ts (a user namespace with max_user_namespaces = 0; a Docker-like seccomp profile made
 * with our BPF generator). A real exec server runs in the environment, as root; the agent talks to it over the
 * protocol from outside; every check is made on the host.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { DoctorReport } from '../../src/protocol/doctor.js';
import { CORRAL_BIN, ROOT } from '../helpers/cli.js';
import type { RpcCallError } from '../helpers/client.js';
import {
  BWRAP_FAILURE,
  NO_NAMESPACE_ENVS,
  type NoNamespaces,
  noNamespacesArgv,
  whyNoNamespacesSkip,
} from '../helpers/namespaceless.js';
import {
  type HostileServer,
  PY,
  runAgent,
  sandboxParam,
  scratch,
  startServer,
} from '../hostile/sandbox-harness.js';

/** Socket probes: each prints its name and OK or the errno name. */
const NET_PROBE = `
import errno, os, socket
def t(name, fn):
    try:
        fn(); print(name, 'OK')
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def unix():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(os.environ['HOST_SOCK'])
t('tcp-socket', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
t('udp-socket', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
t('tcp6-socket', lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
t('tcp-connect', lambda: socket.create_connection(('127.0.0.1', int(os.environ['TCP_PORT'])), 3))
t('unix-connect', unix)
# Node 20 binds an abstract name with the whole sun_path (NUL-padded), Node 24 with the name's own length:
# try both, OK when either connects.
def abstract():
    name = b'\\0corral-ll-abstract'
    try:
        socket.socket(socket.AF_UNIX).connect(name.ljust(108, b'\\0'))
    except OSError:
        socket.socket(socket.AF_UNIX).connect(name)
t('abstract-connect', abstract)
`;

/** Managed network probes: through the proxy, around it on loopback, and the accepted weakness. */
const MANAGED_PROBE = `
import errno, os, socket, urllib.request
def t(name, fn):
    try:
        r = fn(); print(name, 'OK', r if r is not None else '')
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def get():
    return urllib.request.urlopen('http://example.invalid/managed', timeout=5).read().decode().strip()
def conn(host, port):
    s = socket.create_connection((host, port), 3); s.close()
t('via-proxy', get)
t('direct-other-port', lambda: conn('127.0.0.1', int(os.environ['OTHER_PORT'])))
t('proxy-port-other-address', lambda: conn('127.0.0.2', int(os.environ['PROXY_PORT'])))
t('udp-socket', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
t('listen', lambda: socket.create_server(('127.0.0.1', 0)))
`;

function lineOf(output: string, name: string): string {
  return new RegExp(`^${name} .*$`, 'm').exec(output)?.[0] ?? `${name}: no output`;
}

/** `corral doctor …` in the environment: its exit code and stdout. */
function doctor(
  env: NoNamespaces,
  dir: string,
  args: string[],
): Promise<{ code: number | null; out: string }> {
  const pre = noNamespacesArgv(env, dir);
  const child = spawn(pre[0]!, [...pre.slice(1), process.execPath, CORRAL_BIN, 'doctor', ...args], {
    cwd: ROOT,
    env: { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: '/root' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code, out })));
}

for (const env of NO_NAMESPACE_ENVS) {
  describe(`Landlock fallback where namespaces fail (${env})`, { skip: whyNoNamespacesSkip() }, () => {
    let s: ReturnType<typeof scratch>;
    let T: string;
    let OUT: string;
    let fallback: HostileServer;
    let weaker: HostileServer;
    let off: HostileServer;
    before(async () => {
      s = scratch('root');
      T = s.mk('tmpdir');
      OUT = s.mk('outside');
      const wrap = noNamespacesArgv(env, s.root);
      [fallback, weaker, off] = await Promise.all([
        startServer({ who: 'root', tmpdir: T, wrap, sandbox: { fallback: 'landlock' } }),
        startServer({
          who: 'root',
          tmpdir: T,
          wrap,
          sandbox: { fallback: 'landlock', acceptWeaker: ['proxy-port'] },
        }),
        startServer({ who: 'root', tmpdir: T, wrap }),
      ]);
    });
    after(async () => {
      await Promise.all([fallback?.close(), weaker?.close(), off?.close()]);
      s?.cleanup();
    });

    const workspace = () => {
      const W = s.mk(`ws-${Math.random().toString(36).slice(2, 8)}`);
      mkdirSync(join(W, 'src'));
      mkdirSync(join(W, '.git', 'hooks'), { recursive: true });
      writeFileSync(join(W, 'README'), 'readme\n');
      return W;
    };

    for (const tty of [false, true]) {
      test(`workspace-write writes inside and nowhere else; the report says landlock (${tty ? 'tty' : 'pipes'})`, async () => {
        const W = workspace();
        const c = await fallback.client();
        const r = await runAgent(c, {
          argv: [
            '/bin/sh',
            '-c',
            [
              'echo a > src/new.txt && echo WROTE-SUB',
              'echo b >> README && echo WROTE-README',
              'echo c > "$OUT/x" || echo OUTSIDE-DENIED',
              'echo d > new-top.txt || echo TOP-FROZEN',
              'echo e > .git/hooks/pre-commit || echo GIT-DENIED',
              'mkdir .codex || echo CODEX-DENIED',
              'echo f > "$TMPDIR/t" && echo TMP-OK',
              'echo g > /etc/corral-ll || echo ETC-DENIED',
            ].join('; '),
          ],
          cwd: W,
          tty,
          env: { OUT },
          sandbox: sandboxParam('0.169', { cwd: W }),
        });
        assert.equal(r.sandboxType, 'linuxSeccomp');
        assert.deepEqual(r.guarantees, {
          backend: 'landlock',
          reason: 'fallback',
          landlockAbi: r.guarantees?.landlockAbi,
          weaker: [],
        });
        assert.ok((r.guarantees?.landlockAbi ?? 0) >= 6, r.output);
        for (const w of [
          'WROTE-SUB',
          'WROTE-README',
          'OUTSIDE-DENIED',
          'TOP-FROZEN',
          'GIT-DENIED',
          'CODEX-DENIED',
          'TMP-OK',
          'ETC-DENIED',
        ])
          assert.match(r.output, new RegExp(w), r.output);
        assert.match(r.output, /Permission denied/);
        assert.equal(readFileSync(join(W, 'src', 'new.txt'), 'utf8'), 'a\n');
        assert.equal(readFileSync(join(W, 'README'), 'utf8'), 'readme\nb\n');
        for (const p of [
          join(OUT, 'x'),
          join(W, 'new-top.txt'),
          join(W, '.git', 'hooks', 'pre-commit'),
          join(W, '.codex'),
          '/etc/corral-ll',
        ])
          assert.ok(!existsSync(p), `${p} exists\n${r.output}`);
      });
    }

    test('read-only fails everywhere: workspace, temp dirs, outside', async () => {
      const W = workspace();
      const c = await fallback.client();
      const r = await runAgent(c, {
        argv: [
          '/bin/sh',
          '-c',
          'cat README; for f in "$PWD/x" "$PWD/src/x" "$TDIR/x" /tmp/corral-ll-ro "$OUT/x"; do echo x > "$f" && echo "WROTE $f"; done; rm README; mkdir d; echo END',
        ],
        cwd: W,
        tty: false,
        env: { OUT, TDIR: T },
        sandbox: sandboxParam('seed', { cwd: W, readOnly: true }),
      });
      assert.match(r.output, /^readme$/m);
      assert.match(r.output, /END/);
      assert.doesNotMatch(r.output, /WROTE/, r.output);
      assert.ok(existsSync(join(W, 'README')));
      for (const p of [
        join(W, 'x'),
        join(W, 'src', 'x'),
        join(T, 'x'),
        '/tmp/corral-ll-ro',
        join(OUT, 'x'),
        join(W, 'd'),
      ])
        assert.ok(!existsSync(p), p);
      assert.equal(r.guarantees?.backend, 'landlock');
    });

    test('restricted network: no TCP/UDP socket, no loopback connect, no host unix socket, no abstract socket', async () => {
      const W = workspace();
      writeFileSync(join(W, 'probe.py'), NET_PROBE);
      const sockPath = join(OUT, `host-${Math.random().toString(36).slice(2, 8)}.sock`);
      let unixConnections = 0;
      let tcpConnections = 0;
      let abstractConnections = 0;
      const unixSrv = net.createServer((sock) => {
        unixConnections++;
        sock.destroy();
      });
      const tcpSrv = net.createServer((sock) => {
        tcpConnections++;
        sock.destroy();
      });
      const abstractSrv = net.createServer((sock) => {
        abstractConnections++;
        sock.destroy();
      });
      await new Promise<void>((r) => unixSrv.listen(sockPath, r));
      await new Promise<void>((r) => tcpSrv.listen(0, '127.0.0.1', r));
      await new Promise<void>((r) => abstractSrv.listen('\0corral-ll-abstract', r));
      try {
        const c = await fallback.client();
        const port = (tcpSrv.address() as net.AddressInfo).port;
        // Control: unsandboxed, every probe gets through.
        const control = await runAgent(c, {
          argv: [PY, 'probe.py'],
          cwd: W,
          tty: false,
          env: { HOST_SOCK: sockPath, TCP_PORT: String(port) },
          sandbox: null,
        });
        for (const n of ['tcp-socket', 'udp-socket', 'tcp-connect', 'unix-connect', 'abstract-connect'])
          assert.match(lineOf(control.output, n), / OK/, control.output);
        const before = [unixConnections, tcpConnections, abstractConnections];
        const r = await runAgent(c, {
          argv: [PY, 'probe.py'],
          cwd: W,
          tty: false,
          env: { HOST_SOCK: sockPath, TCP_PORT: String(port) },
          sandbox: sandboxParam('seed', { cwd: W }),
        });
        for (const n of [
          'tcp-socket',
          'udp-socket',
          'tcp6-socket',
          'tcp-connect',
          'unix-connect',
          'abstract-connect',
        ])
          assert.equal(lineOf(r.output, n), `${n} EPERM`, r.output);
        assert.deepEqual([unixConnections, tcpConnections, abstractConnections], before);
      } finally {
        unixSrv.close();
        tcpSrv.close();
        abstractSrv.close();
      }
    });

    test('managed network runs under the connect supervisor: not refused, no weaker guarantee (issue 33, item 3)', async () => {
      const W = workspace();
      const c = await fallback.client();
      const r = await runAgent(c, {
        argv: ['/bin/true'],
        cwd: W,
        tty: false,
        env: { PATH: '/usr/bin:/bin', HTTP_PROXY: 'http://127.0.0.1:9' },
        sandbox: sandboxParam('seed', { cwd: W, enforceManagedNetwork: true }),
      });
      assert.equal(r.exitCode, 0, r.output);
      assert.deepEqual(r.guarantees?.weaker ?? [], [], r.output);
    });

    test('managed network (proxy-port accepted, not needed): the proxy works, loopback around it does not, nor the proxy port on another address', async () => {
      const W = workspace();
      writeFileSync(join(W, 'probe.py'), MANAGED_PROBE);
      const seen: string[] = [];
      const proxy = http.createServer((req, res) => {
        seen.push(`${req.method} ${req.url}`);
        res.end('proxied\n');
      });
      await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
      const proxyPort = (proxy.address() as net.AddressInfo).port;
      let elsewhere = 0;
      let other = 0;
      const sameport = net.createServer((sock) => {
        elsewhere++;
        sock.destroy();
      });
      const reached = () => elsewhere;
      const otherSrv = net.createServer((sock) => {
        other++;
        sock.destroy();
      });
      await new Promise<void>((r) => sameport.listen(proxyPort, '127.0.0.2', r));
      await new Promise<void>((r) => otherSrv.listen(0, '127.0.0.1', r));
      try {
        const c = await weaker.client();
        const r = await runAgent(c, {
          argv: [PY, 'probe.py'],
          cwd: W,
          tty: false,
          env: {
            HTTP_PROXY: `http://127.0.0.1:${proxyPort}`,
            http_proxy: `http://127.0.0.1:${proxyPort}`,
            PROXY_PORT: String(proxyPort),
            OTHER_PORT: String((otherSrv.address() as net.AddressInfo).port),
          },
          sandbox: sandboxParam('seed', { cwd: W, enforceManagedNetwork: true }),
        });
        // The connect supervisor (issue 33, item 3): no weaker guarantee even where proxy-port is accepted.
        assert.deepEqual(r.guarantees?.weaker ?? [], [], r.output);
        assert.equal(lineOf(r.output, 'via-proxy'), 'via-proxy OK proxied', r.output);
        assert.deepEqual(seen, ['GET http://example.invalid/managed']);
        assert.equal(lineOf(r.output, 'direct-other-port'), 'direct-other-port EACCES', r.output);
        assert.equal(other, 0);
        // Landlock's rule would be the port alone; the supervisor keeps it to the loopback proxy.
        assert.equal(
          lineOf(r.output, 'proxy-port-other-address'),
          'proxy-port-other-address EACCES',
          r.output,
        );
        assert.equal(reached(), 0, 'nothing reached the proxy port on 127.0.0.2');
        assert.equal(lineOf(r.output, 'udp-socket'), 'udp-socket EPERM', r.output);
        assert.equal(lineOf(r.output, 'listen'), 'listen EACCES', r.output);
      } finally {
        proxy.close();
        sameport.close();
        otherSrv.close();
      }
    });

    test('with the fallback off, a sandboxed start fails saying why and what to do', async () => {
      const W = workspace();
      const c = await off.client();
      const e = (await c
        .request('process/start', {
          processId: 'no-fallback',
          argv: ['/bin/true'],
          cwd: W,
          env: { PATH: '/usr/bin:/bin' },
          tty: false,
          sandbox: sandboxParam('0.169', { cwd: W }),
        })
        .then(
          () => null,
          (err: RpcCallError) => err,
        )) as RpcCallError | null;
      assert.ok(e, 'started without a sandbox backend');
      assert.equal(e.code, -32603);
      assert.match(e.message, BWRAP_FAILURE[env]);
      assert.match(e.message, /corral doctor/);
      assert.match(e.message, /--sandbox-fallback landlock/);
      // useLegacyLandlock still works there: Landlock needs no namespace.
      const r = await runAgent(c, {
        argv: ['/bin/sh', '-c', 'echo ok > src/ll.txt'],
        cwd: W,
        tty: false,
        sandbox: sandboxParam('0.169', { cwd: W, useLegacyLandlock: true }),
      });
      assert.equal(r.exitCode, 0, r.output);
      assert.equal(r.guarantees?.reason, 'useLegacyLandlock');
    });

    test('corral doctor says what is missing and what each policy gets, with and without the fallback', async () => {
      const human = await doctor(env, s.root, ['--sandbox-fallback', 'landlock']);
      assert.match(human.out, /✗ bubblewrap\s+\/usr\/bin\/bwrap .*cannot create namespaces/);
      assert.match(
        human.out,
        /fix: see "user namespaces" below, or start Corral with --sandbox-fallback landlock/,
      );
      assert.match(human.out, /✓ Landlock\s+ABI \d/);
      if (env === 'userns-max-0') {
        assert.match(human.out, /✗ user namespaces\s+user\.max_user_namespaces is 0/);
        assert.match(human.out, /fix: sysctl -w user\.max_user_namespaces=15000/);
        assert.match(human.out, /in a user namespace/);
      } else {
        assert.match(human.out, /seccomp\s+supported; this process already runs under 1 filter/);
      }
      assert.match(human.out, /✓ read-only\s+landlock: Landlock ABI \d+ \(fallback\), every element exact/);
      // issue 33, item 3: managed network under Landlock through the connect supervisor, with nothing accepted.
      assert.match(human.out, /✓ workspace-write, managed network\s+landlock: .*every element exact/);
      assert.match(human.out, /✓ Landlock\s+ABI \d.*managed network \(connect supervisor\)/);
      assert.equal(human.code, 0); // every policy runs (the managed one too, issue 33 item 3)
      const json = await doctor(env, s.root, ['--json']);
      const report = DoctorReport.parse(JSON.parse(json.out));
      const got = Object.fromEntries(report.policies.map((p) => [p.policy, p.sandbox]));
      assert.deepEqual(got, {
        'read-only': 'refused',
        'workspace-write': 'refused',
        'workspace-write, network enabled': 'refused',
        'workspace-write, managed network': 'refused',
        'useLegacyLandlock (workspace-write)': 'landlock',
      });
      assert.match(report.policies[0]!.detail, /--sandbox-fallback landlock/);
      assert.equal(report.checks.find((c) => c.id === 'bwrap')?.status, 'missing');
      const accepted = DoctorReport.parse(
        JSON.parse(
          (
            await doctor(env, s.root, [
              '--json',
              '--sandbox-fallback',
              'landlock',
              '--sandbox-accept-weaker',
              'proxy-port',
            ])
          ).out,
        ),
      );
      const managed = accepted.policies.find((p) => p.policy === 'workspace-write, managed network')!;
      assert.equal(managed.sandbox, 'landlock');
      assert.deepEqual(managed.guarantees?.weaker ?? [], []); // the connect supervisor: proxy-port is not needed
    });
  });
}
