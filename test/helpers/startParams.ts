// process/start parameters the tests build again and again: the seed's sandbox object, a 0.169 networkProxy, a plain
// start; and the check that a refused start left nothing behind.
import assert from 'node:assert/strict';
import { specialEntry } from '../../src/protocol/sandbox.js';
import { RpcCallError, type RpcClient } from './client.js';

/** A process/start body for `argv` in /tmp with only PATH, pipes, and `extra` on top. */
export const startParams = (processId: string, argv: string[], extra: Record<string, unknown> = {}) => ({
  processId,
  argv,
  cwd: '/tmp',
  env: { PATH: '/usr/local/bin:/usr/bin:/bin' },
  tty: false,
  ...extra,
});

/** A process/start as Codex 0.169 sends it (codex-clients.md §5), `over` on top. */
export const codex169Start = (over: Record<string, unknown> = {}) => ({
  processId: '26780-e1cd5f23-1807-43de-b77f-059f4caa3f90',
  metadata: { threadId: '01a227d7-707a-7393-9aff-6ea575798ae8', toolCallId: 'call_fake_1' },
  argv: ['/bin/bash', '-lc', 'echo hello > out.txt && cat out.txt'],
  cwd: 'file:///tmp',
  envPolicy: {
    inherit: 'all',
    ignoreDefaultExcludes: true,
    exclude: [
      'CODEX_PERMISSION_PROFILE',
      'CODEX_VERSION',
      'CODEX_APPLY_PATCH_PRESERVE_LINE_ENDINGS',
      'CODEX_PLUGIN_METRICS_OUTPUT',
    ],
    set: {},
    includeOnly: [],
  },
  env: { CODEX_VERSION: '0.169.0', CODEX_CI: '1', NO_COLOR: '1', PAGER: 'cat', LC_ALL: 'C.UTF-8' },
  tty: false,
  pipeStdin: false,
  arg0: null,
  sandbox: null,
  enforceManagedNetwork: false,
  managedNetwork: null,
  ...over,
});

/** The seed's `sandbox` object (linux-seccomp, read-only, nothing readable, restricted network), `over` on top. */
export const seedSandbox = (over: Record<string, unknown> = {}): Record<string, unknown> => ({
  sandbox: 'linux-seccomp',
  policy: { type: 'read-only' },
  fileSystemPolicy: { kind: 'restricted', entries: [] },
  networkPolicy: 'restricted',
  sandboxPolicyCwd: '/tmp',
  additionalPermissions: null,
  enforceManagedNetwork: false,
  windowsSandboxLevel: 'disabled',
  windowsSandboxPrivateDesktop: false,
  useLegacyLandlock: false,
  ...over,
});

/** The seed's `sandbox` object without a sandbox (`sandbox: "none"`, full access) for `cwd`. */
/** The seed's `sandbox` object of an agent's everyday start: read everything, write the cwd, Landlock, `over` on top. */
export const workspaceWriteSandbox = (over: Record<string, unknown> = {}) =>
  seedSandbox({
    policy: { type: 'workspace-write', writable_roots: [], network_access: false },
    fileSystemPolicy: {
      kind: 'restricted',
      entries: [specialEntry('root', 'read'), specialEntry('current_working_directory', 'write')],
    },
    useLegacyLandlock: true,
    ...over,
  });

export const noSandboxParam = (cwd: string) =>
  seedSandbox({
    sandbox: 'none',
    policy: { type: 'danger-full-access' },
    fileSystemPolicy: { kind: 'unrestricted' },
    networkPolicy: 'enabled',
    sandboxPolicyCwd: cwd,
  });

/** A 0.169 `networkProxy` (enabled, nothing else allowed), `over` on top of its `proxy`. */
export const proxy169 = (over: Record<string, unknown> = {}) => ({
  proxy: {
    enabled: true,
    enableSocks5: false,
    enableSocks5Udp: false,
    allowUpstreamProxy: false,
    dangerouslyAllowAllUnixSockets: false,
    allowLocalBinding: false,
    ...over,
  },
});

/**
 * process/start with `params` must be refused: returns its RpcCallError, after checking that nothing was started
 * under its processId (process/read is -32600).
 */
export async function refusedStart(
  c: RpcClient,
  params: { processId: string } & Record<string, unknown>,
): Promise<RpcCallError> {
  let error: unknown;
  try {
    await c.request('process/start', params);
  } catch (e) {
    error = e;
  }
  assert.ok(
    error instanceof RpcCallError,
    `process/start with ${JSON.stringify(params).slice(0, 200)} was not refused`,
  );
  const read = await c.requestError('process/read', { processId: params.processId, afterSeq: 0, waitMs: 0 });
  assert.equal(read.code, -32600, 'nothing was started for a refused start');
  return error;
}
