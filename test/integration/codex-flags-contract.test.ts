/**
 * The exec-server flags of codex 0.171 (issue 35), recorded from the released binary and held against Corral: the
 * same refusal (text and exit code) for each bad value, and every flag of `codex exec-server --help` and
 * `codex exec-server forward --help` accepted by Corral's parser and named in its --help.
 *
 * The recording is test/fixtures/codex-0.171.0-flags.json (`CORRAL_RECORD_FIXTURE=1 npm test -- codex-flags-contract`
 * rewrites it from the cached binary, scripts/install-codex.mjs 0.171.0); Corral is compared with the live binary
 * when it is cached, else with the fixture. Every case fails before anything listens or dials (no network).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { CODEX_171_FEATURES } from '../../src/codexFeatures.js';
import { codexBinary } from '../e2e/codex/rig.js';
import { CORRAL_BIN, ROOT } from '../helpers/cli.js';

const FIXTURE = join(ROOT, 'test', 'fixtures', 'codex-0.171.0-flags.json');
const SCRATCH = join(homedir(), '.cache', 'corral-codex-flags');
const binary = codexBinary('0.171.0');

/** Bad command lines: each must be refused the same way by both servers. */
const CASES: { args: string[]; env?: Record<string, string> }[] = [
  { args: ['--linux-sandbox-pid-namespace', 'foo'] },
  { args: ['--linux-sandbox-pid-namespace', 'Isolate'] },
  { args: ['--linux-sandbox-pid-namespace', 'inherit', '--linux-sandbox-pid-namespace', 'isolate'] },
  { args: ['--tcp-upstream-proxy', 'foo'] },
  { args: ['--tcp-upstream-proxy', 'http://127.0.0.1:8080'] },
  { args: ['--tcp-upstream-proxy', '127.0.0.1:99999'] },
  { args: ['--tcp-upstream-proxy', '127.0.0.1:'] },
  { args: ['--tcp-upstream-proxy', ':80'] },
  { args: ['--tcp-upstream-proxy', '::1:80'] },
  { args: ['--tcp-upstream-proxy', '127.0.0.1:-1'] },
  { args: ['--tcp-upstream-proxy', 'localhost:0'] },
  { args: ['--tcp-upstream-proxy', 'a:1:2'] },
  { args: ['--tcp-upstream-proxy', '[::1]'] },
  { args: ['--tcp-upstream-proxy', 'a:1', '--tcp-upstream-proxy', 'b:2'] },
  {
    args: ['--listen', 'ws://127.0.0.1:0'],
    env: { CODEX_EXEC_SERVER_PROXY_PRIVATE_IPS_VIA_UPSTREAM: 'yes' },
  },
  { args: ['--listen', 'ws://127.0.0.1:0'], env: { CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE: '1' } },
  { args: ['--enable', 'nosuchfeature'] },
  { args: ['--disable', 'nosuchfeature'] },
  { args: ['-c', 'foo', '--strict-config'] },
  { args: ['-c', 'foo=bar', '--strict-config'] },
  { args: ['-c', 'features.nosuch=true', '--strict-config'] },
  { args: ['-c', 'features.shell_tool=maybe', '--strict-config'] },
  { args: ['-c', 'features.shell_tool=1', '--strict-config'] },
  { args: ['-c', 'features.shell_tool="true"', '--strict-config'] },
  { args: ['-c', 'features={a=1}', '--strict-config'] },
];

/** The refusal as both print it: the message, without clap's usage lines or Rust's backtrace. */
function refusal(stderr: string): string {
  const lines = stderr.split('\n');
  const out: string[] = [];
  for (const l of lines) {
    if (/^Stack backtrace:|^\s+\d+: /.test(l) || /^Usage: /.test(l)) break;
    if (/^For more information/.test(l)) break;
    out.push(l);
  }
  return out.join('\n').trim();
}

function run(argv: string[], env: Record<string, string> = {}) {
  mkdirSync(join(SCRATCH, 'home'), { recursive: true });
  const r = spawnSync(argv[0]!, argv.slice(1), {
    cwd: ROOT,
    env: {
      PATH: '/usr/bin:/bin',
      HOME: join(SCRATCH, 'home'),
      CODEX_HOME: join(SCRATCH, 'home'),
      RUST_BACKTRACE: '0',
      ...env,
    },
    input: '',
    timeout: 20_000,
    encoding: 'utf8',
  });
  return { code: r.status, stderr: refusal(r.stderr), stdout: r.stdout };
}

const corral = (args: string[], env?: Record<string, string>) =>
  run([process.execPath, CORRAL_BIN, 'exec-server', ...args], env);

interface Recording {
  recordedWith: string;
  help: string;
  forwardHelp: string;
  features: string[];
  cases: { args: string[]; env?: Record<string, string>; code: number | null; stderr: string }[];
}

function record(): Recording {
  const b = binary!;
  const features = spawnSync(b, ['features', 'list'], {
    encoding: 'utf8',
    env: { PATH: '/usr/bin:/bin', CODEX_HOME: join(SCRATCH, 'home'), HOME: join(SCRATCH, 'home') },
  })
    .stdout.split('\n')
    .map((l) => l.split(/\s+/)[0]!)
    .filter(Boolean);
  return {
    recordedWith: 'codex-cli 0.171.0',
    help: run([b, 'exec-server', '--help']).stdout,
    forwardHelp: run([b, 'exec-server', 'forward', '--help']).stdout,
    features,
    cases: CASES.map((c) => ({ ...c, ...run([b, 'exec-server', ...c.args], c.env) })).map(
      ({ stdout: _, ...rest }) => rest,
    ),
  };
}

mkdirSync(join(SCRATCH, 'home'), { recursive: true });
const recording: Recording = binary ? record() : (JSON.parse(readFileSync(FIXTURE, 'utf8')) as Recording);
if (binary && process.env.CORRAL_RECORD_FIXTURE)
  writeFileSync(FIXTURE, `${JSON.stringify(recording, null, 1)}\n`);

/** The long flags a --help lists. */
const flagsOf = (help: string) => [...new Set([...help.matchAll(/--([a-z][a-z0-9-]+)/g)].map((m) => m[1]!))];

describe(`codex 0.171 exec-server flags (${binary ? 'live binary' : 'recorded fixture'}) against Corral`, () => {
  test('each bad value is refused with Codex’s text and exit code', () => {
    for (const c of recording.cases) {
      const mine = corral(c.args, c.env);
      assert.deepEqual(
        { code: mine.code, stderr: mine.stderr },
        { code: c.code, stderr: c.stderr },
        `corral exec-server ${c.args.join(' ')}`,
      );
    }
  });

  test('every flag of `codex exec-server --help` and `forward --help` is in Corral’s --help', () => {
    const help = corral(['--help']).stdout;
    const missing = [...flagsOf(recording.help), ...flagsOf(recording.forwardHelp)].filter(
      (f) => f !== 'help' && !help.includes(`--${f}`),
    );
    assert.deepEqual(missing, []);
  });

  test('the recorded feature list is the one Corral checks --enable/--disable against', () => {
    assert.deepEqual([...CODEX_171_FEATURES].sort(), [...recording.features].sort());
  });
});
