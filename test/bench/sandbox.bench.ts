/**
 * Sandboxed start → exit latency of `true` (workspace-write, network restricted, seccomp) as the server's pipe mode
 * does it: prepareLaunch, spawnPiped (the native spawner when built), afterSpawn, until the exit and both pipes'
 * close, cleanup. Against: the same unsandboxed, bwrap alone, and the sandboxed launch through child_process (the
 * fallback spawner, which runs the root pid-namespace guard as `unshare … sh … bwrap`, see
 * src/sandbox/linux/pidGuard.ts; the native spawner clones the guard's init itself). The workspace has no .codex,
 * so each run also creates and removes the synthetic mount target. The Landlock rows: the same policy with
 * `useLegacyLandlock` (issue 17: no namespaces; the child confines itself before exec), in a workspace of its own
 * (an agent's workspace under Landlock: its top level is frozen, so nothing the sandbox does changes it; the plan and
 * the ruleset are then reused, see src/sandbox/linux/landlockReuse.ts), and again in the bwrap rows' workspace, whose
 * top level changes at every bwrap start (the synthetic .codex target): planned anew each time. Variants alternate
 * run by run, so machine load hits them alike.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import type { LaunchSpec } from '../../src/process/launch.js';
import { type SpawnerKind, spawnerKind, spawnPipedWith } from '../../src/process/spawner.js';
import { prepareLaunch, startSandbox } from '../../src/sandbox/index.js';
import { seed, special } from '../integration/sandbox-util.js';
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

/**
 * Times each variant RUNS times, one run of each per round, in an order shuffled per round (seeded: the same every
 * bench): a variant that leaves work behind in the kernel (a network namespace is torn down after its last process
 * exits, on a kernel worker) would otherwise always slow the same next variant.
 */
async function measureAlternating(variants: (() => Promise<void>)[]): Promise<number[][]> {
  const out = variants.map(() => [] as number[]);
  let seed = 0x9e3779b9;
  const random = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) / 2 ** 32;
  };
  const order = variants.map((_, k) => k);
  for (let i = 0; i < WARMUP + RUNS; i++) {
    for (let j = order.length - 1; j > 0; j--) {
      const r = Math.floor(random() * (j + 1));
      [order[j], order[r]] = [order[r]!, order[j]!];
    }
    for (const k of order) {
      const once = variants[k]!;
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
  const WL = join(root, 'landlock-ws');
  mkdirSync(join(WL, '.git'), { recursive: true });
  try {
    const parse = (useLegacyLandlock: boolean, cwd = W, enforceManagedNetwork = false) =>
      startSandbox(
        seed({
          cwd,
          entries: [
            special('root', 'read'),
            special('current_working_directory', 'write'),
            special('slash_tmp', 'write'),
          ],
          useLegacyLandlock,
        }),
        enforceManagedNetwork,
        cwd,
      );
    const sb = parse(false);
    const sbManaged = parse(false, W, true);
    const sbLandlock = parse(true, WL);
    const sbLandlockShared = parse(true);
    const spec: LaunchSpec = { file: '/bin/true', argv: ['true'], env: { PATH: '/usr/bin:/bin' }, cwd: W };
    const specL: LaunchSpec = { ...spec, cwd: WL };
    const sandboxedWith =
      (kind: SpawnerKind, with_ = sb, s = spec) =>
      async () => {
        const p = await prepareLaunch(with_, { spec: s, tty: false });
        try {
          if ((await runSpec(p.spec, kind, p.afterSpawn?.bind(p))) !== 0)
            throw new Error('sandboxed true failed');
        } finally {
          p.cleanup();
        }
      };
    const sandboxed = sandboxedWith(spawnerKind);
    const landlocked = sandboxedWith(spawnerKind, sbLandlock, specL);
    const landlockedShared = sandboxedWith(spawnerKind, sbLandlockShared);
    // Managed network (enforceManagedNetwork): the proxy variables are rewritten to an endpoint inside the sandbox's
    // network namespace; `true` never connects, so nothing needs to listen on the host port.
    const managedSpec: LaunchSpec = { ...spec, env: { ...spec.env, HTTP_PROXY: 'http://127.0.0.1:9' } };
    const managed = async () => {
      const p = await prepareLaunch(sbManaged, { spec: managedSpec, tty: false });
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
    const plain = async () => {
      await runSpec(spec, spawnerKind);
    };
    const [tSandboxed, tPlain, tBwrap, tViaNode, prepOnly, tManaged] = await measureAlternating([
      sandboxed,
      plain,
      async () => {
        await runSpec(bwrapOnly, spawnerKind);
      },
      sandboxedWith('node'),
      async () => {
        (await prepareLaunch(sb, { spec, tty: false })).cleanup();
      },
      managed,
    ]);
    // The Landlock rows on their own, next to unsandboxed starts: a server on the Landlock backend runs no bwrap
    // (namespaces are what it lacks), and bwrap's teardown work in the kernel would weigh on whatever runs next.
    const [tLandlock, prepLandlock, tLandlockShared, tPlainL] = await measureAlternating([
      landlocked,
      async () => {
        (await prepareLaunch(sbLandlock, { spec: specL, tty: false })).cleanup();
      },
      landlockedShared,
      plain,
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
        reference: pct(tPlainL, 50),
        unit: 'ms',
        target: '≤ 2.5 ms',
      },
      {
        section: 'sandbox',
        metric: 'start→exit `true`, Landlock-sandboxed p90',
        corral: pct(tLandlock, 90),
        reference: pct(tPlainL, 90),
        unit: 'ms',
      },
      {
        section: 'sandbox',
        metric: '  Landlock p50, workspace whose top level changes at every start (planned anew)',
        corral: pct(tLandlockShared, 50),
        reference: pct(tPlainL, 50),
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
