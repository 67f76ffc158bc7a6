// Corral in "pods" behind the agent-sandbox router, on one machine (issue 19.3b): three `corral exec-server`
// processes started from deploy/kubernetes/sandboxtemplate.yaml, each in a network namespace of its own, and real
// exec-server clients starting processes on several of them through the router stand-in. The fleet panel test
// (issue 19 item 1) reuses the same rig (test/helpers/fleetRig.ts).
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { RpcClient } from '../helpers/client.js';
import { dialUrl, exchange, header } from '../helpers/fleet/http.js';
import { startHeaderHop } from '../helpers/fleet/sandboxRouter.js';
import { type Fleet, fleetAvailable, startFleet } from '../helpers/fleetRig.js';
import { seed } from './sandbox-util.js';

const avail = fleetAvailable();
const skip = avail.ok ? false : avail.reason;
if (!avail.ok) console.log(`# kube-fleet: skipped: ${avail.reason}`);

let n = 0;
/** Runs argv on the agent's pod and returns its exit code and stdout. */
async function run(c: RpcClient, argv: string[], extra: Record<string, unknown> = {}) {
  const processId = `p${++n}`;
  const started = await c.request<{ sandboxType?: string }>('process/start', {
    processId,
    argv,
    cwd: '/',
    env: { PATH: '/usr/bin:/bin' },
    tty: false,
    arg0: null,
    ...extra,
  });
  const events = await c.collect(processId, 20_000);
  const exited = events.find((e) => e.method === 'process/exited')!;
  return {
    sandboxType: started.sandboxType,
    exitCode: exited.params.exitCode as number,
    stdout: c.output(processId, 'stdout'),
    stderr: c.output(processId, 'stderr'),
  };
}

const WHOAMI = ['/bin/sh', '-c', 'readlink /proc/self/ns/net; id -u'];

describe('Corral pods behind the agent-sandbox router', { skip }, () => {
  let fleet: Fleet;
  before(async () => {
    if (skip) return;
    fleet = await startFleet({ pods: 3, router: { retries: 1, retryInitialDelayMs: 20 } });
  });
  after(() => fleet?.close());

  it('each pod runs the template’s command as its user, in a network namespace of its own', () => {
    const pods = fleet.pods();
    assert.equal(new Set(pods.map((p) => p.netns)).size, 3);
    for (const p of pods) {
      assert.notEqual(p.netns, readlinkSync('/proc/self/ns/net'), 'not the test’s own namespace');
      const status = readFileSync(`/proc/${p.pid}/status`, 'utf8');
      assert.match(status, /^Uid:\t10001\t10001\t10001\t10001$/m);
      const argv = readFileSync(`/proc/${p.pid}/cmdline`, 'utf8').split('\0');
      const tokenFile = join(p.volumes.get('/run/corral/token')!, 'token');
      assert.deepEqual(argv.slice(argv.indexOf('exec-server')).filter(Boolean), [
        'exec-server',
        '--listen',
        'ws://0.0.0.0:8888',
        '--allow-non-loopback',
        '--ws-token-file',
        tokenFile,
        '--allow-host',
        `${p.name}.${p.namespace}.svc.cluster.local`,
      ]);
      assert.ok(!argv.join(' ').includes(fleet.token), 'the token is not on the command line');
    }
  });

  it('kubelet-style probes into each pod: /healthz and /readyz 200 without a token', async () => {
    for (const p of fleet.pods()) {
      for (const path of ['/healthz', '/readyz']) {
        const x = await fleet.probe(p.name, path);
        assert.equal(x.status, 200, `${p.name} ${path}`);
        assert.equal(x.body, '{"status":"ok"}');
      }
    }
  });

  it('through the router, /readyz is the pod’s answer and /healthz the router’s own', async () => {
    const get = async (path: string) =>
      exchange(await dialUrl(fleet.router.url), {
        path,
        headers: [
          ['Host', 'router.agent-sandbox-system'],
          ['X-Sandbox-ID', 'pod-2'],
        ],
      });
    const ready = await get('/readyz');
    assert.equal(ready.status, 200);
    assert.equal(header(ready, 'cache-control'), 'no-store', 'Corral’s health headers');
    const healthz = await get('/healthz');
    assert.equal(healthz.body, '{"status":"ok"}');
    assert.equal(header(healthz, 'cache-control'), undefined, 'the router answered itself');
  });

  it('agents start processes on several pods at once; each ran in the pod it addressed, as the pod’s user', async () => {
    const agents = await Promise.all(fleet.pods().map((p) => fleet.connect(p.name)));
    try {
      const results = await Promise.all(agents.map((a) => run(a, WHOAMI)));
      fleet.pods().forEach((p, i) => {
        assert.equal(results[i]!.exitCode, 0, results[i]!.stderr);
        assert.equal(results[i]!.stdout, `${p.netns}\n10001\n`, p.name);
      });
      // Sandboxed, too: bwrap works unprivileged in the pod; the write lands in that pod's /workspace volume.
      const pod2 = fleet.pod('pod-2');
      const workspace = pod2.volumes.get('/workspace')!;
      const sandboxed = await run(agents[1]!, ['/bin/sh', '-c', 'echo from-the-sandbox > out.txt'], {
        cwd: workspace,
        sandbox: seed({ cwd: workspace }),
      });
      assert.equal(sandboxed.sandboxType, 'linuxSeccomp');
      assert.equal(sandboxed.exitCode, 0, sandboxed.stderr);
      assert.equal(readFileSync(join(workspace, 'out.txt'), 'utf8'), 'from-the-sandbox\n');
    } finally {
      for (const a of agents) a.close();
    }
  });

  it('the token travels as ?token= or X-Corral-Token: Authorization is stripped', async () => {
    const r = fleet.route('pod-1');
    const base = r.url.replace(/\?token=.*$/, '');
    const status = (url: string, headers: Record<string, string>) =>
      RpcClient.connect(url, { headers }).then(
        (c) => {
          c.close();
          return 101;
        },
        (e: Error) => Number(/HTTP (\d+)/.exec(e.message)?.[1] ?? 0),
      );
    assert.equal(await status(r.url, r.headers), 101);
    assert.equal(await status(base, { ...r.headers, 'X-Corral-Token': fleet.token }), 101);
    assert.equal(await status(base, { ...r.headers, Authorization: `Bearer ${fleet.token}` }), 401);
    assert.equal(await status(base, r.headers), 401);
    assert.equal(await status(`${base}?token=wrong-${fleet.token}`, r.headers), 401);
  });

  // The token is the pool's (one Secret for every pod of the template): a sandboxed command that read it could reach
  // every other pod through the router. Unsandboxed (full access) commands run as the server's uid and can read it
  // by design; docs/kubernetes.md says so.
  it('a sandboxed command in a pod cannot read the pod’s token file', async () => {
    const pod = fleet.pod('pod-1');
    const workspace = pod.volumes.get('/workspace')!;
    const tokenFile = join(pod.volumes.get('/run/corral/token')!, 'token');
    const c = await fleet.connect('pod-1');
    try {
      const r = await run(c, ['/bin/cat', tokenFile], { cwd: workspace, sandbox: seed({ cwd: workspace }) });
      assert.equal(r.sandboxType, 'linuxSeccomp');
      assert.ok(!r.stdout.includes(fleet.token), 'the sandbox read the pool token');
      assert.notEqual(r.exitCode, 0);
    } finally {
      c.close();
    }
  });

  it('a client that can only be given a URL (the Codex CLI) reaches a pod through a header-injecting hop', async () => {
    const r = fleet.route('pod-3');
    const hop = await startHeaderHop(fleet.router.url, r.headers);
    try {
      const c = await RpcClient.open(`${hop.url}/?token=${encodeURIComponent(fleet.token)}`, 'codex-like');
      try {
        assert.equal((await run(c, WHOAMI)).stdout, `${fleet.pod('pod-3').netns}\n10001\n`);
      } finally {
        c.close();
      }
    } finally {
      await hop.close();
    }
  });

  it('a pod that dies: 502 from the router; started again under its name, it is a new pod that agents reach', async () => {
    const beforePid = fleet.pod('pod-3').pid;
    await fleet.killPod('pod-3');
    assert.throws(() => process.kill(beforePid, 0), /ESRCH/, 'the killed pod is still running');
    const r = fleet.route('pod-3');
    await assert.rejects(RpcClient.connect(r.url, { headers: r.headers }), /HTTP 502/);
    const plain = await exchange(await dialUrl(fleet.router.url), {
      path: '/readyz',
      headers: [
        ['Host', 'router'],
        ['X-Sandbox-ID', 'pod-3'],
      ],
    });
    assert.equal(plain.status, 502);
    assert.equal(plain.body, '{"detail":"Could not connect to the backend sandbox: pod-3"}\n');
    // The others are untouched.
    const other = await fleet.connect('pod-1');
    assert.equal((await run(other, WHOAMI)).exitCode, 0);
    other.close();

    const again = await fleet.startPod('pod-3');
    // A new pod: another process in a namespace of its own (its inode number may be the freed one's: the kernel
    // reuses them, so it proves nothing either way; the command below reports the namespace it really runs in).
    assert.notEqual(again.pid, beforePid);
    const c = await fleet.connect('pod-3');
    try {
      assert.equal((await run(c, WHOAMI)).stdout, `${again.netns}\n10001\n`);
    } finally {
      c.close();
    }
  });
});

describe('the rig’s CPU group for the pods (other nodes, on one machine)', { skip }, () => {
  it('a pod’s server and its commands run inside the group, and closing the rig removes it', async () => {
    const fleet = await startFleet({ pods: 1, nodesCpuGroup: true });
    let dir = '';
    try {
      const g = fleet.nodesCpuGroup;
      assert.ok(g && 'dir' in g, `no group: ${JSON.stringify(g)}`);
      dir = g.dir;
      const pod = fleet.pods()[0]!;
      const procs = readFileSync(`${dir}/cgroup.procs`, 'utf8').split('\n').filter(Boolean).map(Number);
      // The prologue entered the group and then exec'd down to the server: same pid.
      assert.ok(procs.includes(pod.pid), `pod ${pod.pid} in ${procs.join(',')}`);
      const c = await fleet.connect(pod.name);
      try {
        const r = await run(c, ['/bin/cat', '/proc/self/cgroup']);
        assert.equal(r.exitCode, 0, r.stderr);
        // The command is in the group too (or in a group its server made inside it: the pod's user cannot make
        // the pids and memory groups here, so the server runs its commands without, as in a non-root container).
        const name = dir.slice(dir.lastIndexOf('/') + 1);
        const v1 = r.stdout.split('\n').find((l) => /^\d+:([^:]*,)?cpu(,[^:]*)?:/.test(l));
        const cpuLine = v1 ?? r.stdout.split('\n').find((l) => l.startsWith('0::'))!;
        assert.match(cpuLine, new RegExp(`:/(.+/)?${name}(/.*)?$`), r.stdout);
      } finally {
        c.close();
      }
    } finally {
      await fleet.close();
    }
    assert.ok(!existsSync(dir), `${dir} removed`);
  });
});
