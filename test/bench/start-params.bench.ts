/**
 * What reading a Codex 0.169 `process/start`'s params costs per start: the method table's parse (dispatch's
 * parseParams, with the field error map) of the exact body 0.169 sends, without a sandbox and with its
 * FileSystemSandboxContext (and the 0.145+ managedNetwork sandbox fact). Since issue 31 the table types `sandbox`,
 * `networkProxy` and `managedNetwork` itself (the launcher no longer parses `sandbox` again); measured against the
 * launcher's parse it replaced, the extra was some 0.2–0.5 µs per start. Rounds alternate so load hits them alike.
 */
import { METHODS } from '../../src/protocol/methods.js';
import { parseParams } from '../../src/server/core/params.js';
import { codex169Start } from '../helpers/startParams.js';
import type { BenchRow } from './types.js';

const N = 100_000;
const ROUNDS = 7;

const sp = (kind: string, access: string, subpath?: string) => ({
  path: { type: 'special', value: subpath ? { kind, subpath } : { kind } },
  access,
});
const body = codex169Start({ cwd: 'file:///home/alice/src/app' });
const sandboxed = {
  ...body,
  sandbox: {
    permissions: {
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries: [
          sp('root', 'read'),
          sp('project_roots', 'write'),
          sp('project_roots', 'read', '.git'),
          sp('project_roots', 'read', '.codex'),
          sp('tmpdir', 'write'),
          sp('slash_tmp', 'write'),
        ],
      },
      network: 'restricted',
    },
    cwd: 'file:///home/alice/src/app',
    workspaceRoots: ['file:///home/alice/src/app'],
    windowsSandboxLevel: 'disabled',
    windowsSandboxProxySettingsMode: 'reconcile',
    useLegacyLandlock: false,
  },
  managedNetwork: { loopbackPorts: [3128], allowLocalBinding: false },
};

export async function run(): Promise<BenchRow[]> {
  const spec = METHODS['process/start'];
  const variants = { none: body, sandboxed };
  const times: Record<keyof typeof variants, number[]> = { none: [], sandboxed: [] };
  for (let round = 0; round <= ROUNDS; round++) {
    for (const [name, b] of Object.entries(variants) as [keyof typeof variants, object][]) {
      const start = process.hrtime.bigint();
      for (let i = 0; i < N; i++) parseParams(spec.params, b, spec.paramsName, spec.fieldErrors);
      if (round > 0) times[name].push(Number(process.hrtime.bigint() - start) / N / 1000);
    }
  }
  const median = (a: number[]) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
  return [
    {
      section: 'start params',
      metric: 'process/start params parse, 0.169 body, sandbox null',
      corral: median(times.none),
      unit: 'µs',
      target: '≤ 5 µs',
    },
    {
      section: 'start params',
      metric: '  with its sandbox context + managedNetwork fact (vs null)',
      corral: median(times.sandboxed),
      reference: median(times.none),
      unit: 'µs',
      target: '≤ 10 µs',
    },
  ];
}
