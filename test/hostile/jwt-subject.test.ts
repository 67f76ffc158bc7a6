// Issue 30 item 4: a session is bound to its token's issuer and subject, unambiguously. On 42e683e the binding was
// `jwt:${iss}/${sub}`: (iss `a/b`, sub `c`) and (iss `a`, sub `b/c`) were one subject, so either resumed the other's
// session and read its output; and a `sub`/`iss` that is a number, an object or an array was accepted. Through the
// real CLI on loopback, with HS256 tokens that the server's own shared secret signs.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { SignJWT } from 'jose';
import { type Cli, startJwtServer } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { upgradeStatus } from '../helpers/http.js';

const SECRET = 'another-shared-secret-of-32-bytes-or-more-42';
const now = () => Math.floor(Date.now() / 1000);
const sign = (claims: Record<string, unknown>) =>
  new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).sign(new TextEncoder().encode(SECRET));
const bearer = async (claims: Record<string, unknown>) => ({
  headers: { authorization: `Bearer ${await sign({ exp: now() + 120, ...claims })}` },
});
/** A token signed by hand over any payload text (jose's signer refuses what a hostile issuer would send). */
const rawBearer = (payload: string) => {
  const head = Buffer.from('{"alg":"HS256","typ":"JWT"}').toString('base64url');
  const body = Buffer.from(payload).toString('base64url');
  const sig = createHmac('sha256', SECRET).update(`${head}.${body}`).digest('base64url');
  return { headers: { authorization: `Bearer ${head}.${body}.${sig}` } };
};

describe('JWT subjects do not collide (issue 30 item 4)', () => {
  let cli: Cli;
  // No --ws-issuer: any issuer is accepted, so the issuer is what tells subjects apart.
  before(async () => {
    cli = await startJwtServer(SECRET, ['--no-audit']);
  });
  after(() => cli?.stop());

  /** Opens a session as `claims`, starts a process that prints a secret of its own, and detaches. */
  async function sessionOf(claims: Record<string, unknown>): Promise<string> {
    const c = await RpcClient.connect(cli.url!, await bearer(claims));
    const { sessionId } = await c.request<{ sessionId: string }>('initialize', { clientName: 'victim' });
    c.notify('initialized', {});
    await c.request('process/start', {
      processId: 'p',
      argv: ['/bin/echo', 'victim-output'],
      cwd: '/tmp',
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
    });
    await c.collect('p', 20_000);
    c.close();
    await c.waitClose();
    return sessionId;
  }

  async function resumeError(claims: Record<string, unknown>, sessionId: string): Promise<string | null> {
    const c = await RpcClient.connect(cli.url!, await bearer(claims));
    try {
      const e = await c.requestError('initialize', { clientName: 'thief', resumeSessionId: sessionId });
      return e.message;
    } catch {
      return null; // resumed
    } finally {
      c.close();
    }
  }

  const pairs: [Record<string, unknown>, Record<string, unknown>][] = [
    [
      { iss: 'a/b', sub: 'c' },
      { iss: 'a', sub: 'b/c' },
    ],
    [
      { iss: 'a', sub: 'b/c' },
      { iss: 'a/b', sub: 'c' },
    ],
    [
      { iss: 'a%2Fb', sub: 'c' },
      { iss: 'a/b', sub: 'c' },
    ],
    [
      { iss: 'x', sub: 'y' },
      { iss: 'x/', sub: '/y' },
    ],
    [{ sub: 'a/b' }, { iss: 'a', sub: 'b' }],
    [
      { iss: '', sub: 'a/b' },
      { iss: 'a', sub: 'b' },
    ],
  ];
  for (const [victim, thief] of pairs) {
    it(`${JSON.stringify(thief)} cannot resume the session of ${JSON.stringify(victim)}`, async () => {
      const sessionId = await sessionOf(victim);
      assert.match((await resumeError(thief, sessionId)) ?? 'resumed', /unknown session id/);
      // The victim's own fresh token still resumes it.
      assert.equal(await resumeError({ ...victim, jti: 'fresh' }, sessionId), null);
    });
  }

  it('a sub or iss that is not a string, and a token without a subject, get 401', async () => {
    const hostile: Record<string, unknown>[] = [
      { sub: 42 },
      { sub: { a: 1 } },
      { sub: ['a', 'b'] },
      { sub: null },
      { sub: true },
      { sub: '' },
      {},
      { iss: 7, sub: 'alice' },
      { iss: { x: 'a' }, sub: 'alice' },
      { iss: ['a', 'b'], sub: 'alice' },
      { iss: null, sub: 'alice' },
      { iss: 'a', sub: { toString: 'x' } },
      { iss: 'a'.repeat(4000), sub: [['deep']] },
      { sub: Object.fromEntries(Array.from({ length: 600 }, (_, i) => [`k${i}`, i])) },
    ];
    for (const claims of hostile) {
      assert.equal(
        await upgradeStatus(cli.url!, await bearer(claims)),
        401,
        JSON.stringify(claims).slice(0, 80),
      );
    }
    // Payloads a hostile issuer could sign: deep, wide, malformed, not an object.
    const exp = now() + 120;
    for (const payload of [
      `{"exp":${exp},"sub":${'['.repeat(5000)}${']'.repeat(5000)}}`,
      `{"exp":${exp},"iss":${'{"a":'.repeat(1500)}1${'}'.repeat(1500)},"sub":"x"}`,
      `{"exp":${exp},"sub":"x","sub":{"a":1}}`,
      `{"exp":${exp},"sub":`,
      `[{"exp":${exp},"sub":"x"}]`,
      `"{"sub":"x"}"`,
      'null',
      '',
    ])
      assert.equal(await upgradeStatus(cli.url!, rawBearer(payload)), 401, payload.slice(0, 60));
    // The same tokens with string claims get in.
    assert.equal(await upgradeStatus(cli.url!, await bearer({ iss: 'a', sub: 'alice' })), 101);
    assert.equal(await upgradeStatus(cli.url!, await bearer({ sub: 'alice' })), 101);
    // Deeply nested claims beside string ones are no reason to refuse (nor to fail).
    const nested = `${'{"a":'.repeat(1500)}1${'}'.repeat(1500)}`;
    const deepOk = rawBearer(`{"exp":${exp},"iss":"a","sub":"b","nested":${nested}}`);
    assert.equal(await upgradeStatus(cli.url!, deepOk), 101);
  });
});
