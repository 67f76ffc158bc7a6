/**
 * The remote-executor contract (`--remote URL --environment-id ID --remote-transport direct`), learnt from the released
 * Codex 0.169 executor and held against Corral: the same rig (test/helpers/registry-contract.ts: a fake registry +
 * relay, a harness that reaches the executor only through it), two executors. Each runs in a network namespace with
 * only `lo` when that works (root), so neither can reach anything but the registry.
 *
 * The Codex transcript is recorded in test/fixtures/remote/codex-0.169.0-direct.json
 * (`CORRAL_RECORD_FIXTURE=1 npm test -- remote-contract` rewrites it); Corral is compared with the live run of Codex
 * when the binary is cached, else with the fixture.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { codexBinary } from '../e2e/codex/rig.js';
import { ROOT } from '../helpers/cli.js';
import { netnsPrefix, runRigInNamespace } from '../helpers/netns.js';
import {
  codexNoiseExecutor,
  corralNoiseExecutor,
  type RigResult,
  runNoiseRig,
} from '../helpers/noiseRigRun.js';
import { type ContractJob, type ContractTranscript, FAKE_AWS } from '../helpers/registry-contract.js';

const FIXTURE = join(ROOT, 'test', 'fixtures', 'remote', 'codex-0.169.0-direct.json');
const SCRATCH = join(homedir(), '.cache', 'corral-remote-contract');

function runInNamespace<T>(name: string, job: unknown): Promise<T> {
  return runRigInNamespace<T>(join(ROOT, 'test', 'helpers', 'registry-contract.ts'), job, SCRATCH, name);
}

type Executor = 'codex' | 'corral';

function executorArgv(kind: Executor, binary: string | null): string[] {
  const common = ['--remote', '{base}', '--environment-id', '{id}', '--remote-transport', 'direct'];
  const sig = ['--aws-sigv4', '--aws-region', FAKE_AWS.region];
  if (kind === 'codex') return [binary!, 'exec-server', ...common, ...sig];
  // The executor's cwd is its scratch directory: tsx is named by its resolved URL, not looked up from there (the
  // audit worker resolves it from its own module, so the trail stays on, in the executor's scratch HOME).
  const tsx = import.meta.resolve('tsx');
  return [process.execPath, '--import', tsx, join(ROOT, 'src', 'cli.ts'), 'exec-server', ...common, ...sig];
}

function executorEnv(dir: string): Record<string, string> {
  return {
    PATH: '/usr/bin:/bin',
    HOME: join(dir, 'home'),
    CODEX_HOME: join(dir, 'home'),
    AWS_ACCESS_KEY_ID: FAKE_AWS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: FAKE_AWS.secretAccessKey,
    // No instance-metadata lookups (there is no network here anyway).
    AWS_EC2_METADATA_DISABLED: 'true',
  };
}

async function contract(kind: Executor, binary: string | null): Promise<ContractTranscript> {
  const dir = join(SCRATCH, kind);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'home'), { recursive: true });
  const job: ContractJob = {
    argv: executorArgv(kind, binary),
    env: executorEnv(dir),
    dir,
    environmentId: 'env-contract',
    auth: { kind: 'sigv4', ...FAKE_AWS },
  };
  return runInNamespace(kind, { kind: 'contract', job });
}

async function refusals(kind: Executor, binary: string | null) {
  const dir = join(SCRATCH, `${kind}-refuse`);
  mkdirSync(join(dir, 'home'), { recursive: true });
  const base = { argv: executorArgv(kind, binary), env: executorEnv(dir), dir };
  return runInNamespace<{ code: number | null; stderr: string; requests: string[] }[]>(`${kind}-refuse`, [
    // Hosts under .invalid are refused before any lookup: no address is ever a target.
    { kind: 'refusal', job: { ...base, executorUrl: 'ws://executor.invalid/link' } },
    { kind: 'refusal', job: { ...base, base: 'http://registry.invalid' } },
  ]);
}

/** What must be the same for both executors. */
function shape(t: ContractTranscript) {
  const signed = (h: Record<string, string>) =>
    /SignedHeaders=([^,]+)/.exec(h.authorization ?? '')?.[1] ?? null;
  const first = t.register[0]!;
  return {
    register: {
      method: first.method,
      path: first.path,
      body: first.body,
      contentType: first.headers['content-type'],
      signs: ['content-type', 'host', 'x-amz-date'].every((h) =>
        signed(first.headers)?.split(';').includes(h),
      ),
    },
    handshake: {
      signedHeaders: signed(t.handshakes[0]!.headers),
      keepsQuery: t.handshakes.every((h) => h.url.includes('?registration=')),
    },
    allAuthenticated: t.authValid.every(Boolean),
    echo: t.echo,
    conflict: t.conflict.sequence,
    resume: t.resume,
  };
}

/** Codex's retry schedule: attempt n waits base·2^min(n,4) ms (base 500, cap 5000) plus up to half again. */
function assertSchedule(t: ContractTranscript, who: string): void {
  const slack = 400; // scheduling and process start under load
  const within = (ms: number, base: number, what: string) =>
    assert.ok(
      ms >= base * 0.9 && ms <= base * 1.5 + slack,
      `${who}: ${what} took ${ms} ms, expected ${base}–${base * 1.5} ms`,
    );
  within(t.redialAfterSessionMs, 500, 'the redial after a session');
  // After a drop: attempt 0 (then three 503s: attempts 1, 2, 3), then the link.
  [500, 1000, 2000, 4000].forEach((base, i) => {
    within(t.backoffMs[i]!, base, `retry ${i} after a dropped link`);
  });
}

const binary = codexBinary('0.169.0');

describe('remote executor contract (direct transport), recorded from codex 0.169 and held against Corral', () => {
  let codex: ContractTranscript | null = null;
  let corral: ContractTranscript;

  before(
    async () => {
      if (binary) codex = await contract('codex', binary);
      if (codex && process.env.CORRAL_RECORD_FIXTURE) {
        mkdirSync(join(ROOT, 'test', 'fixtures', 'remote'), { recursive: true });
        const refused = await refusals('codex', binary);
        writeFileSync(
          FIXTURE,
          `${JSON.stringify(
            {
              recordedWith: 'codex-cli 0.169.0 exec-server --remote … --remote-transport direct --aws-sigv4',
              recordedBy: 'test/integration/remote-contract.test.ts (CORRAL_RECORD_FIXTURE=1)',
              shape: shape(codex),
              transcript: { ...codex, stderrTail: '' },
              refusals: refused,
            },
            null,
            1,
          )}\n`,
        );
      }
      corral = await contract('corral', null);
    },
    { timeout: 120_000 },
  );

  it('the rig itself: the released Codex executor passes it (skipped when 0.169 is not cached)', {
    skip: !binary,
  }, () => {
    assert.ok(codex);
    const s = shape(codex);
    assert.equal(s.register.method, 'POST');
    assert.equal(s.register.path, '/cloud/environment/env-contract/direct/register');
    assert.equal(s.register.body, '{"transport":"direct_jsonrpc_v1"}');
    assert.equal(s.resume.resumed && s.resume.late, true);
    assertSchedule(codex, 'codex');
  });

  it('Corral sends and does what the recorded Codex executor does', () => {
    const recorded = codex
      ? shape(codex)
      : (JSON.parse(readFileSync(FIXTURE, 'utf8')).shape as ReturnType<typeof shape>);
    assert.deepEqual(shape(corral), recorded, `Corral's stderr:\n${corral.stderrTail}`);
    assertSchedule(corral, 'corral');
  });

  it('both refuse a non-TLS registry or executor URL that is not loopback, before any request to it', async () => {
    const mine = await refusals('corral', null);
    const theirs = binary
      ? await refusals('codex', binary)
      : (JSON.parse(readFileSync(FIXTURE, 'utf8')).refusals as typeof mine);
    for (const [who, r] of [
      ['corral', mine],
      ['codex', theirs],
    ] as const) {
      assert.notEqual(r[0]!.code, 0, `${who}: accepted ws:// to a non-loopback executor URL`);
      assert.match(r[0]!.stderr, /requires wss(:\/\/)? for non-loopback/, who);
      assert.deepEqual(
        r[0]!.requests,
        ['register POST /cloud/environment/env-refuse/direct/register 200'],
        who,
      );
      assert.notEqual(r[1]!.code, 0, `${who}: accepted http:// to a non-loopback registry`);
      assert.match(r[1]!.stderr, /requires https(:\/\/)? for non-loopback/, who);
      assert.deepEqual(r[1]!.requests, [], who);
    }
  });
});

describe('Noise transport: the pause after 8 failed handshakes, recorded from codex 0.171 and held against Corral', {
  skip: netnsPrefix() ? false : 'needs unshare -n',
}, () => {
  // ~10 s of waiting each (the pause itself): why this lives in the slow tier. Corral's logic is also unit-tested
  // with a fake clock in test/hostile/noise-relay.test.ts.
  const expectPause = (r: RigResult) => {
    assert.equal(r.error, undefined, `${r.error}\n${r.stderrTail}`);
    const p = r.pause!;
    assert.equal(
      p.rightAfter,
      'noise_relay_protocol_error',
      'a good handshake right after the 8th failure is reset',
    );
    assert.ok(
      p.acceptedAfterMs !== null && p.acceptedAfterMs >= 9_000 && p.acceptedAfterMs <= 13_000,
      `${p.acceptedAfterMs}`,
    );
    assert.equal(p.afterOneMoreFailure, 'accepted', 'the budget starts again after the pause');
    assert.equal(p.links, 1, 'the link stays open');
  };
  it('codex exec-server 0.171 (skipped when not cached)', { skip: !codexBinary('0.171.0') }, async () => {
    const codex = codexBinary('0.171.0')!;
    expectPause(await runNoiseRig('codex-pause', codexNoiseExecutor(codex), 'file:///', undefined, true));
  });
  it('Corral', async () => {
    expectPause(await runNoiseRig('corral-pause', corralNoiseExecutor(), '/', undefined, true));
  });
});
