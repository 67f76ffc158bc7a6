/** Seed `SandboxLaunchConfig` params for tests and benches: read everything, write the workspace (and what is asked). */
import { parseSandboxParam } from '../../src/protocol/sandbox.js';
import type { ParsedSandbox } from '../../src/sandbox/index.js';

export interface WorkspaceWriteOptions {
  network?: 'enabled' | 'restricted';
  /** /tmp writable too (a `slash_tmp` entry). */
  slashTmp?: boolean;
  useLegacyLandlock?: boolean;
}

/** The wire params of a workspace-write sandbox in `cwd`. */
export function workspaceWriteParam(cwd: string, o: WorkspaceWriteOptions = {}) {
  const network = o.network ?? 'restricted';
  return {
    sandbox: 'linux-seccomp',
    policy: {
      type: 'workspace-write',
      network_access: network === 'enabled',
      exclude_tmpdir_env_var: !o.slashTmp,
      exclude_slash_tmp: !o.slashTmp,
    },
    fileSystemPolicy: {
      kind: 'restricted',
      entries: [
        { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
        { path: { type: 'special', value: { kind: 'current_working_directory' } }, access: 'write' },
        ...(o.slashTmp ? [{ path: { type: 'special', value: { kind: 'slash_tmp' } }, access: 'write' }] : []),
      ],
    },
    networkPolicy: network,
    sandboxPolicyCwd: cwd,
    additionalPermissions: null,
    enforceManagedNetwork: false,
    windowsSandboxLevel: 'disabled',
    windowsSandboxPrivateDesktop: false,
    useLegacyLandlock: o.useLegacyLandlock ?? false,
  };
}

/** The same, parsed as the server parses it. */
export function workspaceWrite(cwd: string, o: WorkspaceWriteOptions = {}): ParsedSandbox {
  const parsed = parseSandboxParam(workspaceWriteParam(cwd, o));
  if (!parsed.success) throw parsed.error;
  return parsed.data as ParsedSandbox;
}
