import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { formatTag, ownTag } from '../../src/process/serverTag.js';
import { mountTargetLockDir } from '../../src/sandbox/linux/mountTargets.js';
import { needsSandbox } from '../helpers/native.js';
import { type Fixture, fixture, loggingProxy, PY, run, runPty, seed, waitFor } from './sandbox-util.js';

/** Managed network inside the sandbox (sandbox.md §8.6, case 12) and PTY launches (§11.5). */

let f: Fixture;
let proxy: Awaited<ReturnType<typeof loggingProxy>>;
before(async () => {
  f = await fixture();
  proxy = await loggingProxy();
});
after(async () => {
  await proxy.close();
  await f.close();
});

const opts = () => ({ tmpdir: f.T });

const ESCAPES = `
import socket, os, errno
def t(name, fn):
    try:
        fn(); print(name, 'OK')
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def tcp():
    s = socket.create_connection(('127.0.0.1', int(os.environ['PORT'])), timeout=3); s.close()
def tcp6():
    s = socket.create_connection(('::1', int(os.environ['PORT6'])), timeout=3); s.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('127.0.0.1', int(os.environ['UPORT']))); s.close()
t('tcp', tcp)
t('tcp6', tcp6)
t('udp', udp)
t('unix', lambda: socket.socket(socket.AF_UNIX).connect(os.environ['SOCK']))
t('socketpair', lambda: socket.socketpair())
print('proxy', os.environ.get('HTTP_PROXY'), os.environ.get('http_proxy'))
`;

function envFor(extra: Record<string, string> = {}) {
  return {
    PORT: String(f.port),
    PORT6: String(f.port6),
    UPORT: String(f.udpPort),
    SOCK: f.SOCK,
    HTTP_PROXY: `http://127.0.0.1:${proxy.port}`,
    ...extra,
  };
}

describe('managed network (enforceManagedNetwork)', { skip: needsSandbox }, () => {
  test('control: unsandboxed, the escape probes do reach the host listeners', async () => {
    const before = { ...f.hits };
    const r = await run(null, [PY, '-c', ESCAPES], { cwd: f.W, env: envFor() });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^tcp OK$/m);
    assert.match(r.stdout, /^tcp6 OK$/m);
    assert.match(r.stdout, /^unix OK$/m);
    assert.ok(await waitFor(() => f.hits.udp > before.udp, 2000), 'the UDP control datagram should arrive');
  });

  test('12: the proxy path works; direct TCP, IPv6, UDP and unix-socket escapes fail', async () => {
    const sb = seed({ cwd: f.W, enforceManagedNetwork: true });
    const before = { ...f.hits };
    const logBefore = proxy.log.length;
    const script = `curl -sS -m5 http://example.invalid/p; echo "curl1=$?"; curl -sS -m3 --noproxy '*' "http://127.0.0.1:$PORT/"; echo "curl2=$?"; ${PY} -c "$ESCAPES"`;
    const r = await run(sb, ['sh', '-c', script], { cwd: f.W, env: envFor({ ESCAPES }), opts: opts() });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /proxied: GET http:\/\/example.invalid\/p/);
    assert.ok(proxy.log.slice(logBefore).includes('GET http://example.invalid/p'));
    assert.match(r.stdout, /curl1=0/);
    assert.match(r.stdout, /curl2=7/);
    assert.match(r.stdout, /^tcp ECONNREFUSED$/m);
    assert.match(r.stdout, /^tcp6 (ECONNREFUSED|ENETUNREACH|EADDRNOTAVAIL)$/m);
    assert.match(r.stdout, /^unix EPERM$/m);
    assert.match(r.stdout, /^socketpair OK$/m);
    const m = /^proxy (\S+) (\S+)$/m.exec(r.stdout);
    assert.ok(m, r.stdout);
    assert.equal(m[1], m[2], 'both cases are set');
    assert.notEqual(m[1], `http://127.0.0.1:${proxy.port}`);
    assert.match(m[1]!, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(f.hits.tcp, before.tcp);
    assert.equal(f.hits.tcp6, before.tcp6);
    assert.equal(f.hits.uds, before.uds);
    assert.equal(f.hits.udp, before.udp);
  });

  test('listeners made in the namespace: 4 MiB and a half-close get through; the endpoint answers after the sandbox stops sending', async () => {
    // The proxy endpoint here is a digest server: it reads until EOF, then answers with the SHA-256 of what it
    // got. A FIN that tore the connection down on the way, or a lost byte, would show.
    const digest = net.createServer({ allowHalfOpen: true }, (s) => {
      const h = createHash('sha256');
      s.on('data', (d) => h.update(d));
      s.on('end', () => s.end(`${h.digest('hex')}\n`));
      s.on('error', () => {});
    });
    await new Promise<void>((r) => digest.listen(0, '127.0.0.1', () => r()));
    try {
      const port = (digest.address() as net.AddressInfo).port;
      const sb = seed({ cwd: f.W, enforceManagedNetwork: true });
      const client = `
import os, socket, sys
u = os.environ['HTTP_PROXY'].rsplit(':', 1)
s = socket.create_connection((u[0].split('//')[-1], int(u[1])), timeout=10)
s.sendall(bytes(range(256)) * 16384)
s.shutdown(socket.SHUT_WR)
reply = b''
while True:
    d = s.recv(65536)
    if not d: break
    reply += d
sys.stdout.write(reply.decode())
`;
      const r = await run(sb, [PY, '-c', client], {
        cwd: f.W,
        env: envFor({ HTTP_PROXY: `http://127.0.0.1:${port}` }),
        opts: opts(),
      });
      assert.equal(r.code, 0, r.stderr);
      const sent = Buffer.alloc(256 * 16384);
      for (let i = 0; i < sent.length; i++) sent[i] = i & 255;
      assert.equal(r.stdout, `${createHash('sha256').update(sent).digest('hex')}\n`);
    } finally {
      await new Promise((r) => digest.close(r));
    }
  });

  test('the in-namespace listeners are closed with the process: no fd is left behind', async () => {
    const fdCount = () => readdirSync('/proc/self/fd').length;
    const sb = () => seed({ cwd: f.W, enforceManagedNetwork: true });
    // one run first: lazily created things (the addon's state, the proxy's keep-alive sockets) are not leaks
    await run(sb(), ['sh', '-c', 'curl -sS -m5 http://example.invalid/a'], {
      cwd: f.W,
      env: envFor(),
      opts: opts(),
    });
    const before = fdCount();
    for (let i = 0; i < 5; i++) {
      const r = await run(sb(), ['sh', '-c', 'curl -sS -m5 http://example.invalid/b'], {
        cwd: f.W,
        env: envFor(),
        opts: opts(),
      });
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /proxied: GET http:\/\/example.invalid\/b/);
    }
    assert.ok(await waitFor(() => fdCount() <= before, 2000), `fds: ${before} before, ${fdCount()} after`);
  });

  test('the scheme is kept (socks5h stays socks5h); no private directory is made for it', async () => {
    const sb = seed({ cwd: f.W, enforceManagedNetwork: true });
    const r = await run(sb, ['sh', '-c', 'echo "all=$ALL_PROXY all_lc=$all_proxy"'], {
      cwd: f.W,
      env: envFor({ ALL_PROXY: `socks5h://127.0.0.1:${proxy.port}` }),
      opts: opts(),
    });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /all=socks5h:\/\/127\.0\.0\.1:\d+ all_lc=socks5h:\/\/127\.0\.0\.1:\d+/);
    // Listeners made in the sandbox's namespace: no directory of the server's holds anything for it (the one mask is
    // the mount-target lock directory, as for every bwrap sandbox).
    assert.deepEqual(r.prepared.summary!.masked, [mountTargetLockDir()]);
    assert.ok(!readdirSync(tmpdir()).some((e) => e.startsWith(`corral-sandbox-${formatTag(ownTag())}-`)));
  });

  test('enforceManagedNetwork with sandbox null (0.169 top-level flag): network-only sandbox, writes unrestricted', async () => {
    const r = await run(
      null,
      [
        'sh',
        '-c',
        `curl -sS -m5 http://example.invalid/null; curl -sS -m3 --noproxy '*' "http://127.0.0.1:$PORT/"; echo "direct=$?"; echo w > "$OUT/nullsb"`,
      ],
      { cwd: f.W, env: envFor({ OUT: f.OUT }), enforceManagedNetwork: true, opts: opts() },
    );
    assert.equal(r.prepared.sandboxType, 'linuxSeccomp');
    assert.match(r.stdout, /proxied: GET http:\/\/example.invalid\/null/);
    assert.match(r.stdout, /direct=7/);
    assert.ok(existsSync(join(f.OUT, 'nullsb')));
  });

  test('non-loopback proxy env only: fails closed', async () => {
    const sb = seed({ cwd: f.W, enforceManagedNetwork: true });
    await assert.rejects(
      run(sb, ['true'], { cwd: f.W, env: { HTTP_PROXY: 'http://proxy.corp.invalid:8080' }, opts: opts() }),
      /parseable loopback proxy endpoints/,
    );
  });
});

describe('PTY launches (the setup pipes go through the sandbox launcher)', { skip: needsSandbox }, () => {
  test('a PTY command is sandboxed: tty present, workspace writable, outside read-only, seccomp active', async () => {
    const sb = seed({ cwd: f.W });
    const locks = mountTargetLockDir();
    const script = `echo "LOCKS $(ls -A ${locks} | wc -l)"; [ -t 0 ] && echo ISATTY; stty size; echo ok > pty.txt; echo x > "$OUT/p"; ${PY} -c "import socket; socket.socket()" 2>&1 | tail -1; echo done`;
    const r = await runPty(sb, ['/bin/sh', '-c', script], { cwd: f.W, env: { OUT: f.OUT }, opts: opts() });
    assert.equal(r.prepared.sandboxType, 'linuxSeccomp');
    assert.match(r.output, /ISATTY/);
    // The mount-target lock directory is masked in every sandbox: empty inside.
    assert.deepEqual(r.prepared.summary!.masked, [locks]);
    assert.match(r.output, /LOCKS 0\r?$/m);
    assert.match(r.output, /^50 200\r?$/m);
    assert.ok(existsSync(join(f.W, 'pty.txt')));
    assert.match(r.output, /Read-only file system/);
    assert.ok(!existsSync(join(f.OUT, 'p')));
    assert.match(r.output, /PermissionError: \[Errno 1\] Operation not permitted/);
    assert.match(r.output, /done/);
  });

  test('a PTY command with managed network reaches the proxy', async () => {
    const sb = seed({ cwd: f.W, enforceManagedNetwork: true });
    const r = await runPty(
      sb,
      [
        '/bin/sh',
        '-c',
        `curl -sS -m5 http://example.invalid/pty; curl -sS -m3 --noproxy '*' "http://127.0.0.1:$PORT/"; echo "direct=$?"`,
      ],
      { cwd: f.W, env: envFor(), opts: opts() },
    );
    assert.match(r.output, /proxied: GET http:\/\/example.invalid\/pty/);
    assert.match(r.output, /direct=7/);
  });
});
