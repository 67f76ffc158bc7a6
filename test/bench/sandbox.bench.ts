/**
 * Sandboxed start → exit latency of `true` (workspace-write, network restricted, seccomp) as the server's pipe mode
 * does it: prepareLaunch, spawnPiped (the native spawner when built), afterSpawn, until the exit and both pipes'
 * close, cleanup. Against: the same unsandboxed, bwrap alone, and the sandboxed launch through child_process (the
 * fallback spawner, which runs the root pid-namespace guard as `unshare … sh … bwrap`, see
 * src/sandbox/linux/pidGuard.ts; the native spawner clones the guard's init itself). The workspace has no .codex,
 * so each run also creates and removes the synthetic mount target. The Landlock rows: the same policy with
 * `useLegacyLandlock` (issue 17: no namespaces; the ruleset is built per start and the child confines itself before
 * exec). Variants alternate run by run, so machine load hits them alike.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import type { LaunchSpec } from '../../src/process/launch.js';
import { type SpawnerKind, spawnerKind, spawnPipedWith } from '../../src/process/spawner.js';
import { parseSandboxParam } from '../../src/protocol/sandbox.js';
import { type ParsedSandbox, prepareLaunch } from '../../src/sandbox/index.js';
import type { BenchRow } from './types.js';

const RUNS = 60;
const WARMUP = 5;

/** Spawns like the server's pipe mode and resolves with the exit code once the child exited and its pipes closed. */
function runSpec(
  s: LaunchSpec,
  kind: SpawnerKind,
  afterSpawn?: (pid: number) => Promise<void>,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const c = spawnPipedWith(kind, s, { stdin: 'null' });
    let open = 2;
    let code: number | undefined;
    const done = () => {
      if (open === 0 && code !== undefined) resolve(code);
    };
    for (const st of [c.stdout, c.stderr]) {
      st.resume();
      st.on('close', () => {
        open--;
        done();
      });
    }
    c.onExit((exitCode) => {
      code = exitCode;
      done();
    });
    afterSpawn?.(c.pid).catch(reject);
  });
}

function pct(xs: number[] | undefined, p: number): number {
  const s = [...(xs ?? [])].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

/** Times each variant RUNS times, one run of each in turn. */
async function measureAlternating(variants: (() => Promise<void>)[]): Promise<number[][]> {
  const out = variants.map(() => [] as number[]);
  for (let i = 0; i < WARMUP + RUNS; i++) {
    for (const [k, once] of variants.entries()) {
      const t0 = performance.now();
      await once();
      if (i >= WARMUP) out[k]!.push(performance.now() - t0);
    }
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
    const param = (useLegacyLandlock: boolean) => ({
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
      useLegacyLandlock,
    });
    const parse = (useLegacyLandlock: boolean) => {
      const parsed = parseSandboxParam(param(useLegacyLandlock));
      if (!parsed.success) throw parsed.error;
      return parsed.data as ParsedSandbox;
    };
    const sb = parse(false);
    const sbLandlock = parse(true);
    const spec: LaunchSpec = { file: '/bin/true', argv: ['true'], env: { PATH: '/usr/bin:/bin' }, cwd: W };
    const sandboxedWith =
      (kind: SpawnerKind, with_ = sb) =>
      async () => {
        const p = await prepareLaunch(with_, { spec, tty: false });
        try {
          if ((await runSpec(p.spec, kind, p.afterSpawn?.bind(p))) !== 0)
            throw new Error('sandboxed true failed');
        } finally {
          p.cleanup();
        }
      };
    const sandboxed = sandboxedWith(spawnerKind);
    const landlocked = sandboxedWith(spawnerKind, sbLandlock);
    // Managed network (enforceManagedNetwork): the proxy variables are rewritten to an endpoint inside the sandbox's
    // network namespace; `true` never connects, so nothing needs to listen on the host port.
    const managedSpec: LaunchSpec = { ...spec, env: { ...spec.env, HTTP_PROXY: 'http://127.0.0.1:9' } };
    const managed = async () => {
      const p = await prepareLaunch(sb, { spec: managedSpec, tty: false, enforceManagedNetwork: true });
      try {
        if ((await runSpec(p.spec, spawnerKind, p.afterSpawn?.bind(p))) !== 0)
          throw new Error('sandboxed true with managed network failed');
      } finally {
        p.cleanup();
      }
    };
    await sandboxed(); // probe bwrap once (cached for the process, as in the server)
    await landlocked(); // fails here, not in the middle of the runs, where Landlock is missing
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
    const [tSandboxed, tPlain, tBwrap, tViaNode, prepOnly, tManaged, tLandlock, prepLandlock] =
      await measureAlternating([
        sandboxed,
        async () => {
          await runSpec(spec, spawnerKind);
        },
        async () => {
          await runSpec(bwrapOnly, spawnerKind);
        },
        sandboxedWith('node'),
        async () => {
          (await prepareLaunch(sb, { spec, tty: false })).cleanup();
        },
        managed,
        landlocked,
        async () => {
          (await prepareLaunch(sbLandlock, { spec, tty: false })).cleanup();
        },
      ]);
    return [
      {
        section: 'sandbox',
        metric: `start→exit \`true\`, sandboxed p50 (${spawnerKind} spawner; ref: unsandboxed)`,
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
        metric: `start→exit \`true\`, Landlock-sandboxed p50 (${spawnerKind} spawner; ref: unsandboxed)`,
        corral: pct(tLandlock, 50),
        reference: pct(tPlain, 50),
        unit: 'ms',
        target: '≤ 2.5 ms',
      },
      {
        section: 'sandbox',
        metric: 'start→exit `true`, Landlock-sandboxed p90',
        corral: pct(tLandlock, 90),
        reference: pct(tPlain, 90),
        unit: 'ms',
      },
      {
        section: 'sandbox',
        metric: 'same with managed network (listeners made in the netns) p50',
        corral: pct(tManaged, 50),
        unit: 'ms',
      },
      {
        section: 'sandbox',
        metric: 'start→exit `true`, sandboxed via child_process p50',
        corral: pct(tViaNode, 50),
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
      {
        section: 'sandbox',
        metric: '  Landlock: prepareLaunch alone p50 (resolve, decomposition, BPF, ruleset)',
        corral: pct(prepLandlock, 50),
        unit: 'ms',
      },
    ];
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
