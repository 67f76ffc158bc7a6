/** Shared by the connect supervisor's tests (landlock-netnotify, netnotify-transparent): why they skip here, and the
 * confinement a supervised command runs under (Landlock denying every TCP connect, the proxy-routed TCP-only filter). */
import { existsSync } from 'node:fs';
import os from 'node:os';
import { netNotifyAbsence } from '../../src/platform/netNotify.js';
import { buildSeccompFilter } from '../../src/sandbox/index.js';
import { NET } from '../../src/sandbox/linux/landlock.js';
import { buildRuleset, landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import { hostSeccompArch } from '../../src/sandbox/linux/seccomp.js';
import { enforcedWorkspaceSandbox } from '../integration/sandbox-util.js';

export const PY = '/usr/bin/python3';

/** Why the supervisor's tests cannot run here (false: they can). */
export function netNotifySkip(): string | false {
  if (process.platform !== 'linux') return 'Linux only';
  const support = landlockSupport();
  if (support.abi < 4)
    return `Landlock with TCP rules (ABI 4) is needed: ${support.missing ?? `ABI ${support.abi}`}`;
  return netNotifyAbsence() ?? (existsSync(PY) ? false : 'python3 is needed for the client');
}

/** A ruleset fd (close it with closeRuleset) and the seccomp filter of a supervised command. */
export function supervisedConfinement(): { rulesetFd: number; seccomp: Buffer } {
  const rulesetFd = buildRuleset({
    handledFs: 0,
    handledNet: NET.CONNECT_TCP,
    scoped: 0,
    rules: [],
    connectPorts: [],
  });
  const seccomp = buildSeccompFilter(hostSeccompArch(os.arch(), os.machine()), 'proxy-routed', {
    tcpOnly: true,
  });
  return { rulesetFd, seccomp };
}

/**
 * A process/start for the transparent-TCP tests: `argv` in a managed-network sandbox (bwrap, or Landlock with
 * `useLegacyLandlock`) whose policy allows 127.0.0.1 only (the allowed loopback origin), SOCKS5 enabled.
 */
export function managedLoopbackStart(
  processId: string,
  argv: string[],
  o: { cwd: string; env: Record<string, string>; useLegacyLandlock?: boolean },
) {
  return {
    processId,
    argv,
    cwd: o.cwd,
    env: o.env,
    tty: false,
    arg0: null,
    sandbox: enforcedWorkspaceSandbox(o.cwd, o.useLegacyLandlock ?? false),
    managedNetwork: {
      config: { network: { enabled: true, enable_socks5: true, domains: { '127.0.0.1': 'allow' } } },
    },
  };
}
