/**
 * Sandboxed start → exit latency of `true` through prepareLaunch (workspace-write, network restricted, seccomp),
 * spawned with node:child_process as the server's pipe mode does, against the same unsandboxed, and bwrap alone.
 * As root the launch also includes the pid-namespace guard (unshare + sh, see src/sandbox/linux/pidGuard.ts), and
 * the workspace has no .codex, so each run also creates and removes the synthetic mount target.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import type { LaunchSpec } from '../../src/process/launch.js';
import { parseSandboxParam } from '../../src/protocol/sandbox.js';
import { type ParsedSandbox, prepareLaunch } from '../../src/sandbox/index.js';
import type { BenchRow } from './types.js';

const RUNS = 60;
const WARMUP = 5;

function runSpec(s: LaunchSpec): Promise<number> {
  return new Promise((resolve, reject) => {
    const c = spawn(s.file, s.argv.slice(1), {
      argv0: s.argv[0],
      cwd: s.cwd,
      env: s.env,
      stdio: ['ignore', 'ignore', 'ignore', ...(s.extraFds ?? []).map((fd) => (fd === null ? 'ignore' : fd))],
    });
    c.once('error', reject);
    c.once('close', (code) => resolve(code ?? -1));
  });
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

async function measure(once: () => Promise<void>): Promise<number[]> {
  for (let i = 0; i < WARMUP; i++) await once();
  const out: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    await once();
    out.push(performance.now() - t0);
  }
  return out;
}

export async function run(): Promise<BenchRow[]> {
  if (process.platform !== 'linux')
    return [{ section: 'sandbox', metric: 'skipped (not Linux)', corral: 'n/a', unit: '' }];
  const root = mkdtempSync(join(os.tmpdir(), 'corral-sbx-bench-'));
  const W = join(root, 'ws');
  mkdirSync(join(W, '.git'), { recursive: true });
  try {
    const parsed = parseSandboxParam({
      sandbox: 'linux-seccomp',
      policy: {
        type: 'workspace-write',
        network_access: false,
        exclude_tmpdir_env_var: false,
        exclude_slash_tmp: false,
      },
      fileSystemPolicy: {
        kind: 'restricted',
        entries: [
          { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
          { path: { type: 'special', value: { kind: 'current_working_directory' } }, access: 'write' },
          { path: { type: 'special', value: { kind: 'slash_tmp' } }, access: 'write' },
        ],
      },
      networkPolicy: 'restricted',
      sandboxPolicyCwd: W,
      additionalPermissions: null,
      enforceManagedNetwork: false,
      windowsSandboxLevel: 'disabled',
      windowsSandboxPrivateDesktop: false,
      useLegacyLandlock: false,
    });
    if (!parsed.success) throw parsed.error;
    const sb = parsed.data as ParsedSandbox;
    const spec: LaunchSpec = { file: '/bin/true', argv: ['true'], env: { PATH: '/usr/bin:/bin' }, cwd: W };
    const sandboxed = async () => {
      const p = await prepareLaunch(sb, { spec, tty: false });
      try {
        const done = runSpec(p.spec);
        await p.afterSpawn?.(0);
        if ((await done) !== 0) throw new Error('sandboxed true failed');
      } finally {
        p.cleanup();
      }
    };
    await sandboxed(); // probe bwrap once (cached for the process, as in the server)
    const tSandboxed = await measure(sandboxed);
    const tPlain = await measure(async () => {
      await runSpec(spec);
    });
    const bwrapOnly: LaunchSpec = {
      file: '/usr/bin/bwrap',
      argv: [
        'bwrap',
        '--ro-bind',
        '/',
        '/',
        '--dev',
        '/dev',
        '--unshare-user',
        '--unshare-pid',
        '--unshare-net',
        '--proc',
        '/proc',
        '--cap-drop',
        'ALL',
        '--',
        '/bin/true',
      ],
      env: spec.env,
      cwd: W,
    };
    const tBwrap = await measure(async () => {
      await runSpec(bwrapOnly);
    });
    const prepOnly = await measure(async () => {
      (await prepareLaunch(sb, { spec, tty: false })).cleanup();
    });
    return [
      {
        section: 'sandbox',
        metric: 'start→exit `true`, sandboxed p50',
        corral: pct(tSandboxed, 50),
        reference: pct(tPlain, 50),
        unit: 'ms',
        target: '≤ 10 ms',
      },
      {
        section: 'sandbox',
        metric: 'start→exit `true`, sandboxed p90',
        corral: pct(tSandboxed, 90),
        reference: pct(tPlain, 90),
        unit: 'ms',
      },
      {
        section: 'sandbox',
        metric: 'bare bwrap (ro root, userns/pidns/netns) p50',
        corral: pct(tBwrap, 50),
        unit: 'ms',
        target: '~5–7 ms',
      },
      {
        section: 'sandbox',
        metric: 'prepareLaunch alone p50 (resolve, BPF, argv)',
        corral: pct(prepOnly, 50),
        unit: 'ms',
      },
    ];
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
