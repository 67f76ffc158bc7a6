// Issue 30 item 1: no form of a credential the server holds or was presented with reaches a child's environment, a
// sandboxed command that connects back is refused whatever it presents, and the watching panel credential
// (--panel-token-file) starts nothing. On 42e683e a base64 token (`+ / =`) went through the scrub percent-encoded
// (`?token=q%2BAb%2F…`, as a client's CODEX_EXEC_SERVER_URL carries it): a sandbox with network read it, connected
// back and ran `id` unsandboxed as root; and the panel token could process/start. Through the real CLI on loopback,
// with children started unsandboxed (pipes and PTY) and in bwrap.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import { SecretScrub } from '../../src/process/secretScrub.js';
import { type Cli, ROOT, startCli } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { until } from '../helpers/server.js';
import { seedParam, special, startAndRead } from '../integration/sandbox-util.js';

const PATH = '/usr/local/bin:/usr/bin:/bin';
const PROBE = join(ROOT, 'test', 'fixtures', 'trust', 'probe.mjs');

/** A token as `openssl rand -base64 32` makes it, with at least one `+`, `/` and `=` (each must be URL-encoded). */
function base64Token(): string {
  for (;;) {
    const t = randomBytes(32).toString('base64');
    if (t.includes('+') && t.includes('/') && t.endsWith('=')) return t;
  }
}

/** A 0600 file holding `token`, as --ws-token-file and --panel-token-file want it. */
function secretFile(dir: string, name: string, token: string): string {
  const f = join(dir, name);
  writeFileSync(f, `${token}\n`, { mode: 0o600 });
  return f;
}

/** Every form a client could forward a credential in, each in a variable of its own. */
function forms(name: string, t: string, url: string): Record<string, string> {
  const pct = encodeURIComponent(t);
  const every = (upper: boolean) =>
    [...Buffer.from(t)]
      .map(
        (b) => `%${upper ? b.toString(16).toUpperCase().padStart(2, '0') : b.toString(16).padStart(2, '0')}`,
      )
      .join('');
  const json = (s: string) => JSON.stringify({ url: s });
  return {
    [`${name}_RAW`]: t,
    [`${name}_URL_UPPER`]: `${url}/?token=${pct}`,
    [`${name}_URL_LOWER`]: `${url}/?token=${pct.replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase())}`,
    [`${name}_URL_EVERY_BYTE_UPPER`]: `${url}/?token=${every(true)}`,
    [`${name}_URL_EVERY_BYTE_LOWER`]: `${url}/?token=${every(false)}`,
    [`${name}_FORM`]: new URLSearchParams({ note: 'a b+c', token: t }).toString(),
    [`${name}_DOUBLE`]: encodeURIComponent(`${url}/?token=${pct}`),
    [`${name}_JSON_SLASHES`]: json(`${url}/?token=${t}`).replace(/\//g, '\\/'),
    [`${name}_JSON_UNICODE`]: json(t)
      .replace(/\+/g, '\\u002b')
      .replace(/\//g, '\\u002F')
      .replace(/=/g, '\\u003d'),
    [`${name}_JSON_OF_URL`]: json(`${url}/?token=${pct}`),
    [`${name}_URL_OF_JSON`]: `http://127.0.0.1:1/cfg?c=${encodeURIComponent(json(t))}`,
    [`${name}_LONGER_URL`]: `${url}/deep/path?a=1&token=${pct}&b=2#frag`,
    [`${name}_BASIC`]: `Basic ${Buffer.from(`user:${t}`).toString('base64')}`,
    [`${name}_HEX`]: Buffer.from(t).toString('hex'),
  };
}

const bwrap = (cwd: string) =>
  seedParam({
    cwd,
    network: 'enabled',
    entries: [special('root', 'read'), special('current_working_directory', 'write')],
  });

const run = async (c: RpcClient, processId: string, argv: string[], extra: Record<string, unknown> = {}) =>
  (await startAndRead(c, processId, argv, extra)).out;

describe('credentials in any encoding never reach a child (issue 30 item 1)', () => {
  let dir: string;
  let cli: Cli;
  const TOKEN = base64Token();
  const PANEL = base64Token();
  let url: string;
  before(async () => {
    dir = mkdtempSync('/tmp/corral-leak-');
    chmodSync(dir, 0o755);
    const file = (n: string, t: string) => secretFile(dir, n, t);
    cli = await startCli([
      'exec-server',
      '--listen',
      'ws://127.0.0.1:0',
      '--ws-token-file',
      file('token', TOKEN),
      '--panel-token-file',
      file('panel', PANEL),
      '--no-audit',
    ]);
    url = cli.url!;
  });
  after(async () => {
    await cli?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const env = () => ({ ...forms('AGENT', TOKEN, url), ...forms('PANEL', PANEL, url), KEEP_ME: 'kept' });

  function assertClean(out: string, what: string): void {
    assert.match(out, /KEEP_ME=kept/, `${what}: the child printed no environment:\n${out}`);
    const left = out.split('\n').filter((l) => /^(AGENT|PANEL)_/.test(l));
    assert.deepEqual(left, [], `${what}: these reached the child`);
    for (const t of [TOKEN, PANEL]) {
      for (const form of [t, encodeURIComponent(t), encodeURIComponent(t).toLowerCase()])
        assert.ok(!out.includes(form), `${what}: a form of a credential reached the child:\n${out}`);
    }
  }

  it('an agent presenting the token percent-encoded: no form of it (or of the panel token) in an unsandboxed child', async () => {
    const c = await RpcClient.open(`${url}/?token=${encodeURIComponent(TOKEN)}`);
    try {
      for (const tty of [false, true])
        assertClean(await run(c, `plain-${tty}`, ['/usr/bin/env'], { env: env(), tty }), `tty=${tty}`);
      // envPolicy inheriting the server's environment is scrubbed the same way.
      const viaPolicy = await run(c, 'policy', ['/usr/bin/env'], {
        env: { KEEP_ME: 'kept' },
        envPolicy: { inherit: 'all', ignoreDefaultExcludes: true, exclude: [], set: env(), includeOnly: [] },
      });
      assertClean(viaPolicy, 'envPolicy.set');
    } finally {
      c.close();
    }
  });

  it('in a bwrap sandbox with network: no form of either token', { skip: needsSandbox }, async () => {
    const c = await RpcClient.open(`${url}/?token=${encodeURIComponent(TOKEN)}`);
    try {
      assertClean(
        await run(c, 'sbx-env', ['/usr/bin/env'], { cwd: dir, env: env(), sandbox: bwrap(dir) }),
        'bwrap',
      );
    } finally {
      c.close();
    }
  });

  it('a sandboxed command that connects back with a valid token is refused (403)', {
    skip: needsSandbox,
  }, async () => {
    const c = await RpcClient.open(`${url}/?token=${encodeURIComponent(TOKEN)}`);
    try {
      // The token is handed to it in argv (never scrubbed: the client chose to): only the peer check stands.
      for (const [n, credential] of [
        ['agent', TOKEN],
        ['panel', PANEL],
      ] as const) {
        const out = await run(
          c,
          `sbx-back-${n}`,
          [process.execPath, PROBE, `${url}/?token=${encodeURIComponent(credential)}`],
          { cwd: dir, sandbox: bwrap(dir) },
        );
        const verdict = JSON.parse(out.trim().split('\n').pop() ?? '{}');
        assert.equal(verdict.refused, 403, `${n}: the sandbox got in: ${out}`);
      }
      // The same probe unsandboxed (it could do anything anyway) is let in: only sandboxed commands are refused.
      const plain = await run(c, 'plain-back', [
        process.execPath,
        PROBE,
        `${url}/?token=${encodeURIComponent(TOKEN)}`,
      ]);
      assert.equal(JSON.parse(plain.trim().split('\n').pop() ?? '{}').escaped, true, plain);
      assert.match(cli.stderr(), /refused a connection from .*a sandboxed command's/);
    } finally {
      c.close();
    }
  });

  it('a sandboxed daemon that left its process group and its parent is refused too', {
    skip: needsSandbox,
  }, async () => {
    const c = await RpcClient.open(`${url}/?token=${encodeURIComponent(TOKEN)}`);
    try {
      const outFile = join(dir, 'daemon.out');
      // setsid + a double fork: the probe leaves the command's process group and its tree (reparented to the
      // sandbox's init); the command waits for its verdict (bwrap's pid namespace dies with the command).
      const script =
        `setsid sh -c '(${process.execPath} ${PROBE} "$0" > ${outFile}.tmp; mv ${outFile}.tmp ${outFile}) &' "$1"; ` +
        `while [ ! -s ${outFile} ]; do sleep 0.05; done; cat ${outFile}`;
      const out = await run(
        c,
        'sbx-daemon',
        ['/bin/sh', '-c', script, 'x', `${url}/?token=${encodeURIComponent(TOKEN)}`],
        { cwd: dir, sandbox: bwrap(dir) },
      );
      await until(() => existsSync(outFile), 20_000);
      const verdict = JSON.parse(readFileSync(outFile, 'utf8').trim());
      assert.equal(verdict.refused, 403, `the daemon got in: ${out}`);
    } finally {
      c.close();
    }
  });

  it('the watching panel credential (--panel-token-file) starts no process and touches no file', async () => {
    const panel = await RpcClient.open(`${url}/?token=${encodeURIComponent(PANEL)}`, 'panel');
    try {
      const snap = (await panel.request('monitor/subscribe', {})) as { processes: unknown[] };
      assert.ok(Array.isArray(snap.processes));
      const start = await panel.requestError('process/start', {
        processId: 'x',
        argv: ['/bin/sh', '-c', 'id -u'],
        cwd: '/tmp',
        env: { PATH },
        tty: false,
      });
      assert.equal(start.code, -32600);
      assert.match(start.message, /watching panel/);
      const write = await panel.requestError('fs/writeFile', {
        path: join(dir, 'planted'),
        dataBase64: Buffer.from('x').toString('base64'),
      });
      assert.equal(write.code, -32600);
    } finally {
      panel.close();
    }
  });
});

describe('a --ws-token-sha256 token is scrubbed in every form once presented', () => {
  let cli: Cli;
  const TOKEN = base64Token();
  before(async () => {
    const hex = createHash('sha256').update(TOKEN).digest('hex');
    cli = await startCli([
      'exec-server',
      '--listen',
      'ws://127.0.0.1:0',
      '--ws-token-sha256',
      hex,
      '--no-audit',
    ]);
  });
  after(async () => {
    await cli?.stop();
  });

  it('the presented token, percent-encoded in the URL a client forwards, never reaches a child', async () => {
    const url = cli.url!;
    const c = await RpcClient.open(`${url}/?token=${encodeURIComponent(TOKEN)}`);
    try {
      const out = await run(c, 'env', ['/usr/bin/env'], {
        env: { ...forms('AGENT', TOKEN, url), KEEP_ME: 'kept' },
      });
      assert.match(out, /KEEP_ME=kept/);
      assert.deepEqual(
        out.split('\n').filter((l) => l.startsWith('AGENT_')),
        [],
      );
    } finally {
      c.close();
    }
  });
});

describe('a host: its own tokens and its --join credentials in every form never reach a child', () => {
  let dir: string;
  let remote: Cli;
  let host: Host;
  const JOINED = base64Token();
  const tokens = { agent: base64Token(), panel: base64Token() };
  before(async () => {
    dir = mkdtempSync('/tmp/corral-leak-join-');
    const file = (n: string, t: string) => secretFile(dir, n, t);
    remote = await startCli([
      'exec-server',
      '--listen',
      'ws://127.0.0.1:0',
      '--ws-token-file',
      file('agent', base64Token()),
      '--panel-token-file',
      file('panel', JOINED),
      '--no-audit',
    ]);
    host = await startHost({
      tokens,
      join: [{ url: remote.url!, token: JOINED }],
      fleet: { backoffMs: [100, 1000] },
    });
  });
  after(async () => {
    await host?.shutdown();
    await remote?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("the agent token, the panel token and the joined server's credential are scrubbed", async () => {
    const c = await RpcClient.open(host.execUrl);
    try {
      const base = host.listener.url;
      const env = {
        ...forms('AGENT', tokens.agent, base),
        ...forms('PANEL', tokens.panel, base),
        ...forms('JOINED', JOINED, remote.url!),
        KEEP_ME: 'kept',
      };
      const out = await run(c, 'env', ['/usr/bin/env'], { env });
      assert.match(out, /KEEP_ME=kept/);
      assert.deepEqual(
        out.split('\n').filter((l) => /^(AGENT|PANEL|JOINED)_/.test(l)),
        [],
      );
    } finally {
      c.close();
    }
  });
});

describe('the scrub under hostile input: deep, wide, huge and malformed values', () => {
  const TOKEN = base64Token();
  const scrub = new SecretScrub([TOKEN, base64Token()]);
  // CPU time, not wall time: the bounds are about the scrub's own work, which a loaded machine does not change.
  const timed = (env: Record<string, string>) => {
    const t = process.cpuUsage();
    const r = scrub.scrub(env);
    const used = process.cpuUsage(t);
    return { ...r, ms: (used.user + used.system) / 1000 };
  };

  it('malformed escapes of every kind are kept, never thrown on', () => {
    const env = {
      PCT: '%zz%2%%u12%uZZZZ%E0%A4%',
      BAD_UTF8: '%C3%28%A0%FF%FE',
      JSON: '\\u12\\uZZZZ\\ud800\\udfff\\x\\u{110000}\\u{}\\777\\',
      ENT: '&#xFFFFFFFF;&#99999999;&#x;&#;&nosuch;&&;;',
      NUL: '\0\0%00\\0',
      SURROGATES: '\ud800\udc00\udfff\ud800',
    };
    const r = timed(env);
    assert.deepEqual(r.removed, []);
    assert.equal(r.env, env);
  });

  it('deep: a token encoded 3 times is found; 40 encodings deep costs little and finds nothing more', () => {
    let v = `ws://127.0.0.1:1/?token=${TOKEN}`;
    for (let i = 0; i < 3; i++) v = encodeURIComponent(v);
    assert.deepEqual(timed({ U: v }).removed, ['U']);
    let deep = TOKEN;
    for (let i = 0; i < 40; i++) deep = encodeURIComponent(deep);
    const r = timed({ U: deep.slice(0, 200_000) });
    assert.ok(r.ms < 500, `${r.ms} ms`);
  });

  it('huge: 1 MiB values of escapes, and a token at the end of one, in bounded time', () => {
    const env = {
      A: '%25'.repeat(350_000),
      B: '\\\\'.repeat(500_000),
      C: '&#38;'.repeat(200_000),
      D: `${'%41'.repeat(300_000)}${encodeURIComponent(TOKEN)}`,
    };
    const r = timed(env);
    assert.deepEqual(r.removed, ['D']);
    assert.ok(r.ms < 3000, `${r.ms} ms`);
  });

  it('wide: 10 000 variables, one holding the token JSON-escaped', () => {
    const env: Record<string, string> = {};
    for (let i = 0; i < 10_000; i++) env[`V${i}`] = `%2F\\/&amp;${i}-${'x'.repeat(40)}`;
    env.HIDDEN = JSON.stringify(TOKEN).replace(/\//g, '\\/');
    const r = timed(env);
    assert.deepEqual(r.removed, ['HIDDEN']);
    assert.equal(Object.keys(r.env).length, 10_000);
    assert.ok(r.ms < 2000, `${r.ms} ms`);
  });
});
