import type { ResolvedPolicy } from '../resolve.js';

/**
 * macOS Seatbelt (sandbox.md §9): a profile text plus `-DKEY=value` parameters. Paths only ever travel as parameters,
 * never inside the profile text, so there is no quoting or injection surface. Pure.
 */

export const SANDBOX_EXEC = '/usr/bin/sandbox-exec';

const BASE_POLICY = `(version 1)
(deny default)
(allow process-exec)
(allow process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(allow process-exec (literal "/bin/ps") (with no-sandbox))
(allow file-write-data (require-all (path "/dev/null") (vnode-type CHARACTER-DEVICE)))
(allow sysctl-read (sysctl-name-prefix "hw.") (sysctl-name-prefix "kern.") (sysctl-name-prefix "net.routetable."))
(allow sysctl-write (sysctl-name "kern.grade_cputype"))
(allow iokit-open (iokit-registry-entry-class "RootDomainUserClient"))
(allow mach-lookup (global-name "com.apple.system.opendirectoryd.libinfo") (global-name "com.apple.PowerManagement.control") (global-name "com.apple.cfprefsd.daemon") (global-name "com.apple.cfprefsd.agent"))
(allow ipc-posix-sem)
(allow ipc-posix-shm-read* ipc-posix-shm-write-create ipc-posix-shm-write-data (ipc-posix-name-prefix "__KMP_REGISTERED_LIB_"))
(allow pseudo-tty)
(allow file-read* file-write* file-ioctl (literal "/dev/ptmx"))
(allow file-read* file-write* file-ioctl (regex #"^/dev/ttys[0-9]+"))
(allow user-preference-read)`;

const PLATFORM_DEFAULTS_READ = `(allow file-read* (literal "/") (subpath "/System") (subpath "/usr") (subpath "/bin") (subpath "/sbin") (subpath "/Library") (subpath "/private/etc") (subpath "/private/var/db") (subpath "/dev") (subpath "/opt/homebrew") (subpath "/Applications/Xcode.app") (subpath "/Library/Developer/CommandLineTools"))
(allow file-read-metadata (subpath "/private/var") (subpath "/private/tmp") (subpath "/Users"))`;

const NETWORK_PROFILE = `(allow system-socket (require-all (socket-domain AF_SYSTEM) (socket-protocol 2)))
(allow mach-lookup (global-name "com.apple.bsd.dirhelper") (global-name "com.apple.system.opendirectoryd.membership") (global-name "com.apple.SecurityServer") (global-name "com.apple.networkd") (global-name "com.apple.ocspd") (global-name "com.apple.trustd.agent") (global-name "com.apple.SystemConfiguration.DNSConfiguration") (global-name "com.apple.SystemConfiguration.configd"))
(allow sysctl-read (sysctl-name-regex #"^net.routetable"))`;

export interface SeatbeltNetwork {
  /** The effective network policy. */
  network: 'restricted' | 'enabled';
  /** enforceManagedNetwork: only the loopback proxy ports may be reached. */
  managed: boolean;
  /** Loopback proxy ports parsed from the command env (managed, or proxy variables present). */
  proxyPorts: number[];
}

export interface SeatbeltProfile {
  profile: string;
  /** `KEY=value` pairs, passed as `-DKEY=value`. */
  params: [string, string][];
}

/** The profile and parameters for a resolved policy. */
export function buildSeatbelt(r: ResolvedPolicy, net: SeatbeltNetwork): SeatbeltProfile {
  const params: [string, string][] = [];
  const sections: string[] = [BASE_POLICY];

  // Read.
  if (r.fullRead || r.rootReadable) sections.push('(allow file-read*)');
  else {
    const rules: string[] = [];
    r.readableRoots.forEach((p, i) => {
      params.push([`READABLE_ROOT_${i}`, p]);
      rules.push(`(subpath (param "READABLE_ROOT_${i}"))`);
    });
    r.writableRoots.forEach((w, i) => {
      if (w.root !== '/') rules.push(`(subpath (param "WRITABLE_ROOT_${i}"))`);
    });
    if (rules.length > 0) sections.push(`(allow file-read*\n  ${rules.join('\n  ')})`);
    if (r.includePlatformDefaults) sections.push(PLATFORM_DEFAULTS_READ);
  }

  // Write.
  if (r.fullWrite) sections.push('(allow file-write* (regex #"^/"))');
  else if (r.writableRoots.length > 0) {
    const clauses = r.writableRoots.map((w, i) => {
      const key = `WRITABLE_ROOT_${i}`;
      params.push([key, w.root]);
      const parts = [`(subpath (param "${key}"))`];
      w.readOnlySubpaths.forEach((s, j) => {
        const ro = `${key}_RO_${j}`;
        params.push([ro, s.path]);
        parts.push(`(require-not (literal (param "${ro}")))`, `(require-not (subpath (param "${ro}")))`);
      });
      // A symlink a protected path goes through: the link itself may not be replaced (untested on a Mac).
      r.pinnedLinks
        .filter((l) => l !== w.root && l.startsWith(w.root === '/' ? '/' : `${w.root}/`))
        .forEach((l, j) => {
          const link = `${key}_LINK_${j}`;
          params.push([link, l]);
          parts.push(`(require-not (literal (param "${link}")))`);
        });
      return parts.length === 1 ? parts[0]! : `(require-all ${parts.join(' ')})`;
    });
    sections.push(`(allow file-write*\n  ${clauses.join('\n  ')})`);
  }

  // Unreadable paths.
  const denied = [
    ...r.unreadable,
    ...r.writableRoots.flatMap((w) => w.readOnlySubpaths.filter((s) => s.access === 'none')),
  ];
  if (denied.length > 0) {
    const rules = denied.map((d, i) => {
      params.push([`DENIED_${i}`, d.path]);
      return `(subpath (param "DENIED_${i}"))`;
    });
    sections.push(`(deny file-read* file-write*\n  ${rules.join('\n  ')})`);
  }

  // Network.
  const proxied = net.managed || net.proxyPorts.length > 0;
  if (proxied) {
    if (net.proxyPorts.length > 0) {
      const ports = [...new Set(net.proxyPorts)].sort((a, b) => a - b);
      sections.push(
        `(allow network-outbound\n  ${ports.map((p) => `(remote ip "localhost:${p}")`).join('\n  ')})`,
        NETWORK_PROFILE,
      );
    }
  } else if (net.network === 'enabled') {
    sections.push('(allow network-outbound)\n(allow network-inbound)', NETWORK_PROFILE);
  }
  return { profile: sections.join('\n'), params };
}

/** `/usr/bin/sandbox-exec -p <profile> -DKEY=value… -- <file> <args…>` */
export function seatbeltArgv(p: SeatbeltProfile, file: string, args: string[]): string[] {
  return [SANDBOX_EXEC, '-p', p.profile, ...p.params.map(([k, v]) => `-D${k}=${v}`), '--', file, ...args];
}
