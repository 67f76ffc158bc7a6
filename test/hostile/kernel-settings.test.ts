/**
 * Found with issue 30, item 2 (the same cause as cgroups: a kernel interface that controls the host, writable from a
 * sandbox): with the server as root, a bubblewrap sandbox could write /proc/sys/kernel/core_pattern under any policy,
 * a read-only one included (bwrap covers /proc/sys only when the directory itself is writable, and it is 0555), and a
 * Landlock sandbox whose policy writes `/` could too, and /sys: core_pattern `|prog` runs prog as root on the host at
 * the next crash; /sys/power/state suspends the machine. Every such file is now read-only in both backends.
 *
 * The probe only opens each file for writing and closes it (never writes: on the old code that would change the
 * host). The server runs as root (where DAC lets uid 0 write them), the agent talks over the protocol.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import type { RpcClient } from '../helpers/client.js';
import { type HostileServer, PY, runPlanted, scratch, startServer, whySkip } from './sandbox-harness.js';

const KNOBS = [
  '/proc/sys/kernel/core_pattern',
  '/proc/sys/kernel/modprobe',
  '/proc/sys/vm/drop_caches',
  '/proc/sys/fs/binfmt_misc/register',
  '/proc/sysrq-trigger',
  '/sys/power/state',
  '/sys/kernel/uevent_helper',
  '/sys/kernel/mm/transparent_hugepage/enabled',
  '/sys/module/printk/parameters/time',
].filter((p) => existsSync(p));

const PROBE = `
import errno, os, sys
for p in sys.argv[1:]:
    try:
        os.close(os.open(p, os.O_WRONLY)); print('knob', p, 'OK')
    except OSError as e:
        print('knob', p, errno.errorcode.get(e.errno, str(e.errno)))
`;

const root = (access: 'read' | 'write') => ({
  path: { type: 'special', value: { kind: 'root' } },
  access,
});

function sandbox(cwd: string, access: 'read' | 'write', useLegacyLandlock: boolean): Record<string, unknown> {
  return {
    permissions: {
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries:
          access === 'write'
            ? [root('write')]
            : [
                root('read'),
                { path: { type: 'special', value: { kind: 'project_roots' } }, access: 'write' },
              ],
      },
      network: 'restricted',
    },
    cwd: `file://${cwd}`,
    workspaceRoots: [`file://${cwd}`],
    windowsSandboxLevel: 'disabled',
    windowsSandboxProxySettingsMode: 'reconcile',
    useLegacyLandlock,
  };
}

function skip(): string | false {
  const why = whySkip('root');
  if (why) return why;
  if (KNOBS.length < 3) return 'too few kernel settings files here';
  return false;
}

describe('the host kernel settings are read-only in every sandbox (server as root)', { skip: skip() }, () => {
  let s: ReturnType<typeof scratch>;
  let W: string;
  let server: HostileServer;
  let c: RpcClient & { sessionId: string };
  before(async () => {
    s = scratch('root');
    const T = s.mk('tmpdir');
    W = s.mk('ws');
    server = await startServer({ who: 'root', tmpdir: T });
    c = await server.client();
  });
  after(async () => {
    await server?.close();
    s?.cleanup();
  });

  for (const backend of ['bwrap', 'landlock'] as const)
    for (const access of ['read', 'write'] as const)
      test(`${backend}, a policy that ${access === 'write' ? 'writes /' : 'writes only its workspace'}`, {
        timeout: 60_000,
        skip: backend === 'landlock' && landlockSupport().abi < 6 ? 'Landlock ABI < 6' : false,
      }, async () => {
        const r = await runPlanted(c, 'root', W, [`${PY} -c "$PROBE" ${KNOBS.join(' ')}`], {
          tty: false,
          sandbox: sandbox(W, access, backend === 'landlock'),
          env: { PROBE },
        });
        assert.match(r.output, /DONE/, r.output);
        const lines = r.output.split('\n').filter((l) => l.startsWith('knob '));
        assert.equal(lines.length, KNOBS.length, r.output);
        assert.deepEqual(
          lines.filter((l) => / OK$/.test(l)),
          [],
          'no kernel setting may be opened for writing',
        );
      });
});
