/**
 * The host checks of `corral doctor` (report.ts): bubblewrap, user namespaces, Landlock, seccomp, cgroups, the
 * native addon and the panel. Each says what it found and, when something is missing, the one line that fixes it.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { fsWatchAbsence } from '../platform/fsWatch.js';
import { netNotifyAbsence } from '../platform/netNotify.js';
import { sandboxLauncher } from '../platform/sandbox.js';
import {
  CGROUPS_LINUX_ONLY,
  CGROUPS_TURNED_OFF,
  type CgroupStatus,
  cgroupHostIfSetUp,
  cgroupMountPoints,
  NO_USABLE_CGROUP,
  pidsBudget,
  previewCgroups,
} from '../process/cgroup.js';
import { hostControlMounts, outermost } from '../process/cgroupFs.js';
import { nativeLoadError, spawnerKind } from '../process/spawner.js';
import type { DoctorCheck } from '../protocol/doctor.js';
import { landlockSupport } from '../sandbox/linux/landlockNative.js';
import { findBwrap, probeBwrap } from '../sandbox/linux/locate.js';

function readText(p: string): string | null {
  try {
    return readFileSync(p, 'utf8').trim();
  } catch {
    return null;
  }
}

function run(file: string, args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: 10_000, env: { PATH: '/usr/bin:/bin' } }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, out: `${stdout}${stderr}`.trim() });
    });
  });
}

/** Signs that this process runs in a container (none of them is proof on its own). */
export function containerEvidence(): string[] {
  const out: string[] = [];
  if (existsSync('/.dockerenv')) out.push('/.dockerenv exists (Docker)');
  if (existsSync('/run/.containerenv')) out.push('/run/.containerenv exists (Podman)');
  if (process.env.KUBERNETES_SERVICE_HOST) out.push('KUBERNETES_SERVICE_HOST is set (a Kubernetes pod)');
  const cg = readText('/proc/1/cgroup') ?? '';
  const m = /(docker|kubepods|containerd|libpod|lxc)/.exec(cg);
  if (m) out.push(`/proc/1/cgroup names ${m[1]}`);
  const uidMap = readText('/proc/self/uid_map');
  if (uidMap && !/^0\s+0\s+4294967295$/.test(uidMap.replace(/\s+/g, ' ').trim()))
    out.push(`this process is in a user namespace (uid_map: ${uidMap.replace(/\s+/g, ' ')})`);
  return out;
}

/** /proc/self/status fields (Seccomp, Seccomp_filters, NoNewPrivs, CapEff). */
function status(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of (readText('/proc/self/status') ?? '').split('\n')) {
    const i = line.indexOf(':');
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  return out;
}

export async function bwrapCheck(): Promise<{ check: DoctorCheck; works: boolean }> {
  const check = (works: boolean, detail: string, fix?: string) => ({
    works,
    check: {
      id: 'bwrap',
      title: 'bubblewrap',
      status: works ? ('ok' as const) : ('missing' as const),
      detail,
      ...(fix ? { fix } : {}),
    },
  });
  const path = findBwrap();
  if (!path) {
    return check(
      false,
      'bwrap is not installed: the namespace sandbox cannot run',
      'apt-get install -y bubblewrap   (Fedora: dnf install bubblewrap; or use --sandbox-fallback landlock)',
    );
  }
  const version = (await run(path, ['--version'])).out.replace(/^bubblewrap\s*/, '') || 'unknown version';
  try {
    await probeBwrap(path);
    return check(true, `${path} ${version}: user, pid, ipc and network namespaces work`);
  } catch (e) {
    return check(
      false,
      `${path} ${version} cannot create namespaces: ${(e as Error).message}`,
      'see "user namespaces" below, or start Corral with --sandbox-fallback landlock',
    );
  }
}

export function usernsChecks(bwrapWorks: boolean, inContainer: boolean): DoctorCheck[] {
  const out: DoctorCheck[] = [];
  const max = readText('/proc/sys/user/max_user_namespaces');
  const where = inContainer ? ' (where it is set: on the host, or in the enclosing user namespace)' : '';
  if (max !== null) {
    out.push(
      Number(max) === 0
        ? {
            id: 'userns-max',
            title: 'user namespaces',
            status: 'missing',
            detail: 'user.max_user_namespaces is 0: no user namespace can be created',
            fix: `sysctl -w user.max_user_namespaces=15000${where}`,
          }
        : {
            id: 'userns-max',
            title: 'user namespaces',
            status: 'ok',
            detail: `user.max_user_namespaces is ${max}`,
          },
    );
  }
  const clone = readText('/proc/sys/kernel/unprivileged_userns_clone');
  if (clone === '0' && process.geteuid?.() !== 0) {
    out.push({
      id: 'userns-clone',
      title: 'unprivileged user namespaces',
      status: 'missing',
      detail:
        'kernel.unprivileged_userns_clone is 0 (Debian before 11): only root may create user namespaces',
      fix: `sysctl -w kernel.unprivileged_userns_clone=1${where}`,
    });
  }
  const aa = readText('/proc/sys/kernel/apparmor_restrict_unprivileged_userns');
  if (aa !== null) {
    out.push(
      aa === '1' && !bwrapWorks
        ? {
            id: 'apparmor-userns',
            title: 'AppArmor user namespace restriction',
            status: 'missing',
            detail:
              'kernel.apparmor_restrict_unprivileged_userns is 1 (Ubuntu 23.10+): unconfined programs get no user namespaces',
            fix: 'install an AppArmor profile that lets /usr/bin/bwrap use userns (Ubuntu: apparmor profile bwrap-userns-restrict), or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0',
          }
        : {
            id: 'apparmor-userns',
            title: 'AppArmor user namespace restriction',
            status: 'info',
            detail: `kernel.apparmor_restrict_unprivileged_userns is ${aa}${aa === '1' ? ' (bwrap works anyway: it has a profile)' : ''}`,
          },
    );
  }
  return out;
}

export function landlockCheck(inContainer: boolean): DoctorCheck {
  const s = landlockSupport();
  if (s.abi === 0) {
    return {
      id: 'landlock',
      title: 'Landlock',
      status: 'missing',
      detail: `no Landlock: ${s.missing}`,
      fix: inContainer
        ? "the container's seccomp profile may block landlock_* (Docker ≥ 23 allows them), or the host kernel lacks Landlock (Linux ≥ 5.13, CONFIG_SECURITY_LANDLOCK=y, lsm=landlock,…)"
        : 'boot Linux ≥ 5.13 with CONFIG_SECURITY_LANDLOCK=y and landlock in the lsm= boot parameter',
    };
  }
  const has = [
    'filesystem',
    ...(s.abi >= 2 ? ['refer'] : []),
    ...(s.abi >= 3 ? ['truncate'] : []),
    ...(s.abi >= 4 ? ['TCP bind/connect'] : []),
    ...(s.abi >= 5 ? ['device ioctl'] : []),
    ...(s.abi >= 6 ? ['signal and abstract socket scopes'] : []),
    ...(s.abi >= 7 ? ['audit logging'] : []),
  ];
  // Managed network under Landlock: its connect supervisor (seccomp user notification, NOTIF_ADDFD: Linux 5.9).
  const supervisor = s.abi >= 4 ? netNotifyAbsence() : null;
  if (s.abi >= 4 && supervisor === null) has.push('managed network (connect supervisor)');
  const lacks = [
    ...(s.abi < 4 ? ['managed network (needs ABI 4)'] : []),
    ...(supervisor !== null
      ? [
          `managed network: the connect supervisor cannot run (${supervisor}): refused unless --sandbox-accept-weaker proxy-port`,
        ]
      : []),
    ...(s.abi < 6 ? ['signal scoping (needs ABI 6: refused unless --sandbox-accept-weaker signals)'] : []),
  ];
  return {
    id: 'landlock',
    title: 'Landlock',
    status: lacks.length > 0 ? 'missing' : 'ok',
    detail: `ABI ${s.abi} (errata 0x${s.errata.toString(16)}): ${has.join(', ')}${lacks.length ? `; lacks ${lacks.join(', ')}` : ''}`,
    ...(lacks.length
      ? {
          fix: 'a newer kernel (ABI 4: Linux 6.7, ABI 6: Linux 6.12; the connect supervisor: Linux 5.9 and a seccomp profile that allows SECCOMP_FILTER_FLAG_NEW_LISTENER)',
        }
      : {}),
  };
}

export function seccompCheck(): DoctorCheck {
  const st = status();
  if (st.Seccomp === undefined) {
    return {
      id: 'seccomp',
      title: 'seccomp',
      status: 'missing',
      detail: 'this kernel has no seccomp (no Seccomp line in /proc/self/status)',
      fix: 'a kernel built with CONFIG_SECCOMP_FILTER=y',
    };
  }
  const filters = st.Seccomp_filters ?? '?';
  return {
    id: 'seccomp',
    title: 'seccomp',
    status: 'ok',
    detail:
      st.Seccomp === '2'
        ? `supported; this process already runs under ${filters} filter(s) (a container runtime's profile?)${st.NoNewPrivs === '1' ? ', with no_new_privs' : ''}`
        : 'supported; no filter on this process',
  };
}

/**
 * The cgroups commands get: in a running server (host/doctor) what it set up; from the command line what a server
 * started here would set up, decided by the server's own code from reading the system (previewCgroups: nothing is
 * made).
 */
export function cgroupCheck(): DoctorCheck {
  const live = cgroupHostIfSetUp();
  return describeCgroups(live?.status ?? previewCgroups(), live !== null);
}

/** A cgroup status as a doctor check; `live`: the running server's own, else what one would get. */
export function describeCgroups(s: CgroupStatus, live: boolean): DoctorCheck {
  const base = { id: 'cgroup', title: 'cgroups' } as const;
  if (s.version === 'none') {
    const off = s.problem === CGROUPS_TURNED_OFF || (s.problem ?? '').startsWith(CGROUPS_LINUX_ONLY);
    const delegate = /not delegated|not writable|also holds other processes/.test(s.problem ?? '');
    return {
      ...base,
      status: off ? 'info' : 'missing',
      detail: `commands ${live ? 'run' : 'would run'} without pids and memory limits: ${s.problem?.replace(NO_USABLE_CGROUP, '')}`,
      ...(off
        ? {}
        : {
            fix: delegate
              ? 'run Corral in a delegated scope: systemd-run --user --scope -p Delegate=yes corral …'
              : 'mount cgroup2 on /sys/fs/cgroup (systemd does by default)',
          }),
    };
  }
  // A preview's directories carry the doctor's own tag: the server makes its own beside them, so name the parents.
  const where = live ? s.dirs : [...new Set(s.dirs.map((d) => dirname(d)))];
  const what = live
    ? `cgroup ${s.version}: each command runs in a cgroup of its own with ${s.enforced.join(' and ')} limits, in ${where.join(', ')}`
    : `cgroup ${s.version}: a server started here gives each command a cgroup of its own with ${s.enforced.join(' and ')} limits, under ${where.join(', ')}`;
  const cpu = s.cpuGroup ? '; all commands share one CPU group' : `; no common CPU group: ${s.cpuProblem}`;
  return {
    ...base,
    status: s.problem === null ? 'ok' : 'info',
    detail: `${what}${cpu}${s.problem === null ? '' : `; ${s.problem}`}`,
  };
}

/**
 * Issue 30: every cgroup filesystem is read-only to every sandbox (a writable one lets a command leave its cgroup, and
 * on v1 `release_agent` runs a program as root): bubblewrap mounts them read-only, Landlock carves them out of every
 * writable root and refuses a writable root inside one (src/sandbox/linux/landlock.ts).
 */
export function cgroupSandboxCheck(): DoctorCheck {
  const mounts = cgroupMountPoints();
  const control = outermost(hostControlMounts()).map((m) => `${m.path} (${m.fsType})`);
  return {
    id: 'cgroup-sandbox',
    title: 'cgroups in sandboxes',
    status: mounts.length > 0 ? 'ok' : 'info',
    detail:
      (mounts.length > 0
        ? `${mounts.join(', ')}: read-only in every sandbox (bubblewrap mounts ${mounts.length > 1 ? 'them' : 'it'} read-only; Landlock carves ${mounts.length > 1 ? 'them' : 'it'} out of every writable root, and refuses a writable root inside)`
        : 'no cgroup filesystem is mounted') +
      (control.length > 0 ? `; Landlock carves out every host-control mount: ${control.join(', ')}` : ''),
  };
}

/**
 * Issue 30: the pids budget of all commands together (src/process/cgroup.ts, "Pids budget"), and what enforces it: the
 * running server's own (host/info), or, from the command line, what a server started here would do.
 */
export function pidsBudgetCheck(): DoctorCheck {
  const live = cgroupHostIfSetUp();
  const b = live?.budget ?? pidsBudget();
  const from =
    b.nproc !== null
      ? `RLIMIT_NPROC ${b.nproc} less the ${b.uidTasks} tasks uid ${process.getuid?.() ?? '?'} has less ${b.headroom} kept for the server`
      : `half of the ${b.systemFree} tasks the system has left; RLIMIT_NPROC does not bind this user`;
  const childLimit = b.childNproc !== null ? `each child's RLIMIT_NPROC (${b.childNproc})` : null;
  const enforced = live
    ? live.budget.enforcedBy === 'cgroup'
      ? `enforced as the pids.max of ${live.status.dirs.join(', ')}`
      : live.budget.enforcedBy === 'rlimit'
        ? `no pids cgroup: enforced as ${childLimit}`
        : 'not enforced: no pids cgroup, and RLIMIT_NPROC does not bind this user'
    : `enforced as the pids.max of the commands' parent cgroup where the server can use cgroups (see cgroups), else ${childLimit ?? 'not at all (no cgroup, and RLIMIT_NPROC does not bind this user)'}`;
  return {
    id: 'pids-budget',
    title: 'pids budget',
    status: live && live.budget.enforcedBy === null ? 'info' : 'ok',
    detail: `all commands together: at most ${b.total} processes (${from}); one command: ${b.perCommand} by default; ${enforced}`,
  };
}

export function addonCheck(): DoctorCheck[] {
  const out: DoctorCheck[] = [];
  out.push(
    spawnerKind === 'native'
      ? {
          id: 'addon',
          title: 'native addon',
          status: 'ok',
          detail: 'build/Release/corral_spawn.node is loaded',
        }
      : {
          id: 'addon',
          title: 'native addon',
          status: 'missing',
          detail: `not loaded (${nativeLoadError ?? 'CORRAL_SPAWNER=node'}): bwrap sandboxes run through bash; the managed network, symlink pins, Landlock and sandboxed fs/* are refused (docs/architecture.md, "Native code")`,
          fix: 'apt-get install -y build-essential python3 && npm ci   (or npx node-gyp rebuild)',
        },
  );
  out.push(
    sandboxLauncher
      ? { id: 'launcher', title: 'sandbox launcher', status: 'ok', detail: sandboxLauncher }
      : {
          id: 'launcher',
          title: 'sandbox launcher',
          status: 'missing',
          detail:
            "build/Release/corral-sandbox-exec is missing: Landlock terminals and the addon's bwrap launches are refused",
          fix: 'npm ci   (or npx node-gyp rebuild)',
        },
  );
  // Sandbox planning's kept answers (src/sandbox/fsQuiet.ts): without them every sandboxed start asks the filesystem
  // again (a slower start, no weaker sandbox), so this is information, never a failure.
  out.push(
    fsWatchAbsence === null
      ? {
          id: 'planning-watch',
          title: 'planning watch',
          status: 'ok',
          detail:
            'inotify: a sandboxed start keeps what the one before it learned of the filesystem while nothing it looked at changed (on local filesystems)',
        }
      : {
          id: 'planning-watch',
          title: 'planning watch',
          status: 'info',
          detail: `none (${fsWatchAbsence}): every sandboxed start asks the filesystem again`,
        },
  );
  return out;
}

export function panelCheck(): DoctorCheck {
  let electron: string | null = null;
  try {
    const p = createRequire(import.meta.url)('electron') as unknown;
    if (typeof p === 'string' && existsSync(p)) electron = p;
  } catch {
    electron = null;
  }
  const chromium = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((p) =>
    existsSync(p),
  );
  if (electron) return { id: 'panel', title: 'panel', status: 'ok', detail: `Electron at ${electron}` };
  if (chromium)
    return {
      id: 'panel',
      title: 'panel',
      status: 'ok',
      detail: `no Electron: \`npm start\` serves the panel to a browser (${chromium} found)`,
    };
  return {
    id: 'panel',
    title: 'panel',
    status: 'missing',
    detail: 'neither Electron nor Chromium: open the panel URL of `corral serve` in any browser',
    fix: 'npm install electron   (or apt-get install -y chromium)',
  };
}
