// Auth and lifecycle parity with `codex exec-server` 0.169 (issue 18 item 4), through the real CLI on loopback:
// --ws-auth signed-bearer-token (HS256 JWTs verified with jose; every malformed or hostile token refused),
// --ws-token-sha256, --exit-on-stdin-close, --concurrent-requests, and the flag checks with Codex's messages.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, generateKeyPairSync } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SignJWT } from 'jose';
import { generateToken } from '../../src/server/core/auth.js';
import type { LaunchPreparer } from '../../src/server/process/launcher.js';
import { type Cli, CORRAL_BIN, startCli, startJwtServer } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { shellStart } from '../helpers/registry-contract.js';
import { startTestServer, until } from '../helpers/server.js';

const SECRET = 'a-shared-secret-of-at-least-32-bytes-0123456789';
const b64url = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
const now = () => Math.floor(Date.now() / 1000);

function hs256(claims: Record<string, unknown>, secret: string | Uint8Array = SECRET, alg = 'HS256') {
  const key = typeof secret === 'string' ? new TextEncoder().encode(secret) : secret;
  return new SignJWT(claims).setProtectedHeader({ alg, typ: 'JWT' }).sign(key);
}

/** Whether an upgrade with this bearer gets in (null: 101) or the HTTP status it got. */
async function upgradeStatus(
  url: string,
  headers: Record<string, string>,
  query = '',
): Promise<number | null> {
  try {
    const c = await RpcClient.connect(`${url}/${query}`, { headers });
    c.close();
    return null;
  } catch (e) {
    const m = /HTTP (\d+)/.exec((e as Error).message);
    if (!m) throw e;
    return Number(m[1]);
  }
}

function secretFile(dir: string, name: string, content: string): string {
  const f = join(dir, name);
  writeFileSync(f, content, { mode: 0o600 });
  return f;
}

/** Runs the CLI expecting it to refuse its flags: its exit code and stderr's first line. */
function refused(args: string[]): { code: number; first: string } {
  try {
    execFileSync(process.execPath, [CORRAL_BIN, 'exec-server', ...args], {
      stdio: 'pipe',
      timeout: 20_000,
    });
  } catch (e) {
    const err = e as { status: number; stderr: Buffer };
    return { code: err.status, first: err.stderr.toString().split('\n')[0]! };
  }
  throw new Error(`the CLI accepted ${args.join(' ')}`);
}

describe('--ws-auth signed-bearer-token (HS256 JWTs, jose)', () => {
  let cli: Cli;
  const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
  const good = () => ({ exp: now() + 60, iss: 'corral-test', aud: ['other', 'exec-server'], sub: 'alice' });

  before(async () => {
    cli = await startJwtServer(SECRET, [
      '--ws-issuer',
      'corral-test',
      '--ws-audience',
      'exec-server',
      '--ws-max-clock-skew-seconds',
      '5',
    ]);
  });
  after(() => cli?.stop());

  it('prints its URL without a token; a valid token gets in by Bearer, X-Corral-Token or ?token=', async () => {
    assert.match(cli.url!, /^ws:\/\/127\.0\.0\.1:\d+$/);
    const t = await hs256(good());
    assert.equal(await upgradeStatus(cli.url!, bearer(t)), null);
    assert.equal(await upgradeStatus(cli.url!, { 'x-corral-token': t }), null);
    assert.equal(await upgradeStatus(cli.url!, {}, `?token=${t}`), null);
    assert.equal(await upgradeStatus(cli.url!, {}), 401);
  });

  it('refuses expired, not-yet-valid, wrong-issuer, wrong-audience and exp-less tokens (skew applied)', async () => {
    const cases: [string, Record<string, unknown>, number | null][] = [
      ['expired beyond the skew', { ...good(), exp: now() - 30 }, 401],
      ['expired within the 5 s skew', { ...good(), exp: now() - 2 }, null],
      ['nbf in the future', { ...good(), nbf: now() + 60 }, 401],
      ['wrong issuer', { ...good(), iss: 'someone-else' }, 401],
      ['no issuer', { ...good(), iss: undefined }, 401],
      ['wrong audience', { ...good(), aud: 'another-service' }, 401],
      ['no exp', { iss: 'corral-test', aud: 'exec-server' }, 401],
    ];
    for (const [what, claims, want] of cases) {
      const t = await hs256(JSON.parse(JSON.stringify(claims)));
      assert.equal(await upgradeStatus(cli.url!, bearer(t)), want, what);
    }
  });

  it('refuses alg none, unsigned, RS256 and HS256-keyed-with-the-public-key (alg confusion), and the wrong secret', async () => {
    const claims = good();
    const none = `${b64url({ alg: 'none', typ: 'JWT' })}.${b64url(claims)}.`;
    const unsigned = `${b64url({ alg: 'HS256', typ: 'JWT' })}.${b64url(claims)}`;
    const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const rs256 = await new SignJWT(claims).setProtectedHeader({ alg: 'RS256' }).sign(privateKey);
    const pem = publicKey.export({ type: 'spki', format: 'pem' }) as string;
    const confused = await hs256(claims, new TextEncoder().encode(pem));
    const wrongSecret = await hs256(claims, 'another-secret-that-is-also-32-bytes-long!!');
    const hs512 = await hs256(claims, SECRET, 'HS512');
    const tampered = (() => {
      const [h, , s] = unsigned.concat('.x').split('.');
      return `${h}.${b64url({ ...claims, sub: 'mallory' })}.${s}`;
    })();
    for (const [what, t] of Object.entries({
      none,
      unsigned,
      rs256,
      confused,
      wrongSecret,
      hs512,
      tampered,
    })) {
      assert.equal(await upgradeStatus(cli.url!, bearer(t)), 401, what);
    }
  });

  it("a session is bound to the token's subject: a fresh token of the same subject resumes it, another subject cannot", async () => {
    const a = await RpcClient.connect(cli.url!, { headers: bearer(await hs256(good())) });
    const { sessionId } = await a.request<{ sessionId: string }>('initialize', { clientName: 'jwt' });
    a.notify('initialized', {});
    a.close();
    await a.waitClose();
    const mallory = await RpcClient.connect(cli.url!, {
      headers: bearer(await hs256({ ...good(), sub: 'mallory' })),
    });
    const err = await mallory.requestError('initialize', { clientName: 'x', resumeSessionId: sessionId });
    assert.match(err.message, /unknown session id/);
    mallory.close();
    const again = await RpcClient.connect(cli.url!, {
      headers: bearer(await hs256({ ...good(), jti: 'fresh' })),
    });
    const r = await again.request<{ sessionId: string }>('initialize', {
      clientName: 'jwt',
      resumeSessionId: sessionId,
    });
    assert.equal(r.sessionId, sessionId);
    again.close();
  });
});

describe('--ws-token-sha256, --exit-on-stdin-close, --concurrent-requests, and flag checks', () => {
  it('--ws-token-sha256: the token with that digest gets in; the URL does not echo it; others get 401', async () => {
    const token = generateToken();
    const hex = createHash('sha256').update(token).digest('hex');
    const cli = await startCli(['exec-server', '--ws-auth', 'capability-token', '--ws-token-sha256', hex]);
    try {
      assert.match(cli.url!, /^ws:\/\/127\.0\.0\.1:\d+$/);
      assert.equal(await upgradeStatus(cli.url!, { authorization: `Bearer ${token}` }), null);
      assert.equal(await upgradeStatus(cli.url!, {}, `?token=${token}`), null);
      assert.equal(await upgradeStatus(cli.url!, { authorization: `Bearer ${token}x` }), 401);
      assert.equal(await upgradeStatus(cli.url!, { authorization: `Bearer ${hex}` }), 401);
    } finally {
      await cli.stop();
    }
  });

  it('--exit-on-stdin-close: closing stdin kills every child and exits', async () => {
    const cli = await startCli(['exec-server', '--exit-on-stdin-close']);
    const c = await RpcClient.open(cli.url!);
    await c.request('process/start', shellStart('sleeper', 'echo pid=$$; exec sleep 60', '/tmp'));
    await c.waitFor((n) => n.method === 'process/output');
    const pid = Number(/pid=(\d+)/.exec(c.output('sleeper'))![1]);
    assert.doesNotThrow(() => process.kill(pid, 0));
    cli.proc.stdin.end();
    const exit = await cli.exited;
    assert.equal(exit.code, 0, cli.stderr());
    assert.match(cli.stderr(), /stopping \(stdin closed\)/);
    assert.throws(() => process.kill(pid, 0), /ESRCH/, 'the child outlived the server');
  });

  it('--concurrent-requests: with 1 a slow process/start holds back the next; with 2 the next overtakes it; a parked read never holds a slot', async () => {
    const order = async (n: number) => {
      // process/start's launch preparation is asynchronous (sandbox, proxy): hold the one of `slow` until released.
      // The preparer given to the server delegates to the server's own launcher.
      let release!: () => void;
      const held = new Promise<void>((r) => {
        release = r;
      });
      let slowPreparing!: () => void;
      const preparing = new Promise<void>((r) => {
        slowPreparing = r;
      });
      let real!: LaunchPreparer;
      const preparer: LaunchPreparer = {
        classify: (...a) => real.classify(...a),
        prepare: async (p, spec, ctx) => {
          if (p.processId === 'slow') {
            slowPreparing();
            await held;
          }
          return real.prepare(p, spec, ctx);
        },
      };
      const ts = await startTestServer({ concurrentRequests: n, preparer });
      real = ts.server.launcher;
      try {
        const c = await ts.client();
        await c.request('process/start', shellStart('long', 'sleep 5', '/tmp'));
        const seen: string[] = [];
        const parked = c
          .request('process/read', { processId: 'long', afterSeq: 0, waitMs: 4000 })
          .then(() => seen.push('read'));
        const slow = c
          .request('process/start', shellStart('slow', 'true', '/tmp'))
          .then(() => seen.push('slow'));
        await preparing;
        const quick = c
          .request('process/start', shellStart('quick', 'true', '/tmp'))
          .then(() => seen.push('quick'));
        const conn = ts.sessionOf(c).conn!;
        if (n === 1) await until(() => conn.queued === 1, 5000, 'quick to be queued behind slow');
        else await quick; // answered while slow is still held
        release();
        await Promise.all([slow, quick]);
        await c.request('process/terminate', { processId: 'long' });
        await parked;
        return seen;
      } finally {
        await ts.close();
      }
    };
    // With 1: answered in order, and the parked read (sent first) came last: it never held the slot.
    assert.deepEqual(await order(1), ['slow', 'quick', 'read']);
    assert.deepEqual(await order(2), ['quick', 'slow', 'read']);
  });

  it('refuses flag combinations with the messages of codex 0.169', async () => {
    mkdirSync(join(homedir(), '.cache'), { recursive: true });
    const dir = mkdtempSync(join(homedir(), '.cache', 'corral-flags-'));
    const short = secretFile(dir, 'short', 'too-short');
    try {
      const cases: [string[], RegExp][] = [
        [['--ws-auth', 'signed-bearer-token'], /--ws-shared-secret-file` is required/],
        [['--ws-auth', 'signed-bearer-token', '--ws-shared-secret-file', short], /at least 32 bytes/],
        [['--ws-auth', 'capability-token', '--ws-issuer', 'x'], /require `--ws-auth signed-bearer-token`/],
        [['--ws-auth', 'none', '--ws-token-sha256', 'ab'], /require `--ws-auth capability-token` or/],
        [['--ws-token-sha256', 'abc'], /64-character hex SHA-256/],
        [['--ws-auth', 'signed-bearer-token', '--ws-token-sha256', 'ab'], /not `signed-bearer-token`/],
        [
          ['--remote', 'http://127.0.0.1:1', '--environment-id', 'e', '--ws-auth', 'none'],
          /cannot be used with --remote/,
        ],
        [['--remote', 'http://127.0.0.1:1'], /--environment-id is required/],
        [
          ['--remote', 'http://127.0.0.1:1', '--environment-id', 'e', '--remote-transport', 'tls'],
          /^error: invalid value 'tls' for '--remote-transport <REMOTE_TRANSPORT>'/,
        ],
        [
          [
            '--remote',
            'http://127.0.0.1:1',
            '--environment-id',
            'e',
            '--remote-transport',
            'noise',
            '--aws-sigv4',
          ],
          /^Error: --aws-sigv4 requires --remote-transport direct$/,
        ],
        // No transport named: Codex 0.171's default, noise, and so the same refusal.
        [
          ['--remote', 'http://127.0.0.1:1', '--environment-id', 'e', '--aws-sigv4'],
          /^Error: --aws-sigv4 requires --remote-transport direct$/,
        ],
        [
          ['--remote', 'http://127.0.0.1:1', '--environment-id', 'e', '--listen', 'stdio'],
          /exclude each other/,
        ],
        [['--remote', 'http://127.0.0.1:1', '--environment-id', 'a/b'], /only ASCII letters/],
        [['--concurrent-requests', '0'], /--concurrent-requests must be a whole number/],
        [['--environment-id', 'e'], /requires --remote/],
      ];
      for (const [args, want] of cases) {
        const r = refused(args);
        assert.notEqual(r.code, 0, args.join(' '));
        assert.match(r.first, want, args.join(' '));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
