import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, beforeEach, describe, test } from 'node:test';
import { startHost } from '../../src/app/host.js';
import type { ManagedProcess } from '../../src/process/managedProcess.js';
import { ensureBuilt, openBrowser, visibleText } from '../browser/harness.js';
import { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import {
  codexProfileEntries,
  type Fixture,
  fixture,
  PATH,
  pathEntry,
  special,
  workspaceWrite,
} from './sandbox-util.js';

/*
 * Codex 0.120–0.130 send an argv that invokes their own codex-linux-sandbox launcher (sandbox.md §3.1). As root we
 * unwrap it: the command after `--` runs under OUR bwrap (with --cap-drop ALL), never under the launcher. The fake
 * launcher here records every execution in a marker file, so an unwrapped run is proven not to have touched it;
 * it then runs the command after `--` (as the real one would, minus the sandbox), so "run as sent" is observable.
 */

const isRoot = process.getuid?.() === 0;

let f: Fixture;
let launcher: string;
let marker: string;
let memories: string;
let ts: TestServer;
let c: RpcClient & { sessionId: string };
const summaries = new Map<string, Record<string, unknown> | undefined>();
let n = 0;

/** The flags 0.120/0.125 send (sandbox.md §3.1), for cwd $W. */
function flags0120(): string[] {
  return [
    '--sandbox-policy-cwd',
    f.W,
    '--command-cwd',
    f.W,
    '--sandbox-policy',
    JSON.stringify(workspaceWrite({ writable_roots: [memories] })),
    '--file-system-sandbox-policy',
    JSON.stringify({
      kind: 'restricted',
      entries: [
        special('root', 'read'),
        special('current_working_directory', 'write'),
        special('slash_tmp', 'write'),
        special('tmpdir', 'write'),
        pathEntry(memories, 'write'),
        pathEntry(join(f.W, '.codex'), 'read'),
      ],
    }),
    '--network-sandbox-policy',
    '"restricted"',
  ];
}

/** The flags 0.130 sends: one managed permission profile with project_roots specials. */
function flags0130(): string[] {
  return [
    '--sandbox-policy-cwd',
    f.W,
    '--command-cwd',
    f.W,
    '--permission-profile',
    JSON.stringify({
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries: [...codexProfileEntries(), pathEntry(memories, 'write')],
      },
      network: 'restricted',
    }),
  ];
}

/** Escape attempts of sandbox.md §7.1 / test 15, each reporting its own status. */
const PROBE = [
  'grep CapEff /proc/self/status',
  'echo in > inside.txt && echo inside-ok',
  'echo x > "$OUT/outside.txt"; echo "outside-rc=$?"',
  'umount .git; echo "umount-rc=$?"',
  'mount -o remount,rw,bind /; echo "remount-rc=$?"',
  'echo hook > .git/hooks/pre-commit; echo "hook-rc=$?"',
  'curl -sS -m3 "http://127.0.0.1:$PORT/"; echo "curl-rc=$?"',
].join('; ');

interface Run {
  processId: string;
  sandboxType: string;
  exitCode: number;
  stdout: string;
  stderr: string;
  pty: string;
  summary: Record<string, unknown> | undefined;
}

async function start(
  client: RpcClient,
  argv: string[],
  extra: Record<string, unknown> = {},
  env: Record<string, string> = {},
): Promise<Run> {
  const processId = `wrapped-${++n}`;
  const started = await client.request<{ processId: string; sandboxType: string }>('process/start', {
    processId,
    argv,
    cwd: f.W,
    env: { PATH, OUT: f.OUT, PORT: String(f.port), ...env },
    tty: false,
    arg0: argv[0],
    ...extra,
  });
  const events = await client.collect(processId, 20_000);
  const exited = events.find((e) => e.method === 'process/exited')!;
  return {
    processId,
    sandboxType: started.sandboxType,
    exitCode: exited.params.exitCode as number,
    stdout: client.output(processId, 'stdout'),
    stderr: client.output(processId, 'stderr'),
    pty: client.output(processId, 'pty'),
    summary: summaries.get(processId),
  };
}

function trackSummaries(server: TestServer): void {
  server.server.events.on('process', (kind: string, proc: ManagedProcess) => {
    if (kind === 'started') summaries.set(proc.info.processId, proc.launch.summary);
  });
}

/** The run was confined by our bwrap: no capabilities, writes outside the workspace and to .git refused, no net. */
function assertConfined(r: Run): void {
  const out = `${r.stdout}\n--stderr--\n${r.stderr}`;
  assert.equal(r.sandboxType, 'linuxSeccomp', out);
  assert.ok(!existsSync(marker), 'the client launcher was executed');
  assert.match(r.stdout, /^CapEff:\s*0000000000000000$/m, out);
  assert.match(r.stdout, /inside-ok/, out);
  assert.equal(readFileSync(join(f.W, 'inside.txt'), 'utf8'), 'in\n');
  assert.match(r.stdout, /outside-rc=[1-9]/, out);
  assert.match(r.stderr, /Read-only file system/, out);
  assert.ok(!existsSync(join(f.OUT, 'outside.txt')), 'the outside write reached the host');
  assert.match(r.stdout, /umount-rc=[1-9]/, out);
  assert.match(r.stdout, /remount-rc=[1-9]/, out);
  assert.match(r.stdout, /hook-rc=[1-9]/, out);
  assert.ok(!existsSync(join(f.W, '.git', 'hooks', 'pre-commit')), '.git/hooks was writable');
  assert.match(r.stdout, /curl-rc=7/, out);
  assert.equal(f.hits.tcp, 0, 'the loopback listener was reached from the sandbox');
  assert.equal(r.summary?.clientWrapped, true);
  assert.equal(r.summary?.unwrapped, true);
  assert.equal(r.summary?.sandbox, 'linux-seccomp');
}

before(async () => {
  f = await fixture();
  const dir = join(f.root, 'codex-home', 'tmp', 'arg0', 'codex-arg0TeSt01');
  mkdirSync(dir, { recursive: true });
  memories = join(f.root, 'codex-home', 'memories');
  mkdirSync(memories, { recursive: true });
  marker = join(f.root, 'launcher-ran');
  launcher = join(dir, 'codex-linux-sandbox');
  writeFileSync(
    launcher,
    `#!/bin/sh\necho "$*" >> '${marker}'\nwhile [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n`,
  );
  chmodSync(launcher, 0o755);
  ts = await startTestServer({ launcher: { sandbox: { tmpdir: f.T } } });
  trackSummaries(ts);
  c = await ts.client('codex-0.120');
});

after(async () => {
  await ts.close();
  await f.close();
});

beforeEach(() => {
  rmSync(marker, { force: true });
  rmSync(join(f.W, 'inside.txt'), { force: true });
  f.hits.tcp = 0;
});

describe('client-wrapped commands are unwrapped into our sandbox (as root)', {
  skip: (!isRoot && 'needs root') || needsSandbox,
}, () => {
  test('0.120/0.125 flags: runs under bwrap, CapEff 0, outside write and umount .git fail', async () => {
    const r = await start(c, [launcher, ...flags0120(), '--', '/bin/bash', '-lc', PROBE]);
    assertConfined(r);
    assert.equal(r.summary?.clientShape, 'legacy-flags');
    assert.equal(r.summary?.clientLauncher, launcher);
    assert.equal(r.summary?.legacyPolicy, 'workspace-write');
  });

  test('0.130 permission profile: same confinement, project_roots resolved to --sandbox-policy-cwd', async () => {
    const r = await start(c, [launcher, ...flags0130(), '--', '/bin/bash', '-lc', PROBE]);
    assertConfined(r);
    assert.equal(r.summary?.clientShape, 'permission-profile');
    const roots = ((r.summary?.writableRoots ?? []) as { root: string }[]).map((w) => w.root);
    assert.ok(roots.includes(f.W), roots.join(', '));
    assert.ok(roots.includes(memories), roots.join(', '));
    assert.ok(!roots.includes(f.root), roots.join(', '));
  });

  test('the extra writable root of the client policy stays writable', async () => {
    const r = await start(
      c,
      [launcher, ...flags0120(), '--', '/bin/sh', '-c', 'echo m > "$M/note"'],
      {},
      {
        M: memories,
      },
    );
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(readFileSync(join(memories, 'note'), 'utf8'), 'm\n');
    assert.ok(!existsSync(marker));
  });

  test('the program after -- is resolved against the child PATH; a missing one is a start error', async () => {
    const r = await start(c, [launcher, ...flags0130(), '--', 'sh', '-c', 'echo "via-path $0"']);
    assert.equal(r.sandboxType, 'linuxSeccomp');
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, /^via-path (\S*\/)?sh$/m);
    const e = await c.requestError('process/start', {
      processId: 'wrapped-missing',
      argv: [launcher, ...flags0130(), '--', 'no-such-program-corral'],
      cwd: f.W,
      env: { PATH },
      tty: false,
      arg0: null,
    });
    assert.equal(e.code, -32603);
    assert.match(e.message, /No such file or directory \(os error 2\)/);
    assert.ok(!existsSync(marker), 'the launcher ran after a failed unwrap');
  });

  test('a tty command is unwrapped too', async () => {
    const r = await start(
      c,
      [
        launcher,
        ...flags0120(),
        '--',
        '/bin/sh',
        '-c',
        '[ -t 1 ] && echo ISATTY; grep CapEff /proc/self/status',
      ],
      {
        tty: true,
      },
    );
    assert.equal(r.sandboxType, 'linuxSeccomp');
    assert.match(r.pty, /ISATTY/);
    assert.match(r.pty, /CapEff:\s*0000000000000000/);
    assert.ok(!existsSync(marker));
  });

  test('when our sandbox cannot be set up the start fails (-32603); nothing runs', async () => {
    const broken = await startTestServer({ launcher: { sandbox: { bwrapPath: join(f.root, 'no-bwrap') } } });
    try {
      const bc = await broken.client('codex-0.130');
      const e = await bc.requestError('process/start', {
        processId: 'wrapped-nobwrap',
        argv: [launcher, ...flags0130(), '--', '/bin/sh', '-c', 'echo ran > "$OUT/nobwrap"'],
        cwd: f.W,
        env: { PATH, OUT: f.OUT },
        tty: false,
        arg0: null,
      });
      assert.equal(e.code, -32603);
      assert.ok(!existsSync(join(f.OUT, 'nobwrap')), 'the command ran unsandboxed');
      assert.ok(!existsSync(marker), 'the launcher ran');
    } finally {
      await broken.close();
    }
  });
});

describe('anything not understood runs as sent (today’s behaviour)', {
  skip: !isRoot && 'needs root',
}, () => {
  for (const [name, extra] of [
    ['--use-legacy-landlock', ['--use-legacy-landlock']],
    ['--allow-network-for-proxy', ['--allow-network-for-proxy']],
    ['an unknown flag', ['--future-flag', 'x']],
  ] as const) {
    test(`${name}: the client launcher runs, sandboxType none`, async () => {
      const r = await start(c, [launcher, ...flags0120(), ...extra, '--', '/bin/sh', '-c', 'echo as-sent']);
      assert.equal(r.sandboxType, 'none');
      assert.equal(r.exitCode, 0, r.stderr);
      assert.match(r.stdout, /as-sent/);
      assert.ok(existsSync(marker), 'the launcher was not executed');
      assert.equal(r.summary?.clientWrapped, true);
      assert.equal(r.summary?.unwrapped, false);
      assert.match(String(r.summary?.unwrapReason), new RegExp(`unknown launcher flag ${extra[0]}`));
    });
  }

  test('unparseable JSON: run as sent', async () => {
    const flags = flags0130();
    flags[flags.indexOf('--permission-profile') + 1] = '{"type":"managed",';
    const r = await start(c, [launcher, ...flags, '--', '/bin/sh', '-c', 'echo as-sent']);
    assert.equal(r.sandboxType, 'none');
    assert.ok(existsSync(marker));
    assert.match(String(r.summary?.unwrapReason), /unparseable JSON in --permission-profile/);
  });

  test('unwrapClientSandbox "never": run as sent', async () => {
    const never = await startTestServer({ launcher: { unwrapClientSandbox: 'never' } });
    trackSummaries(never);
    try {
      const nc = await never.client('codex-0.120');
      const r = await start(nc, [launcher, ...flags0120(), '--', '/bin/sh', '-c', 'echo as-sent']);
      assert.equal(r.sandboxType, 'none');
      assert.ok(existsSync(marker));
      assert.equal(r.summary?.unwrapped, false);
      assert.match(String(r.summary?.unwrapReason), /never/);
    } finally {
      await never.close();
    }
  });
});

describe('the panel shows both: client-wrapped and unwrapped', {
  skip: (!isRoot && 'needs root') || needsSandbox,
}, () => {
  test('an unwrapped process has the linux-seccomp badge plus "client-wrapped, unwrapped"', async () => {
    const host = await startHost({ servePanel: true, panelDir: ensureBuilt(), resumeGraceMs: 0 });
    const browser = await openBrowser();
    const agent = await RpcClient.open(host.execUrl, 'codex-0.130');
    try {
      await browser.page.goto(host.panelUrl!);
      await browser.page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 15_000 });
      const common = { cwd: f.W, env: { PATH }, tty: false, arg0: null };
      await agent.request('process/start', {
        processId: 'panel-unwrapped',
        argv: [launcher, ...flags0130(), '--', '/bin/sh', '-c', 'echo unwrapped; exec sleep 300'],
        ...common,
      });
      await agent.request('process/start', {
        processId: 'panel-as-sent',
        argv: [launcher, ...flags0130(), '--no-proc', '--', '/bin/sh', '-c', 'echo as-sent; exec sleep 300'],
        ...common,
      });
      const page = browser.page;
      const row = page.locator('tr[data-process-id="panel-unwrapped"]');
      await row.waitFor();
      assert.equal(await row.locator('[data-badge]').getAttribute('data-badge'), 'linux-seccomp');
      assert.equal(
        await row.locator('[data-badge-extra]').getAttribute('data-badge-extra'),
        'client-unwrapped',
      );
      await row.click();
      const detail = page.locator('[data-testid="process-detail"]');
      await detail.locator('[data-testid="client-unwrapped"]').waitFor();
      assert.match(await visibleText(detail), /Effective policy/);
      await browser.screenshot('process-detail-client-unwrapped');
      const sent = page.locator('tr[data-process-id="panel-as-sent"]');
      assert.equal(await sent.locator('[data-badge]').getAttribute('data-badge'), 'client-wrapped');
      assert.equal(await sent.locator('[data-badge-extra]').count(), 0);
      await sent.click();
      await detail
        .locator('[data-testid="unwrap-reason"]', { hasText: 'unknown launcher flag --no-proc' })
        .waitFor();
    } finally {
      agent.close();
      await browser.close();
      await host.shutdown();
    }
  });
});
