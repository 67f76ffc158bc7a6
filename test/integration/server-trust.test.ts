// Issue 13 item 1: `corral exec-server` is authenticated by default. The attacks: another local user (uid 65534)
// connecting to 127.0.0.1 and running commands as root; a sandbox with network enabled connecting to the server's own
// port (with CODEX_EXEC_SERVER_URL, token included, forwarded by Codex 0.120) and starting an unsandboxed process;
// a sandbox reading --ws-token-file; the token in the server's /proc; a DNS-rebinding page naming another Host.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Cli, ROOT, startCli } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { httpFetch, upgradeStatus } from '../helpers/http.js';
import { needsSandbox } from '../helpers/native.js';
import { seedParam, special, startAndRead } from './sandbox-util.js';

const PATH = '/usr/local/bin:/usr/bin:/bin';
const PROBE = join(ROOT, 'test', 'fixtures', 'trust', 'probe.mjs');
const NOBODY = ['--reuid', '65534', '--regid', '65534', '--clear-groups'];

const base = (url: string) => url.replace(/\/\?.*$/, '');
const tokenOf = (url: string) => new URL(url).searchParams.get('token');

function canSetpriv(): boolean {
  try {
    execFileSync('setpriv', [...NOBODY, 'test', '-r', PROBE], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A seed sandbox: read everything, write the workspace, network as given. */
const sandbox = (cwd: string, network: 'enabled' | 'restricted') =>
  seedParam({
    cwd,
    network,
    entries: [special('root', 'read'), special('current_working_directory', 'write')],
  });

const run = startAndRead;

describe('exec-server is authenticated by default', () => {
  let cli: Cli;
  let dir: string;
  before(async () => {
    dir = mkdtempSync('/tmp/corral-trust-');
    chmodSync(dir, 0o755);
    cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0']);
  });
  after(async () => {
    await cli?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('prints the URL with a generated token; without it, or with a wrong one, the upgrade is 401', async () => {
    const url = cli.url!;
    const token = tokenOf(url);
    assert.match(token ?? '', /^[\w-]{43}$/, `no token in the printed URL ${url}`);
    assert.equal(await upgradeStatus(base(url)), 401);
    assert.equal(await upgradeStatus(`${base(url)}/?token=${token}x`), 401);
    assert.equal(
      await upgradeStatus(base(url), { headers: { Authorization: `Bearer ${token!.slice(1)}` } }),
      401,
    );
    assert.equal(await upgradeStatus(url), 101);
    assert.equal(await upgradeStatus(base(url), { headers: { Authorization: `Bearer ${token}` } }), 101);
    assert.equal(await upgradeStatus(base(url), { headers: { 'X-Corral-Token': token! } }), 101);
    // A second start has another token.
    const other = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0']);
    try {
      assert.notEqual(tokenOf(other.url!), token);
    } finally {
      await other.stop();
    }
  });

  it('another local user (uid 65534) without the token cannot run anything', { skip: !canSetpriv() }, () => {
    const out = execFileSync('setpriv', [...NOBODY, process.execPath, PROBE, base(cli.url!)], {
      encoding: 'utf8',
      env: { PATH },
    });
    assert.deepEqual(JSON.parse(out).refused, 401, `uid 65534 got in: ${out}`);
  });

  it('the token is in no variable of any child (pipes and PTY), whatever the client forwards', async () => {
    const c = await RpcClient.open(cli.url!);
    try {
      const env = {
        CODEX_EXEC_SERVER_URL: cli.url!,
        SOMEWHERE_ELSE: `prefix-${tokenOf(cli.url!)}-suffix`,
        KEEP_ME: 'kept',
      };
      for (const tty of [false, true]) {
        const r = await run(c, `env-${tty}`, ['/usr/bin/env'], { env, tty });
        assert.equal(r.exitCode, 0);
        assert.match(r.out, /KEEP_ME=kept/);
        assert.ok(!r.out.includes(tokenOf(cli.url!)!), `tty=${tty}: the token reached the child:\n${r.out}`);
        assert.doesNotMatch(r.out, /CODEX_EXEC_SERVER_URL|SOMEWHERE_ELSE/);
      }
    } finally {
      c.close();
    }
  });

  it('a sandbox with network enabled that connects to the server port is refused (401)', {
    skip: needsSandbox,
  }, async () => {
    const c = await RpcClient.open(cli.url!);
    try {
      // As Codex 0.120 does: CODEX_EXEC_SERVER_URL with the token goes to the command; the probe uses it if present.
      const r = await run(c, 'sbx-connect', [process.execPath, PROBE, base(cli.url!)], {
        cwd: dir,
        env: { CODEX_EXEC_SERVER_URL: cli.url! },
        sandbox: sandbox(dir, 'enabled'),
      });
      const verdict = JSON.parse(r.out.trim().split('\n').pop() ?? '{}');
      assert.equal(verdict.refused, 401, `the sandbox got in: ${r.out}`);
    } finally {
      c.close();
    }
  });

  it("a sandbox sees its own pid namespace only: not the server's /proc, no token in any /proc it can read", {
    skip: needsSandbox,
  }, async () => {
    const c = await RpcClient.open(cli.url!);
    try {
      const token = tokenOf(cli.url!)!;
      // Everything the sandbox can read of every process it can see (its script does not name the token).
      const script =
        `ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' '; echo; ` +
        `cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; true`;
      const r = await run(c, 'sbx-proc', ['/bin/sh', '-c', script], {
        cwd: dir,
        env: { CODEX_EXEC_SERVER_URL: cli.url! },
        sandbox: sandbox(dir, 'enabled'),
      });
      const pids = r.out.split('\n')[0]!.trim().split(' ');
      assert.ok(!pids.includes(String(cli.proc.pid)), `the server's pid is visible: ${pids}`);
      assert.ok(pids.length < 10, `more than the sandbox's own processes: ${pids}`);
      assert.match(
        r.out,
        /PATH=/,
        'the sandbox could not read its own environ: the check would prove nothing',
      );
      assert.ok(!r.out.includes(token), `a /proc file in the sandbox holds the token:\n${r.out}`);
      // And on the host: the server's own argv and environment hold no token either.
      for (const f of ['cmdline', 'environ']) {
        assert.ok(
          !readFileSync(`/proc/${cli.proc.pid}/${f}`, 'latin1').includes(token),
          `the token is in the server's /proc/${cli.proc.pid}/${f}`,
        );
      }
    } finally {
      c.close();
    }
  });

  it('a 421 for a Host that does not name the server (DNS rebinding), on HTTP and on the upgrade', async () => {
    const port = new URL(cli.url!).port;
    assert.equal((await httpFetch(`${base(cli.url!)}/readyz`, { host: `evil.example:${port}` })).status, 421);
    assert.equal((await httpFetch(`${base(cli.url!)}/readyz`, { host: `localhost:${port}` })).status, 200);
    // The port is not part of the check: a client behind a port forward names the forwarder's.
    assert.equal((await httpFetch(`${base(cli.url!)}/readyz`, { host: '127.0.0.1:1' })).status, 200);
    assert.equal(
      (await httpFetch(`${base(cli.url!)}/readyz`, { host: 'localhost.evil.example' })).status,
      421,
    );
    assert.equal(await upgradeStatus(cli.url!, { headers: { host: `rebound.example:${port}` } }), 421);
    const ok = await httpFetch(`${base(cli.url!)}/readyz`);
    assert.equal(ok.headers['x-content-type-options'], 'nosniff');
  });
});

describe('--ws-token-file and --ws-auth none', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync('/tmp/corral-trust-file-');
    chmodSync(dir, 0o755);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('a token file others can read is refused; a short token is refused', async () => {
    const loose = join(dir, 'loose');
    writeFileSync(loose, 'a-token-that-is-long-enough\n', { mode: 0o644 });
    chmodSync(loose, 0o644);
    const a = await startCli(['exec-server', '--ws-token-file', loose], { stdio: true });
    assert.equal((await a.exited).code, 2);
    assert.match(a.stderr(), /can be read by others \(mode 0644\): chmod 600/);
    const short = join(dir, 'short');
    writeFileSync(short, 'short\n', { mode: 0o600 });
    const b = await startCli(['exec-server', '--ws-token-file', short], { stdio: true });
    assert.equal((await b.exited).code, 2);
    assert.match(b.stderr(), /at least 16 characters/);
  });

  it('no sandbox can read the token file or the log, even one that may read everything and write their directory', {
    skip: needsSandbox,
  }, async () => {
    const file = join(dir, 'token');
    const token = 'file-token-0123456789abcdef';
    writeFileSync(file, `${token}\n`, { mode: 0o600 });
    const log = join(dir, 'corral.log');
    const cli = await startCli(['exec-server', '--ws-token-file', file, '--log-file', log]);
    const c = await RpcClient.open(`${cli.url}/?token=${token}`);
    try {
      // Nor the server's log (every session's commands are in it).
      const logged = await run(c, 'cat-log', ['/bin/sh', '-c', `cat '${log}'; echo "rc=$?"`], {
        cwd: dir,
        sandbox: sandbox(dir, 'restricted'),
      });
      assert.match(readFileSync(log, 'utf8'), /exec-server listening/);
      assert.doesNotMatch(logged.out, /listening/, logged.out);
      for (const network of ['restricted', 'enabled'] as const) {
        const r = await run(c, `cat-${network}`, ['/bin/sh', '-c', `cat '${file}'; echo "rc=$?"`], {
          cwd: dir,
          sandbox: sandbox(dir, network),
        });
        // Masked by /dev/null (read as empty, or refused where /dev is mounted nodev).
        assert.ok(!r.out.includes(token), `network ${network}: the sandbox read the token file: ${r.out}`);
        assert.match(r.out, /rc=\d/);
      }
      // Unsandboxed, the file is as it was (the mask is only inside sandboxes).
      const plain = await run(c, 'cat-plain', ['/bin/cat', file]);
      assert.equal(plain.out.trim(), token);
    } finally {
      c.close();
      await cli.stop();
    }
  });

  it('--ws-auth none lets anyone in, with a warning on stderr', async () => {
    const cli = await startCli(['exec-server', '--ws-auth', 'none']);
    try {
      assert.match(cli.url!, /^ws:\/\/127\.0\.0\.1:\d+$/);
      assert.equal(await upgradeStatus(cli.url!), 101);
      await new Promise((r) => setImmediate(r));
      assert.match(cli.stderr(), /WARNING: --ws-auth none: anyone who can reach/);
    } finally {
      await cli.stop();
    }
  });
});

describe('serve and npm start keep the tokens out of argv and environ', () => {
  it('no process of `npm start --serve` has a token in its /proc cmdline or environ', async () => {
    const cli = await startCli(['scripts/start.mjs', '--serve'], { script: true });
    try {
      const exec = /^exec-server: (\S+)$/.exec(cli.url!)?.[1];
      const panelLine = (await cli.lines.next()).value as string;
      const panel = /#token=([\w-]+)/.exec(panelLine)?.[1];
      assert.ok(exec && panel, `${cli.url}\n${panelLine}`);
      const tokens = [tokenOf(exec)!, panel];
      const tree = descendants(cli.proc.pid!);
      assert.ok(tree.length >= 2, `expected start.mjs and its serve child: ${tree}`);
      for (const pid of tree) {
        for (const f of ['cmdline', 'environ']) {
          let text = '';
          try {
            text = readFileSync(`/proc/${pid}/${f}`, 'latin1');
          } catch {
            continue;
          }
          for (const t of tokens) assert.ok(!text.includes(t), `a token is in /proc/${pid}/${f}`);
        }
      }
    } finally {
      await cli.stop();
    }
  });
});

/** pid and every descendant of it, from /proc. */
function descendants(root: number): number[] {
  const parent = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {}
  }
  const out = [root];
  for (let i = 0; i < out.length; i++) {
    for (const [pid, ppid] of parent) if (ppid === out[i]) out.push(pid);
  }
  return out;
}
