/**
 * `--chatgpt-token-stdin`'s recorded contract (issue 35): the REAL `codex exec-server` 0.171 (skipped when it is not
 * cached: scripts/install-codex.mjs 0.171.0) and Corral's executor, each against the same HTTPS stand-in of the two
 * OpenAI services the flag talks to (test/helpers/chatgpt-rig.ts), in a network namespace with only loopback so the
 * real binary reaches no other host. Both get `-c chatgpt_base_url=<stand-in>/backend-api/`. Checked: the requests in
 * order (method, path, Authorization, ChatGPT-Account-Id) are the same, and so is the `Error:` line and exit status
 * when the policy service refuses (HTTP 500) and when it answers what is not JSON. What codex 0.171 sent is in
 * test/fixtures/remote/codex-0.171.0-chatgpt.json. The old Corral refused the flag before asking anything: every
 * case fails there.
 */
import assert from 'node:assert/strict';
import { mkdirSync, rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { codexBinary } from '../e2e/codex/rig.js';
import type { ChatgptRigJob, ChatgptRigResult } from '../helpers/chatgpt-rig.js';
import { CORRAL_BIN, ROOT } from '../helpers/cli.js';
import { netnsPrefix, runRigInNamespace } from '../helpers/netns.js';
import { makeOriginCerts } from '../helpers/tlsOrigin.js';

const codex171 = codexBinary('0.171.0');
const ns = netnsPrefix();
const SCRATCH = join(homedir(), '.cache', 'corral-remote-chatgpt');
const ACCOUNT = 'acct_contract';
const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
const TOKEN = `${b64({ alg: 'none' })}.${b64({ 'https://api.openai.com/auth': { chatgpt_account_id: ACCOUNT }, exp: 9_999_999_999 })}.contractSignature`;

let certs: { caPath: string; keyPath: string; certPath: string };

before(() => {
  rmSync(SCRATCH, { recursive: true, force: true });
  mkdirSync(join(SCRATCH, 'certs'), { recursive: true });
  certs = makeOriginCerts(join(SCRATCH, 'certs'));
});
after(() => rmSync(SCRATCH, { recursive: true, force: true }));

const FLAGS = [
  'exec-server',
  '--remote',
  '{base}/reg',
  '--environment-id',
  'env-chatgpt',
  '--remote-transport',
  'noise',
  '--chatgpt-token-stdin',
];

function run(
  who: 'codex' | 'corral',
  policy: ChatgptRigJob['policy'],
  name: string,
): Promise<ChatgptRigResult> {
  const dir = join(SCRATCH, `${who}-${name}`);
  mkdirSync(join(dir, 'home'), { recursive: true });
  const override = ['-c', 'chatgpt_base_url={base}/backend-api/'];
  const argv =
    who === 'codex'
      ? [codex171!, ...override, ...FLAGS]
      : [process.execPath, CORRAL_BIN, ...FLAGS, ...override, '--log-file', join(dir, 'corral.log')];
  const env: Record<string, string> = {
    PATH: '/usr/bin:/bin',
    HOME: join(dir, 'home'),
    CODEX_HOME: join(dir, 'home'),
    XDG_STATE_HOME: join(dir, 'home'),
    ...(who === 'codex' ? { CODEX_CA_CERTIFICATE: certs.caPath } : { NODE_EXTRA_CA_CERTS: certs.caPath }),
  };
  const job: ChatgptRigJob = {
    argv,
    env,
    token: TOKEN,
    policy,
    keyPath: certs.keyPath,
    certPath: certs.certPath,
  };
  return runRigInNamespace<ChatgptRigResult>(join(ROOT, 'test', 'helpers', 'chatgpt-rig.ts'), job, dir, name);
}

const requestLines = (r: ChatgptRigResult) =>
  r.requests.map(
    (q) =>
      `${q.method} ${q.path} ${q.authorization === `Bearer ${TOKEN}` ? 'token' : q.authorization} ${q.account}`,
  );

describe('--chatgpt-token-stdin: codex 0.171 and Corral against the same stand-ins', {
  skip: !ns ? 'needs unshare -n' : !codex171 ? 'codex 0.171.0 not cached' : false,
}, () => {
  it('policy accepted: the policy fetch, then the Noise registration, with the same headers', async () => {
    const [codex, corral] = await Promise.all([
      run('codex', { status: 200, body: '{}' }, 'ok'),
      run('corral', { status: 200, body: '{}' }, 'ok'),
    ]);
    const expected = [
      `GET /backend-api/wham/config/bundle token ${ACCOUNT}`,
      `POST /reg/cloud/environment/env-chatgpt/register token ${ACCOUNT}`,
    ];
    assert.deepEqual(requestLines(codex).slice(0, 2), expected, codex.stderrTail);
    assert.deepEqual(requestLines(corral).slice(0, 2), expected, corral.stderrTail);
  });

  it('policy refused (HTTP 500) or not JSON: the same error and exit status, the registry never asked', async () => {
    for (const [name, policy] of [
      ['500', { status: 500, body: '{}' }],
      ['garbage', { status: 200, body: 'not json' }],
    ] as const) {
      const [codex, corral] = await Promise.all([run('codex', policy, name), run('corral', policy, name)]);
      assert.equal(codex.error, 'Error: could not load ChatGPT account policy', codex.stderrTail);
      assert.equal(corral.error, codex.error, corral.stderrTail);
      assert.equal(corral.code, codex.code);
      for (const r of [codex, corral])
        assert.deepEqual(requestLines(r), [`GET /backend-api/wham/config/bundle token ${ACCOUNT}`]);
    }
  });
});
