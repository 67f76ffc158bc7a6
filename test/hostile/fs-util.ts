// Shared setup of the hostile fs suites: a workspace with an unreadable sibling, the 0.169 sandbox context an agent
// sends with fs/* requests for it, and a sandboxed racer started through the protocol (real bwrap).
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { RpcClient } from '../helpers/client.js';
import { PATH, PY } from '../integration/sandbox-util.js';

export interface HostileFixture {
  root: string;
  /** The workspace: writable in the sandbox. */
  W: string;
  /** Next to it, a folder the policy makes unreadable (`none`): nothing may be read, written or deleted there. */
  OUT: string;
  /** The server's TMPDIR (writable in the sandbox). */
  T: string;
  close(): void;
}

export function hostileFixture(prefix = 'corral-hostile-'): HostileFixture {
  // Outside /tmp, so that `/tmp:write` never covers $OUT.
  const root = mkdtempSync(join('/var/tmp', prefix));
  const W = join(root, 'ws');
  const OUT = join(root, 'out');
  const T = join(root, 'tmpdir');
  for (const d of [W, OUT, T]) mkdirSync(d);
  return { root, W, OUT, T, close: () => rmSync(root, { recursive: true, force: true }) };
}

const uri = (p: string) => pathToFileURL(p).href;

/** A `{path, access}` entry of the 0.169 shape for an absolute path. */
export const entry = (path: string, access: 'read' | 'write' | 'none') => ({
  path: { type: 'path', path: uri(path) },
  access,
});

/** The `{special: root}` entry of the 0.169 shape. */
export const rootEntry = (access: 'read' | 'write' | 'none') => ({
  path: { type: 'special', value: { kind: 'root' } },
  access,
});

/** A 0.169 `sandbox` object (sandbox.md §3.2) with these file-system entries and workspace `cwd`. */
export function managedContext(cwd: string, entries: unknown[]): Record<string, unknown> {
  return {
    permissions: { type: 'managed', file_system: { type: 'restricted', entries }, network: 'restricted' },
    cwd: uri(cwd),
    workspaceRoots: [uri(cwd)],
    windowsSandboxLevel: 'disabled',
    windowsSandboxProxySettingsMode: 'reconcile',
    useLegacyLandlock: false,
  };
}

/** The context of the hostile suites: read everything but $OUT, write the workspace (and what `extra` says). */
export function sandboxContext(f: HostileFixture, extra: unknown[] = []): Record<string, unknown> {
  return managedContext(f.W, [rootEntry('read'), entry(f.W, 'write'), entry(f.OUT, 'none'), ...extra]);
}

/**
 * The attack of issue 12 item 1, run by a process in the sandbox: for each pair (a directory and a symlink to a
 * folder outside), `renameat2(RENAME_EXCHANGE)` them in a loop, until a file `stop` appears in its cwd. Prints
 * `ready` once it swaps, and the swap count at the end.
 */
const RACER = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pairs = [(a.encode(), b.encode()) for a, b in zip(sys.argv[1::2], sys.argv[2::2])]
n = 0
print("ready", flush=True)
while not os.path.exists("stop"):
    for _ in range(511):  # odd: each pair is swapped between two looks for stop, so the swap shows also while we wait for a CPU
        for a, b in pairs:
            if libc.renameat2(-100, a, -100, b, 2) != 0:
                sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
            n += 1
print("swaps", n, flush=True)
`;

export interface Racer {
  /** Stops the racer and returns how many exchanges it made. */
  stop(): Promise<number>;
}

/** Starts the racer as a sandboxed process of `c` (cwd: the workspace), swapping each [a, b] pair of paths. */
export async function startRacer(
  c: RpcClient,
  f: HostileFixture,
  pairs: [string, string][],
  processId = 'racer',
): Promise<Racer> {
  await c.request('process/start', {
    processId,
    argv: [PY, '-c', RACER, ...pairs.flat()],
    cwd: f.W,
    env: { PATH },
    tty: false,
    arg0: null,
    sandbox: sandboxContext(f),
  });
  await c.waitFor(
    (n) =>
      (n.method === 'process/output' &&
        n.params.processId === processId &&
        Buffer.from(n.params.chunk as string, 'base64').includes('ready')) ||
      (n.method === 'process/exited' && n.params.processId === processId),
    20_000,
  );
  return {
    async stop() {
      const { writeFileSync } = await import('node:fs');
      writeFileSync(join(f.W, 'stop'), '');
      await c.collect(processId, 20_000);
      const out = c.output(processId, 'stdout');
      const m = /swaps (\d+)/.exec(out);
      if (!m) throw new Error(`racer failed: ${out} ${c.output(processId, 'stderr')}`);
      return Number(m[1]);
    },
  };
}
