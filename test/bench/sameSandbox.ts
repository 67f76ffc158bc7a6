/**
 * The hot-path bench's check that its bare bwrap runs the sandbox the server runs (hotpath.bench.ts, measureSandboxes):
 * the same hidden paths, and the same mount table seen from inside.
 */
import { auditDirectory } from '../../src/audit/trail.js';

/** The command whose output is the mount table a sandboxed command sees. */
export const MOUNTINFO = ['/bin/cat', '/proc/self/mountinfo'];

/** What `corral exec-server` with these arguments hides from every sandbox (src/app/compose.ts): here, one mount each. */
export function serverHiddenPaths(argv: readonly string[]): string[] {
  const after = (flag: string) => {
    const i = argv.indexOf(flag);
    return i < 0 ? undefined : argv[i + 1];
  };
  const token = after('--panel-token-file');
  const db = after('--audit-db');
  return [...(token ? [token] : []), ...(db ? [auditDirectory(db)] : [])];
}

/** Throws unless two /proc/self/mountinfo texts list the same mounts (where, what filesystem, which options). */
export function sameMounts(viaServer: string, bare: string): void {
  const mounts = (text: string) =>
    text
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        const [left, right = ''] = line.split(' - ');
        const f = left!.split(' ');
        const r = right.split(' ');
        // mount point, its options, filesystem type, superblock options (ids, device numbers and sources differ)
        return [f[4], f[5], r[0], r[2]].join(' ');
      });
  const a = mounts(viaServer);
  const b = mounts(bare);
  if (a.length === 0 || a.join('\n') !== b.join('\n'))
    throw new Error(
      `the bare bwrap's sandbox is not the server's: ${a.length} mounts through the server, ${b.length} bare; ` +
        `first difference: ${JSON.stringify(a.find((m, i) => m !== b[i]) ?? b[a.length])}`,
    );
}
