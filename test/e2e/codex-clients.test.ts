/**
 * Released Codex CLIs (npm @openai/codex 0.120.0, 0.125.0, 0.130.0, 0.169.0, 0.171.0), unmodified, as clients of our
 * exec-server: the acceptance runs of spec codex-clients.md §10, offline (fake model on 127.0.0.1, everything inside a
 * network namespace with only `lo`).
 *
 * Environment:
 *   CORRAL_E2E_SERVER=corral (default) | codex   codex = each version's own `codex exec-server` (validates the rig)
 *   CORRAL_E2E_VERSIONS=0.120.0,0.169.0          only these versions
 *   CORRAL_E2E_DIR=<dir>                          scratch space (default ~/.cache/corral-e2e/codex; never under /tmp)
 *   CORRAL_E2E_VERBOSE=1                          stream the rig's progress
 * The binaries come from scripts/install-codex.mjs (run here; fast when cached). Without a reachable npm registry
 * and no cache, the tests skip with that message. Each suite's full result (with every frame) is written to
 * test-artifacts/codex-e2e/<server>-<version>.json.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ancestorPids, calls, describeExchange, explain, notifications, starts } from './codex/checks.js';
import { scenarioSteps } from './codex/fake-model.js';
import { MINIMAL_METHODS } from './codex/relay.js';
import {
  CODEX_VERSIONS,
  codexBinary,
  defaultBaseDir,
  ROOT,
  type RunResult,
  type RunSpec,
  runSuiteIsolated,
  type SuiteResult,
  snapshotCorralCli,
} from './codex/rig.js';

const target = process.env.CORRAL_E2E_SERVER === 'codex' ? 'codex' : 'corral';
const versions = (
  process.env.CORRAL_E2E_VERSIONS?.split(',').map((v) => v.trim()) ?? [...CODEX_VERSIONS]
).filter(Boolean);
const CLIENT_WRAPS = new Set(['0.120.0', '0.125.0', '0.130.0']);
/** The versions that read $CODEX_HOME/environments.toml and can reach an executor through a registry (0.169+). */
const ENVIRONMENTS = new Set(['0.169.0', '0.171.0']);

/** Installs (or finds cached) binaries; returns why a version cannot run, if it cannot. */
function installStatus(): Record<string, string | undefined> {
  let log = '';
  try {
    log = execFileSync(process.execPath, [join(ROOT, 'scripts', 'install-codex.mjs'), ...versions], {
      encoding: 'utf8',
      timeout: 600_000,
    });
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; message: string };
    log = `${err.stdout ?? ''}${err.stderr ?? ''}` || err.message;
  }
  let status: Record<string, { status: string; message?: string }> = {};
  try {
    status = JSON.parse(readFileSync(join(ROOT, '.cache', 'codex', 'status.json'), 'utf8'));
  } catch {}
  const reasons: Record<string, string | undefined> = {};
  for (const v of versions) {
    if (codexBinary(v)) continue;
    const s = status[v];
    reasons[v] =
      s?.status === 'unreachable'
        ? `codex ${v} not cached and ${s.message}`
        : `codex ${v} is not installed: ${s?.message ?? log.trim()}`;
  }
  return reasons;
}

function runsFor(version: string): RunSpec[] {
  const runs: RunSpec[] = [
    { name: 'full', scenario: 'full', sandbox: 'danger-full-access' },
    { name: 'basic-workspace-write', scenario: 'basic', sandbox: 'workspace-write' },
    { name: 'outside-workspace-write', scenario: 'outside', sandbox: 'workspace-write' },
    { name: 'patch-workspace-write', scenario: 'patch', sandbox: 'workspace-write' },
    { name: 'basic-git-repo', scenario: 'basic', sandbox: 'danger-full-access', gitRepo: true },
    { name: 'no-server', scenario: 'basic', sandbox: 'danger-full-access', noServer: true },
    { name: 'minimal-full', scenario: 'full', sandbox: 'danger-full-access', minimal: true },
  ];
  if (ENVIRONMENTS.has(version)) {
    runs.push({
      name: 'basic-environments-toml',
      scenario: 'basic',
      sandbox: 'danger-full-access',
      environmentsToml: true,
    });
  }
  return runs;
}

/** Every run must end normally, with the fake model having played its whole script. */
function assertCompleted(run: RunResult): void {
  const steps = scenarioSteps(run.spec.scenario).length;
  const why = explain(run);
  assert.ok(!run.timedOut, `codex did not finish\n${why}`);
  assert.ok(run.frames.length > 0, `codex never reached the exec-server\n${why}`);
  assert.deepEqual(run.modelErrors, [], `the fake model could not script a step\n${why}`);
  assert.equal(run.exitCode, 0, `codex exited ${run.exitCode ?? run.signal}\n${why}`);
  const last = Math.max(0, ...run.modelRequests.map((r) => r.step));
  assert.equal(last, steps + 1, `codex stopped after step ${last - 1} of ${steps}\n${why}`);
  for (const e of starts(run)) {
    assert.equal(e.error, undefined, `process/start failed\n  ${describeExchange(e)}\n${why}`);
  }
  if (target === 'corral') assertTokenKept(run);
}

/**
 * Corral requires its capability token (`?token=`, printed in its URL): the unmodified CLI was given that URL and
 * every upgrade it made kept the query (the relay passes the request line on unchanged; the server let it in).
 */
function assertTokenKept(run: RunResult): void {
  const u = new URL(run.clientUrl);
  const token = u.searchParams.get('token');
  // Through the registry the CLI holds the registry's harness token; directly, Corral's own 256-bit token.
  if (u.pathname.startsWith('/harness/')) assert.equal(token, 'harness-secret', run.clientUrl);
  else assert.match(token ?? '', /^[\w-]{43}$/, `the client URL has no token: ${run.clientUrl}`);
  assert.ok(run.handshakes.length > 0, 'no upgrade seen');
  for (const h of run.handshakes) {
    const line = h.split('\r\n')[0];
    assert.equal(
      line,
      `GET ${u.pathname}${u.search} HTTP/1.1`,
      `the client dropped the path or query: ${line}`,
    );
  }
}

function output(run: RunResult, n: number): string {
  return run.outputs[`call_fake_${n}`] ?? '';
}

/** Checks of the `basic` step (call_fake_1): out.txt, its output, and, unsandboxed, the ancestry. */
function assertBasic(run: RunResult, serverPid: number, checkAncestry: boolean): void {
  const why = explain(run, ['process/start']);
  assert.equal(run.files['out.txt'], 'hello\n', `out.txt is not "hello"\n${why}`);
  assert.match(output(run, 1), /^hello$/m, `the basic step's output lacks "hello"\n${why}`);
  // The command's environment holds no exec-server token, even where the CLI forwards CODEX_EXEC_SERVER_URL (0.120).
  assert.match(output(run, 1), /^token-vars 0$/m, `a variable with the token reached the command\n${why}`);
  if (checkAncestry) {
    const pids = ancestorPids(output(run, 1));
    assert.ok(
      pids.includes(serverPid),
      `the command did not run as a descendant of the exec-server (pid ${serverPid}); ancestors: ${pids.join(', ')}\n${why}`,
    );
  }
}

/** The checks of the `full` scenario: basic, tty, poll and patch. */
function assertFull(r: RunResult, serverPid: number): void {
  assertCompleted(r);
  assertBasic(r, serverPid, true);
  const why = explain(r, ['process/start', 'process/write', 'fs/writeFile']);
  // tty: exec_command with tty:true, then write_stdin "hi\n".
  assert.match(output(r, 2), /session ID \d+/, `the tty process did not stay running\n${why}`);
  assert.match(output(r, 3), /got:hi/, `the tty step did not echo got:hi\n${why}`);
  const ttyStart = starts(r).find((e) => (e.params as { tty?: boolean }).tty === true);
  assert.ok(ttyStart, `no process/start with tty:true\n${why}`);
  const ttyId = (ttyStart.params as { processId: string }).processId;
  const pty = notifications(r.frames).filter(
    (n) => n.method === 'process/output' && (n.params as { processId: string }).processId === ttyId,
  );
  assert.ok(
    pty.length > 0 && pty.every((n) => (n.params as { stream: string }).stream === 'pty'),
    `the tty process's output was not pushed as stream "pty": ${JSON.stringify(pty.map((n) => n.params))}\n${why}`,
  );
  // poll: "early" within the first yield, "late" only after the empty write_stdin poll.
  // (On a loaded machine bash may print "early" only after the 250 ms yield; it then comes with the poll.)
  assert.match(
    `${output(r, 4)}\n${output(r, 5)}`,
    /early[\s\S]*late/,
    `poll: no "early" then "late"\n${why}`,
  );
  assert.doesNotMatch(output(r, 4), /late/, `"late" arrived before the poll\n${why}`);
  assert.match(
    output(r, 4),
    /session ID \d+/,
    `the poll process did not stay running past its yield\n${why}`,
  );
  assert.match(output(r, 5), /late/, `the empty write_stdin poll did not return "late"\n${why}`);
  // patch: apply_patch through fs/*, then cat.
  assert.match(output(r, 6), /Success|A patched\.txt/, `apply_patch failed\n${why}`);
  assert.equal(r.files['patched.txt'], 'written by apply_patch\n', `patched.txt is wrong\n${why}`);
  assert.match(output(r, 7), /written by apply_patch/, `cat patched.txt failed\n${why}`);
  assert.equal(starts(r).length, 4, `expected 4 process/start (basic, tty, poll, cat)\n${why}`);
  const withJsonrpc = r.frames.filter((f) => f.dir === 's2c' && f.msg && 'jsonrpc' in f.msg);
  assert.equal(withJsonrpc.length, 0, `the server sent "jsonrpc" members: ${withJsonrpc[0]?.text}`);
  assertNotificationOrder(r, target === 'corral');
}

/**
 * Per process: output/exited/closed share one strictly increasing seq and `closed` comes last (spec §7). With
 * `startFirst` (ours, spec §8.4), the process/start answer also precedes the process's first notification; the real
 * server sometimes breaks that (spec §9.12), so the rig validation does not ask it.
 */
function assertNotificationOrder(r: RunResult, startFirst: boolean): void {
  for (const start of starts(r)) {
    const id = (start.params as { processId: string }).processId;
    const answered = r.frames.findIndex(
      (f) => f.dir === 's2c' && f.conn === start.conn && f.msg?.id === start.id && !f.msg?.method,
    );
    const mine = r.frames
      .map((f, i) => ({ f, i }))
      .filter(
        ({ f }) =>
          f.dir === 's2c' &&
          f.msg?.method?.startsWith('process/') === true &&
          (f.msg.params as { processId?: string } | undefined)?.processId === id,
      );
    const detail = mine
      .map(({ f }) => `${f.msg!.method}#${(f.msg!.params as { seq: number }).seq}`)
      .join(', ');
    assert.ok(mine.length > 0, `no notifications for process ${id}`);
    const seqs = mine.map(({ f }) => (f.msg!.params as { seq: number }).seq);
    for (let k = 1; k < seqs.length; k++) {
      assert.ok(seqs[k]! > seqs[k - 1]!, `process ${id}: seq not strictly increasing: ${detail}`);
    }
    assert.equal(
      mine.at(-1)!.f.msg!.method,
      'process/closed',
      `process ${id}: closed is not last: ${detail}`,
    );
    if (startFirst) {
      assert.ok(
        answered >= 0 && answered < mine[0]!.i,
        `process ${id}: a notification preceded the process/start answer: ${detail}`,
      );
    }
  }
}

/** basic-workspace-write: the client's sandbox request is enforced by the server. */
function checkBasicWorkspaceWrite(r: RunResult, version: string, serverPid: number): void {
  assertCompleted(r);
  assertBasic(r, serverPid, false);
  const start = starts(r)[0];
  assert.ok(start, `no process/start\n${explain(r)}`);
  const params = start.params as { argv: string[]; sandbox?: unknown };
  if (CLIENT_WRAPS.has(version)) {
    // 0.120–0.130 wrap the command in codex-linux-sandbox themselves; the server runs it (as sent or unwrapped).
    assert.match(
      params.argv[0] ?? '',
      /codex-linux-sandbox$/,
      `the client did not wrap the command: argv ${JSON.stringify(params.argv)}`,
    );
    assert.deepEqual(params.argv.slice(params.argv.indexOf('--') + 1, -1), ['/bin/bash', '-lc']);
  } else {
    assert.ok(params.sandbox, `0.169 sent no sandbox object\n${describeExchange(start)}`);
    const type = (start.result as { sandboxType?: string } | undefined)?.sandboxType;
    assert.equal(
      type,
      'linuxSeccomp',
      `process/start with a workspace-write sandbox must be enforced (sandboxType "linuxSeccomp"), got ${JSON.stringify(type)}: ` +
        `the sandbox engine (src/sandbox) is not wired into process/start, or did not apply\n  ${describeExchange(start)}`,
    );
  }
}

/** outside-workspace-write: writes outside the workspace fail and leave no file. */
function checkOutsideWorkspaceWrite(r: RunResult, version: string): void {
  assertCompleted(r);
  const why = explain(r, ['process/start', 'fs/writeFile', 'fs/createDirectory']);
  assert.match(output(r, 1), /Read-only file system/, `echo x > ../outside.txt was not refused\n${why}`);
  assert.match(
    output(r, 1),
    /exited with code [1-9]|Sandbox\(Denied|exit_code: [1-9]/,
    `the outside write did not fail\n${why}`,
  );
  // The client may refuse the patch itself ("writing outside of the project"); if it forwards it, we must refuse.
  const outsideWrites = calls(r, 'fs/writeFile').filter((e) =>
    /outside\.txt$/.test(String((e.params as { path?: string }).path)),
  );
  for (const e of outsideWrites) {
    assert.ok(e.error, `the server wrote outside the workspace\n  ${describeExchange(e)}`);
    assert.equal(
      e.error.code,
      -32603,
      `an outside fs/writeFile must fail with -32603\n  ${describeExchange(e)}`,
    );
  }
  assert.match(
    output(r, 2),
    /rejected|error|denied|failed/i,
    `the outside apply_patch was not refused\n${why}`,
  );
  assert.equal(r.outsideExists, false, `../outside.txt exists after the run\n${why}`);
  if (!CLIENT_WRAPS.has(version)) {
    const type = (starts(r)[0]?.result as { sandboxType?: string } | undefined)?.sandboxType;
    assert.equal(type, 'linuxSeccomp', `the outside write ran without our sandbox\n${why}`);
  }
}

/** patch-workspace-write: apply_patch inside the workspace goes through fs/writeFile with the sandbox context. */
function checkPatchWorkspaceWrite(r: RunResult, version: string): void {
  assertCompleted(r);
  const why = explain(r, ['fs/writeFile', 'fs/createDirectory', 'fs/getMetadata', 'fs/readFile']);
  assert.equal(r.files['patched.txt'], 'written by apply_patch\n', `patched.txt is wrong\n${why}`);
  assert.match(output(r, 2), /written by apply_patch/, `cat patched.txt failed\n${why}`);
  const writes = calls(r, 'fs/writeFile').filter((e) =>
    /patched\.txt$/.test(String((e.params as { path?: string }).path)),
  );
  assert.equal(writes.length, 1, `expected one fs/writeFile of patched.txt\n${why}`);
  const w = writes[0]!;
  assert.deepEqual(w.result, {}, `fs/writeFile did not succeed\n  ${describeExchange(w)}`);
  if (version !== '0.120.0') {
    assert.ok(
      (w.params as { sandbox?: unknown }).sandbox,
      `fs/writeFile carried no sandbox context\n  ${describeExchange(w)}`,
    );
  }
}

const reasons = installStatus();
let corralCli: string | undefined;
after(() => {
  if (corralCli && !process.env.CORRAL_E2E_CORRAL_CLI) rmSync(corralCli, { force: true });
});
const artifacts = join(ROOT, 'test-artifacts', 'codex-e2e');

/**
 * Runs one suite before a describe's tests (one server for all its runs; its full result, every frame included, goes
 * to test-artifacts/codex-e2e/) and returns the accessors the tests use.
 */
function suiteFor(
  version: string,
  runs: RunSpec[],
  skip: string | undefined,
  opts: { timeoutMs: number; viaRegistry?: boolean },
) {
  let suite: SuiteResult;
  const name = `${target}-${version}${opts.viaRegistry ? '-registry' : ''}`;
  before(
    async () => {
      if (skip) return;
      const binary = codexBinary(version)!;
      corralCli ??= target === 'corral' ? await snapshotCorralCli() : undefined;
      suite = await runSuiteIsolated({
        version,
        binary,
        server: target === 'corral' ? { kind: 'corral', cli: corralCli } : { kind: 'codex', version, binary },
        baseDir: join(defaultBaseDir(), name),
        runs,
        timeoutMs: opts.timeoutMs,
        viaRegistry: opts.viaRegistry,
      });
      mkdirSync(artifacts, { recursive: true });
      writeFileSync(join(artifacts, `${name}.json`), JSON.stringify(suite, null, 1));
    },
    { timeout: 290_000 },
  );
  return {
    run(runName: string): RunResult {
      assert.equal(suite.serverError, undefined, `the exec-server did not start: ${suite.serverError}`);
      const r = suite.runs.find((x) => x.name === runName);
      assert.ok(r, `no run ${runName}`);
      return r;
    },
    serverPid: () => suite.server!.pid,
  };
}

for (const version of versions) {
  describe(`codex ${version} against ${target === 'corral' ? 'our exec-server' : `codex ${version} exec-server`}`, () => {
    const skip = reasons[version];
    const { run, serverPid } = suiteFor(version, runsFor(version), skip, { timeoutMs: 25_000 });

    it('full: basic + tty + poll + patch', { skip }, () => assertFull(run('full'), serverPid()));

    it('minimal-full: only the §8 method set reaches the server', { skip }, () => {
      const r = run('minimal-full');
      assertFull(r, serverPid());
      // The filter worked: the server saw only §8 methods (what the relay kept back is in the artifacts).
      const seen = r.frames
        .filter((f) => f.dir === 'c2s' && !f.byRelay && f.msg?.method)
        .map((f) => f.msg!.method!);
      assert.deepEqual(
        seen.filter((m) => !MINIMAL_METHODS.includes(m)),
        [],
        'a method outside the §8 set reached the server',
      );
    });

    it('basic-workspace-write', { skip }, () =>
      checkBasicWorkspaceWrite(run('basic-workspace-write'), version, serverPid()),
    );

    it('outside-workspace-write: writes outside the workspace fail and leave no file', { skip }, () =>
      checkOutsideWorkspaceWrite(run('outside-workspace-write'), version),
    );

    it('patch-workspace-write', { skip }, () =>
      checkPatchWorkspaceWrite(run('patch-workspace-write'), version),
    );

    it('basic-git-repo: .git discovered, no git process on the server', { skip }, () => {
      const r = run('basic-git-repo');
      assertCompleted(r);
      assertBasic(r, serverPid(), true);
      const gitMeta = calls(r, 'fs/getMetadata').find((e) =>
        /\/work\/\.git$/.test(String((e.params as { path?: string }).path)),
      );
      assert.ok(gitMeta, `no fs/getMetadata of <workspace>/.git\n${explain(r)}`);
      assert.equal(
        (gitMeta.result as { isDirectory?: boolean } | undefined)?.isDirectory,
        true,
        `.git discovery failed\n  ${describeExchange(gitMeta)}`,
      );
      assert.deepEqual(r.gitInvocations, [], 'the exec-server started git');
      const gitStarts = starts(r).filter((e) =>
        /(^|\/)git$/.test((e.params as { argv: string[] }).argv[0] ?? ''),
      );
      assert.deepEqual(
        gitStarts.map(describeExchange),
        [],
        'a git process was started through process/start',
      );
    });

    it('no-server: nothing listening → the CLI reports it and never falls back to local execution', {
      skip,
    }, () => {
      const r = run('no-server');
      const why = explain(r);
      assert.ok(!r.timedOut, `codex did not finish\n${why}`);
      assert.equal(
        r.files['out.txt'],
        undefined,
        `the command ran although no exec-server was reachable\n${why}`,
      );
      if (version === '0.120.0') {
        assert.equal(r.exitCode, 1, `0.120 must exit 1 without a server\n${why}`);
        assert.match(r.stderr, /failed to connect to exec-server websocket/, why);
      } else if (CLIENT_WRAPS.has(version)) {
        assert.equal(r.exitCode, 0, why);
        assert.match(output(r, 1), /failed to connect to exec-server websocket/, why);
      } else {
        assert.equal(r.exitCode, 0, why);
        assert.match(output(r, 1), /No usable execution environment is available/, why);
      }
    });

    if (ENVIRONMENTS.has(version)) {
      it('basic-environments-toml: selected through $CODEX_HOME/environments.toml', { skip }, () => {
        const r = run('basic-environments-toml');
        assertCompleted(r);
        assertBasic(r, serverPid(), true);
      });
    }
  });
}

/**
 * 0.169 through an environment registry (issue 18): the server runs as a REMOTE executor (`exec-server --remote …
 * --remote-transport direct --aws-sigv4`) of the rig's fake registry (test/helpers/registry.ts), and the unmodified
 * CLI, pointed at the registry's harness URL by environments.toml, reaches it only through the registry's relay:
 *
 *   codex exec ─WS─> frame-logging relay ─WS─> registry relay (/harness/corral-e2e) ═ outbound link ═> executor
 *
 * `registry-resume` crashes the registry (every socket closed, all registrations forgotten) while a command runs; the
 * executor's redial gets 409 and it registers again, the CLI reconnects and resumes its session, and the poll still
 * finds the command and its later output.
 */
const REGISTRY_RUNS: RunSpec[] = [
  { name: 'registry-full', scenario: 'full', sandbox: 'danger-full-access', environmentsToml: true },
  {
    name: 'registry-basic-workspace-write',
    scenario: 'basic',
    sandbox: 'workspace-write',
    environmentsToml: true,
  },
  {
    name: 'registry-outside-workspace-write',
    scenario: 'outside',
    sandbox: 'workspace-write',
    environmentsToml: true,
  },
  {
    name: 'registry-patch-workspace-write',
    scenario: 'patch',
    sandbox: 'workspace-write',
    environmentsToml: true,
  },
  {
    name: 'registry-resume',
    scenario: 'resume',
    sandbox: 'danger-full-access',
    environmentsToml: true,
    crashRegistryBeforeStep: 2,
  },
];

for (const version of versions.filter((v) => ENVIRONMENTS.has(v))) {
  describe(`codex ${version} through the environment registry's relay, against ${target === 'corral' ? 'our exec-server' : `codex ${version} exec-server`} as a remote executor`, () => {
    const skip = reasons[version];
    const { run, serverPid } = suiteFor(version, REGISTRY_RUNS, skip, {
      timeoutMs: 40_000,
      viaRegistry: true,
    });
    /** Every harness upgrade reached the relay (101) and every run went through it. */
    const throughRelay = (r: RunResult) => {
      const harness = (r.registryRequests ?? []).filter((x) => x.startsWith('harness-handshake'));
      assert.ok(harness.length > 0, `the CLI never reached the registry\n${explain(r)}`);
      for (const h of harness) assert.match(h, /^harness-handshake 101 /, h);
    };

    it('registry-full: basic + tty + poll + patch through the relay', { skip }, () => {
      const r = run('registry-full');
      assertFull(r, serverPid());
      throughRelay(r);
    });

    it('registry-basic-workspace-write', { skip }, () => {
      const r = run('registry-basic-workspace-write');
      checkBasicWorkspaceWrite(r, version, serverPid());
      throughRelay(r);
    });

    it('registry-outside-workspace-write', { skip }, () => {
      const r = run('registry-outside-workspace-write');
      checkOutsideWorkspaceWrite(r, version);
      throughRelay(r);
    });

    it('registry-patch-workspace-write', { skip }, () => {
      const r = run('registry-patch-workspace-write');
      checkPatchWorkspaceWrite(r, version);
      throughRelay(r);
    });

    it('registry-resume: the registry is killed mid-session; the executor re-registers, the CLI resumes', {
      skip,
    }, () => {
      const r = run('registry-resume');
      assertCompleted(r);
      throughRelay(r);
      const why = explain(r, ['initialize', 'process/start', 'process/read']);
      assert.match(output(r, 1), /early/, `the command did not start\n${why}`);
      assert.match(output(r, 1), /session ID \d+/, `the command did not outlive its yield\n${why}`);
      assert.match(
        output(r, 2),
        /late/,
        `the poll after the crash did not find the command's later output\n${why}`,
      );
      // The executor's old registration was refused (409) and it registered again before the CLI got back in.
      const seq = (r.registryRequests ?? []).map((x) => x.split(' ').slice(0, 2).join(' '));
      const conflict = seq.indexOf('executor-handshake 409');
      assert.ok(conflict >= 0, `no 409 after the crash: ${seq.join(', ')}`);
      assert.equal(seq[conflict + 1], 'register 200', seq.join(', '));
      assert.ok(seq.slice(conflict).includes('harness-handshake 101'), seq.join(', '));
      // The CLI resumed its session (the same id), and the command was started once.
      const inits = calls(r, 'initialize');
      assert.ok(inits.length >= 2, `the CLI did not reconnect\n${why}`);
      const first = (inits[0]!.result as { sessionId: string }).sessionId;
      const resumed = inits.slice(1).map((e) => (e.params as { resumeSessionId?: string }).resumeSessionId);
      assert.ok(
        resumed.includes(first),
        `no initialize resumed ${first}: ${JSON.stringify(resumed)}\n${why}`,
      );
      assert.ok(
        inits.slice(1).every((e) => !e.error),
        `a resume was refused\n${why}`,
      );
      assert.equal(starts(r).length, 1, `the command was started again\n${why}`);
    });
  });
}
