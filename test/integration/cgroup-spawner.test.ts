/**
 * How each way of starting a process enters its cgroup (src/process/cgroup.ts) before the command runs: the native
 * spawner (async and vfork modes; v2 also through clone3 CLONE_INTO_CGROUP), child_process and node-pty through the
 * bash prologue; and what a start that cannot enter its cgroup gets (never a silent run outside it).
 */
import assert from 'node:assert/strict';
import { closeSync, openSync } from 'node:fs';
import { after, describe, it } from 'node:test';
import { type CgroupHost, cgroupHost, setupCgroups, wrapArgv } from '../../src/process/cgroup.js';
import type { LaunchSpec } from '../../src/process/launch.js';
import { spawnPty } from '../../src/process/pty.js';
import { nativeLoadError, SpawnError, type SpawnedChild, spawnPipedWith } from '../../src/process/spawner.js';

const PATH = '/usr/local/bin:/usr/bin:/bin';
const LIMITS = { pidsMax: 100, memoryMaxBytes: 256 * 1024 * 1024 };
/** A program that reads its own cgroup membership as soon as it runs, with a custom argv[0]. */
const catSelf: LaunchSpec = {
  file: '/bin/sh',
  argv: ['custom-arg0', '-c', 'echo "$0"; cat /proc/self/cgroup'],
  env: { PATH },
  cwd: '/',
};

function finish(c: SpawnedChild): Promise<{ out: string; err: string; code: number }> {
  return new Promise((resolve) => {
    let out = '';
    let err = '';
    let code = -1;
    let left = 3;
    const done = () => {
      if (--left === 0) resolve({ out, err, code });
    };
    c.stdout.on('data', (d) => {
      out += d.toString();
    });
    c.stderr.on('data', (d) => {
      err += d.toString();
    });
    c.stdout.on('close', done);
    c.stderr.on('close', done);
    c.onExit((x) => {
      code = x;
      done();
    });
  });
}

/** The cgroup paths (relative to their hierarchies) a /proc/self/cgroup text lists for our p-<n> cgroup. */
function inCgroup(text: string, dirs: string[]): boolean {
  return dirs.every((d) => {
    const tail = d.slice(d.indexOf('/corral-'));
    return text.split('\n').some((l) => l.endsWith(tail));
  });
}

const hosts: CgroupHost[] = [];
after(() => {
  for (const h of hosts) h.dispose();
});

const v1or2 = cgroupHost();
const v2 = (() => {
  const h = setupCgroups('v2');
  hosts.push(h);
  return h.usable ? h : null;
})();

for (const [name, host] of [
  [`default (${v1or2.status.version})`, v1or2.usable ? v1or2 : null],
  ['v2', v2],
] as const) {
  describe(`entering the cgroup: ${name}`, { skip: host ? false : 'no usable cgroup' }, () => {
    const modes = [
      ['native async', 'native', 'async'],
      ['native vfork', 'native', 'vfork'],
      ['child_process', 'node', 'async'],
    ] as const;
    for (const [label, kind, mode] of modes) {
      it(`${label}: the command is in its cgroup when it starts, with its argv[0]`, {
        skip: kind === 'native' && nativeLoadError ? nativeLoadError : false,
      }, async () => {
        const cg = host!.acquire(LIMITS);
        try {
          const c = spawnPipedWith(
            kind,
            catSelf,
            { stdin: 'null', cgroup: { fds: cg.entryFds, paths: cg.entryFiles, dirFd: cg.dirFd } },
            mode,
          );
          const r = await finish(c);
          assert.equal(r.code, 0, r.err);
          assert.equal(r.out.split('\n')[0], 'custom-arg0');
          assert.ok(inCgroup(r.out, cg.dirs), r.out);
        } finally {
          cg.release();
        }
      });
    }

    it('node-pty: the command is in its cgroup when it starts (bash prologue)', async () => {
      const cg = host!.acquire(LIMITS);
      try {
        const w = wrapArgv(cg.entryFiles, catSelf.file, catSelf.argv);
        const term = spawnPty(w.file, w.args, { cwd: '/', env: { PATH }, cols: 200, rows: 24 });
        let out = '';
        term.onData((d) => {
          out += d.toString();
        });
        const code = await new Promise<number>((r) => term.onExit(r));
        assert.equal(code, 0, out);
        assert.match(out, /^custom-arg0\r\n/);
        assert.ok(inCgroup(out.replace(/\r/g, ''), cg.dirs), out);
      } finally {
        cg.release();
      }
    });

    for (const mode of ['async', 'vfork'] as const) {
      it(`native ${mode}: a cgroup that cannot be entered fails the start, it never runs outside it`, {
        skip: nativeLoadError ?? false,
      }, async (t) => {
        // A cgroup removed underneath its open entry files: writing into them fails.
        const gone = host!.acquire(LIMITS);
        const fds = gone.entryFiles.map((f) => openSync(f, 'w'));
        t.after(() => {
          for (const fd of fds) closeSync(fd);
        });
        assert.ok(gone.remove(), 'removed');
        const spec: LaunchSpec = { ...catSelf, argv: ['sh', '-c', 'echo RAN'] };
        const opts = {
          stdin: 'null' as const,
          // (v2: without the directory fd, so that the fallback of writing cgroup.procs is what is tested)
          cgroup: { fds, paths: gone.entryFiles },
        };
        if (mode === 'vfork') {
          assert.throws(
            () => spawnPipedWith('native', spec, opts, 'vfork'),
            (e: unknown) =>
              e instanceof SpawnError && /^cannot move the process into its cgroup: /.test(e.osMessage),
          );
        } else {
          const r = await finish(spawnPipedWith('native', spec, opts, 'async'));
          assert.equal(r.code, 127);
          assert.equal(r.out, '');
          assert.match(r.err, /^corral: cannot move into the cgroup of \/bin\/sh: /);
        }
      });
    }
  });
}
