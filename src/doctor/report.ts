/**
 * `corral doctor`: what this machine can sandbox and what to change. Each check says what it found and, when
 * something is missing, the one line that fixes it; then every policy type is really started (`/bin/true` through
 * the same launch pipeline as process/start, with the given sandbox options) and the sandbox it got is reported. The
 * host checks are hostChecks.ts.
 * Human-readable by default, `--json` for machines; the panel's host info shows the same report (host/info `doctor`).
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import type { LaunchSpec } from '../process/launch.js';
import { spawnPiped } from '../process/spawner.js';
import type { DoctorCheck, DoctorReport, PolicyOutcome } from '../protocol/doctor.js';
import {
  type NetworkSandboxPolicy,
  parseSandboxParam,
  seedLinuxConfig,
  specialEntry,
} from '../protocol/sandbox.js';
import { escapeTerminalLines, terminalJson } from '../protocol/terminalText.js';
import { type PrepareOptions, prepareLaunch, SandboxSetupError, startSandbox } from '../sandbox/index.js';
import { readLastSelftest, selftestPointer } from '../selftest/lastResult.js';
import {
  addonCheck,
  bwrapCheck,
  cgroupCheck,
  cgroupSandboxCheck,
  containerEvidence,
  landlockCheck,
  panelCheck,
  pidsBudgetCheck,
  seccompCheck,
  usernsChecks,
} from './hostChecks.js';

type CheckStatus = DoctorCheck['status'];

const special = specialEntry;

/** The policy types a client sends, as seed SandboxLaunchConfigs for a workspace `ws`. */
function policies(ws: string): { name: string; sandbox: unknown; env?: Record<string, string> }[] {
  const base = (legacy: Record<string, unknown>, entries: unknown[], network: string, extra = {}) => ({
    ...seedLinuxConfig({ policy: legacy, entries, network: network as NetworkSandboxPolicy, cwd: ws }),
    ...extra,
  });
  const ww = (net: boolean) => ({
    type: 'workspace-write',
    network_access: net,
    exclude_tmpdir_env_var: true,
    exclude_slash_tmp: true,
  });
  const wwEntries = [special('root', 'read'), special('current_working_directory', 'write')];
  return [
    { name: 'read-only', sandbox: base({ type: 'read-only' }, [special('root', 'read')], 'restricted') },
    { name: 'workspace-write', sandbox: base(ww(false), wwEntries, 'restricted') },
    { name: 'workspace-write, network enabled', sandbox: base(ww(true), wwEntries, 'enabled') },
    {
      name: 'workspace-write, managed network',
      sandbox: base(ww(false), wwEntries, 'restricted', { enforceManagedNetwork: true }),
      env: { HTTP_PROXY: 'http://127.0.0.1:9' },
    },
    {
      name: 'useLegacyLandlock (workspace-write)',
      sandbox: base(ww(false), wwEntries, 'restricted', { useLegacyLandlock: true }),
    },
  ];
}

/** Starts `/bin/true` under `sandbox` as process/start would, and says what it ran under. */
async function tryPolicy(
  name: string,
  sandbox: unknown,
  ws: string,
  env: Record<string, string>,
  opts: PrepareOptions,
): Promise<PolicyOutcome> {
  const parsed = parseSandboxParam(sandbox);
  if (!parsed.success) return { policy: name, sandbox: 'refused', detail: parsed.error.message };
  const spec: LaunchSpec = {
    file: '/bin/true',
    argv: ['/bin/true'],
    env: { PATH: '/usr/bin:/bin', ...env },
    cwd: ws,
  };
  let launch: Awaited<ReturnType<typeof prepareLaunch>>;
  try {
    launch = await prepareLaunch(startSandbox(parsed.data, false, ws), { spec, tty: false }, opts);
  } catch (e) {
    const why = e instanceof SandboxSetupError ? e.message : `setup failed: ${(e as Error).message}`;
    return { policy: name, sandbox: 'refused', detail: why };
  }
  try {
    const child = spawnPiped(launch.spec, { stdin: 'null' });
    await launch.afterSpawn?.(child.pid);
    let err = '';
    child.stderr.on('data', (d) => {
      err += d.toString();
    });
    child.stdout.resume();
    const code = await new Promise<number>((resolve) => child.onExit((c) => resolve(c)));
    child.releaseGroup();
    const backend = launch.guarantees?.backend ?? (launch.summary?.bwrap ? 'bwrap' : undefined);
    const ran: PolicyOutcome['sandbox'] =
      backend === 'landlock'
        ? 'landlock'
        : backend === 'bwrap'
          ? 'bwrap'
          : launch.sandboxType === 'macosSeatbelt'
            ? 'seatbelt'
            : 'unwrapped';
    if (code !== 0)
      return {
        policy: name,
        sandbox: 'refused',
        detail: `/bin/true exited ${code} under ${ran}: ${err.trim()}`,
      };
    const weaker = launch.guarantees?.weaker ?? [];
    return {
      policy: name,
      sandbox: ran,
      detail:
        ran === 'landlock'
          ? `Landlock ABI ${launch.guarantees?.landlockAbi} (${launch.guarantees?.reason})${weaker.length ? `, weaker: ${weaker.join(', ')}` : ', every element exact'}`
          : ran === 'bwrap'
            ? 'bubblewrap + seccomp'
            : 'nothing to enforce',
      ...(launch.guarantees ? { guarantees: launch.guarantees } : {}),
    };
  } catch (e) {
    return { policy: name, sandbox: 'refused', detail: `start failed: ${(e as Error).message}` };
  } finally {
    launch.cleanup();
  }
}

/** The whole report (a few real sandboxed starts of /bin/true; ~0.1 s). */
export async function doctorReport(opts: PrepareOptions = {}): Promise<DoctorReport> {
  const evidence = process.platform === 'linux' ? containerEvidence() : [];
  const inContainer = evidence.length > 0;
  const checks: DoctorCheck[] = [];
  const outcomes: PolicyOutcome[] = [];
  if (process.platform === 'linux') {
    const b = await bwrapCheck();
    checks.push(b.check, ...usernsChecks(b.works, inContainer), landlockCheck(inContainer), seccompCheck());
    checks.push(cgroupCheck(), cgroupSandboxCheck(), pidsBudgetCheck(), ...addonCheck());
    const base = process.env.XDG_RUNTIME_DIR?.startsWith('/') ? process.env.XDG_RUNTIME_DIR : os.tmpdir();
    const dir = mkdtempSync(join(base, 'corral-doctor-'));
    // A host stopped while the report is made (SIGTERM: it kills its children and exits) leaves before the finally
    // below: the scratch workspace goes at the exit then.
    const remove = () => rmSync(dir, { recursive: true, force: true });
    process.once('exit', remove);
    const ws = join(dir, 'ws');
    try {
      mkdirSync(join(ws, '.git'), { recursive: true });
      for (const p of policies(ws)) outcomes.push(await tryPolicy(p.name, p.sandbox, ws, p.env ?? {}, opts));
    } finally {
      process.off('exit', remove);
      remove();
    }
  }
  checks.push(panelCheck());
  return {
    platform: process.platform,
    arch: os.arch(),
    kernel: os.release(),
    uid: process.geteuid?.() ?? -1,
    container: { inside: inContainer, evidence },
    checks,
    policies: outcomes,
    options: { fallback: opts.fallback ?? 'none', acceptWeaker: [...(opts.acceptWeaker ?? [])] },
  };
}

const MARK: Record<CheckStatus, string> = { ok: '✓', missing: '✗', info: '·' };

/** The report as a person reads it. */
export function formatDoctor(r: DoctorReport): string {
  const lines: string[] = [];
  lines.push(`Corral doctor: ${r.platform} ${r.arch}, kernel ${r.kernel}, uid ${r.uid}`);
  lines.push(
    r.container.inside
      ? `  inside a container: ${r.container.evidence.join('; ')}`
      : '  not inside a container',
  );
  lines.push('');
  const w = Math.max(...r.checks.map((c) => c.title.length));
  for (const c of r.checks) {
    lines.push(`  ${MARK[c.status]} ${c.title.padEnd(w)}  ${c.detail}`);
    if (c.fix) lines.push(`    ${' '.repeat(w)}  fix: ${c.fix}`);
  }
  if (r.policies.length > 0) {
    const fb = r.options.fallback === 'landlock' ? 'on' : 'off';
    const acc = r.options.acceptWeaker?.length ? r.options.acceptWeaker.join(',') : 'none';
    lines.push(
      '',
      `What each policy gets here (--sandbox-fallback ${r.options.fallback}: ${fb}; accepted weaker: ${acc}):`,
    );
    const pw = Math.max(...r.policies.map((p) => p.policy.length));
    for (const p of r.policies)
      lines.push(
        `  ${p.sandbox === 'refused' ? '✗' : '✓'} ${p.policy.padEnd(pw)}  ${p.sandbox}: ${p.detail}`,
      );
  }
  return `${lines.join('\n')}\n`;
}

/** `corral doctor [--json]`: prints the report; exit status 1 when some policy type cannot be sandboxed here. */
export async function doctorCommand(o: { json: boolean; sandbox: PrepareOptions }): Promise<number> {
  const r = await doctorReport(o.sandbox);
  // What the checks quote (a tool's stderr, a path) reaches the terminal escaped (terminalText.ts).
  process.stdout.write(o.json ? `${terminalJson(r, 2)}\n` : escapeTerminalLines(formatDoctor(r)));
  if (!o.json) process.stdout.write(`\n${escapeTerminalLines(selftestPointer(readLastSelftest()))}\n`);
  return r.policies.some((p) => p.sandbox === 'refused') ? 1 : 0;
}
