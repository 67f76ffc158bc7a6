/**
 * A cluster on one machine (issue 19.3b), for tests that need several Corral "pods" behind the agent-sandbox
 * router: each pod is `corral exec-server` started from deploy/kubernetes/sandboxtemplate.yaml (its args, user,
 * working directory, env and volume mounts, with each volume a directory of the rig), in a network namespace of its
 * own (`unshare -n`, only `lo`), listening there on 0.0.0.0:8888 — so on that namespace's own 127.0.0.1:8888. The
 * router (fleet/sandboxRouter.ts) reaches a pod by dialing 127.0.0.1:PORT inside its namespace (fleet/netns.ts),
 * the stand-in for the pod IP; nothing outside 127.0.0.0/8 is ever used. Like kubelet, the rig waits for the
 * template's readiness probe before a pod counts as started.
 *
 *   const fleet = await startFleet({ pods: 3 });           // pod-1 … pod-3 in namespace "default"
 *   const agent = await fleet.connect('pod-2');            // an exec-server client through the router
 *   await fleet.killPod('pod-3'); await fleet.startPod('pod-3');   // same name, a new pod (new netns)
 *
 * Root only (namespaces, nsenter, setpriv); `fleetAvailable()` says why not.
 */
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { CORRAL_BIN } from './cli.js';
import { RpcClient } from './client.js';
import { type Exchange, exchange } from './fleet/http.js';
import { corralContainer, MANIFEST_DIR, readYamlDocuments } from './fleet/manifests.js';
import { NetnsDialer, type NetnsProcess, netnsAvailable, spawnInNetns } from './fleet/netns.js';
import { makeNodesGroup, type NodesGroup } from './fleet/nodesGroup.js';
import { type SandboxRouter, type SandboxRouterOptions, startSandboxRouter } from './fleet/sandboxRouter.js';

type Json = Record<string, unknown>;

export interface FleetPod {
  readonly name: string;
  readonly namespace: string;
  /** The pod's process (corral exec-server, as the template's user); its network namespace is the pod's. */
  readonly pid: number;
  /** `net:[inode]` of the pod's network namespace. */
  readonly netns: string;
  /** Where each volume of the template lives on this machine, by mountPath (e.g. /workspace). */
  readonly volumes: ReadonlyMap<string, string>;
  readonly alive: boolean;
  stderr(): string;
}

export interface AgentRoute {
  /** ws://127.0.0.1:ROUTER/?token=… — the token in the query: the router strips Authorization. */
  url: string;
  /** The routing headers the agent (or a header-injecting hop) sends. */
  headers: Record<string, string>;
}

export interface Fleet {
  readonly router: SandboxRouter;
  /** The token every pod of the template requires (one Secret for the whole template). */
  readonly token: string;
  /** With `panelToken: true`: the panel credential every pod also accepts (`--panel-token-file`). */
  readonly panelToken: string | null;
  /** With `nodesCpuGroup: true`: the CPU group all pods run in, or why there is none. */
  readonly nodesCpuGroup: { dir: string } | { problem: string } | null;
  pods(): FleetPod[];
  pod(name: string, namespace?: string): FleetPod;
  route(name: string, namespace?: string): AgentRoute;
  /** An initialized exec-server client of pod `name`, through the router. */
  connect(
    name: string,
    opts?: { namespace?: string; clientName?: string },
  ): Promise<RpcClient & { sessionId: string }>;
  /** Starts (or starts again, after killPod) pod `name`; resolves once its readiness probe passes. */
  startPod(name: string, namespace?: string): Promise<FleetPod>;
  /** SIGKILLs the pod's processes (a node or container dying) and waits until they are gone. */
  killPod(name: string, namespace?: string): Promise<void>;
  /** An HTTP GET straight into the pod's namespace, as kubelet probes it (not through the router). */
  probe(name: string, path: string, namespace?: string): Promise<Exchange>;
  close(): Promise<void>;
}

export interface FleetOptions {
  /** How many pods (named pod-1 …), or their names. */
  pods: number | string[];
  namespace?: string;
  /** The SandboxTemplate file. */
  template?: string;
  router?: Partial<Omit<SandboxRouterOptions, 'resolve'>>;
  /**
   * Pods also get a panel credential (a second file beside the token, passed as `--panel-token-file`), so that a fleet
   * host can watch them (issue 19 item 1).
   */
  panelToken?: boolean;
  /**
   * All pods (servers and their commands) run in one CPU group of their own, standing in for other nodes: see
   * fleet/nodesGroup.ts. Without it the pods share this machine's scheduler as so many programs.
   */
  nodesCpuGroup?: boolean;
}

/** Where the rig puts the panel credential: beside the pod's token file. */
const panelTokenPath = (tokenFile: string) => join(dirname(tokenFile), 'panel-token');

export function fleetAvailable(): { ok: boolean; reason: string } {
  return netnsAvailable();
}

interface PodTemplate {
  args: string[];
  uid: number;
  gid: number;
  workingDir: string;
  /** name → a value, or the pod field (downward API `fieldRef`) it comes from. */
  env: [string, { value: string } | { field: string }][];
  mounts: { name: string; mountPath: string }[];
  port: number;
  readinessPath: string;
}

function readTemplate(file: string): PodTemplate {
  const t = readYamlDocuments(file).find((d) => d.kind === 'SandboxTemplate')!;
  const pod = ((t.spec as Json).podTemplate as Json).spec as Json;
  const sc = (pod.securityContext ?? {}) as Json;
  const c = corralContainer(t);
  const ports = (c.ports as Json[]) ?? [];
  const get = (c.readinessProbe as { httpGet: Json }).httpGet;
  const port = (
    typeof get.port === 'string' ? ports.find((p) => p.name === get.port)?.containerPort : get.port
  ) as number;
  return {
    args: c.args as string[],
    uid: (sc.runAsUser as number) ?? 0,
    gid: (sc.runAsGroup as number) ?? 0,
    workingDir: (c.workingDir as string) ?? '/',
    env: ((c.env as Json[]) ?? []).map((e) => {
      const field = ((e.valueFrom as Json | undefined)?.fieldRef as Json | undefined)?.fieldPath as
        | string
        | undefined;
      return [e.name as string, field ? { field } : { value: e.value as string }];
    }),
    mounts: ((c.volumeMounts as Json[]) ?? []).map((m) => ({
      name: m.name as string,
      mountPath: m.mountPath as string,
    })),
    port,
    readinessPath: get.path as string,
  };
}

class Pod implements FleetPod {
  alive = true;

  constructor(
    readonly name: string,
    readonly namespace: string,
    private readonly process: NetnsProcess,
    readonly dialer: NetnsDialer,
    readonly volumes: Map<string, string>,
  ) {
    void process.exited.then(() => {
      this.alive = false;
    });
  }

  get pid(): number {
    return this.process.proc.pid!;
  }

  get netns(): string {
    return this.dialer.netns;
  }

  stderr(): string {
    return this.process.stderr();
  }

  async kill(): Promise<void> {
    this.process.proc.kill('SIGKILL');
    await this.process.exited;
  }
}

export async function startFleet(opts: FleetOptions): Promise<Fleet> {
  const template = readTemplate(opts.template ?? join(MANIFEST_DIR, 'sandboxtemplate.yaml'));
  const defaultNs = opts.namespace ?? 'default';
  const base = mkdtempSync(join(tmpdir(), 'corral-fleet-'));
  chmodSync(base, 0o755);
  const token = `fleet-${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
  const panelToken = opts.panelToken
    ? `panel-${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`
    : null;
  const pods = new Map<string, Pod>();
  const nodes: NodesGroup | string | null = opts.nodesCpuGroup
    ? makeNodesGroup(template.uid, template.gid)
    : null;
  const key = (ns: string, name: string) => `${ns}/${name}`;

  const router = await startSandboxRouter({
    ...opts.router,
    // The headless Service's DNS name: resolves while the pod exists.
    resolve: (ns, id) => {
      const p = pods.get(key(ns, id));
      return p?.alive ? { dial: (port) => p.dialer.dial(port) } : undefined;
    },
  });

  /** Volumes as directories of the rig (the token one filled as the init container does), by mountPath. */
  function makeVolumes(dir: string): Map<string, string> {
    const volumes = new Map<string, string>();
    for (const m of template.mounts) {
      const host = join(dir, m.name);
      mkdirSync(host, { recursive: true, mode: 0o700 });
      chownSync(host, template.uid, template.gid);
      volumes.set(m.mountPath, host);
    }
    const tokenFile = template.args[template.args.indexOf('--ws-token-file') + 1]!;
    const file = mapPath(volumes, tokenFile);
    writeFileSync(file, token, { mode: 0o600 });
    chownSync(file, template.uid, template.gid);
    if (panelToken) {
      writeFileSync(mapPath(volumes, panelTokenPath(tokenFile)), panelToken, { mode: 0o600 });
      chownSync(mapPath(volumes, panelTokenPath(tokenFile)), template.uid, template.gid);
    }
    return volumes;
  }

  function mapPath(volumes: Map<string, string>, p: string): string {
    for (const [mountPath, host] of volumes) {
      if (p === mountPath) return host;
      if (p.startsWith(`${mountPath}/`)) return host + p.slice(mountPath.length);
    }
    return p;
  }

  async function startPod(name: string, namespace = defaultNs): Promise<Pod> {
    const old = pods.get(key(namespace, name));
    if (old?.alive) throw new Error(`pod ${namespace}/${name} is running`);
    old?.dialer.close();
    const dir = join(base, `${namespace}-${name}-${Date.now().toString(36)}`);
    mkdirSync(dir, { mode: 0o755 });
    const volumes = makeVolumes(dir);
    const env: Record<string, string> = { PATH: '/usr/local/bin:/usr/bin:/bin' };
    // The container's variables: values (paths on volumes mapped), and the downward API fields the rig knows.
    const fields: Record<string, string> = { 'metadata.name': name, 'metadata.namespace': namespace };
    for (const [k, v] of template.env) {
      if ('value' in v) env[k] = mapPath(volumes, v.value);
      else if (fields[v.field] !== undefined) env[k] = fields[v.field]!;
      else throw new Error(`the rig has no value for the pod field ${v.field}`);
    }
    // Kubernetes expands $(VAR) in args from the container's variables.
    const expand = (a: string) => a.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, n: string) => env[n] ?? m);
    if (volumes.has('/tmp')) env.TMPDIR = volumes.get('/tmp')!;
    const argv = [
      ...[
        'setpriv',
        `--reuid=${template.uid}`,
        `--regid=${template.gid}`,
        '--clear-groups',
        '--pdeathsig=KILL',
        '--',
      ],
      ...[
        process.execPath,
        CORRAL_BIN,
        ...template.args.map((a) => mapPath(volumes, expand(a))),
        ...(panelToken
          ? [
              '--panel-token-file',
              mapPath(volumes, panelTokenPath(template.args[template.args.indexOf('--ws-token-file') + 1]!)),
            ]
          : []),
      ],
    ];
    // Resolves once the server printed its URL: it listens, in its own namespace.
    const proc = await spawnInNetns(argv, {
      cwd: mapPath(volumes, template.workingDir),
      env,
      ...(nodes && typeof nodes !== 'string' ? { cgroupProcs: nodes.procs } : {}),
    });
    const dialer = await NetnsDialer.enter(proc.proc.pid!);
    const pod = new Pod(name, namespace, proc, dialer, volumes);
    pods.set(key(namespace, name), pod);
    await waitReady(pod);
    return pod;
  }

  async function probe(pod: Pod, path: string): Promise<Exchange> {
    const socket = await pod.dialer.dial(template.port);
    return exchange(socket, { path, headers: [['Host', `127.0.0.1:${template.port}`]] });
  }

  /** kubelet's readiness probe: every 100 ms until it passes (20 s at most). */
  async function waitReady(pod: Pod): Promise<void> {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const r = await probe(pod, template.readinessPath).catch(() => null);
      if (r?.status === 200) return;
      if (!pod.alive || Date.now() > deadline) {
        throw new Error(`pod ${pod.name} never became ready (${r?.status ?? 'no answer'}): ${pod.stderr()}`);
      }
      await new Promise((res) => setTimeout(res, 100));
    }
  }

  const find = (name: string, namespace = defaultNs): Pod => {
    const p = pods.get(key(namespace, name));
    if (!p) throw new Error(`no pod ${namespace}/${name}`);
    return p;
  };

  const route = (name: string, namespace = defaultNs): AgentRoute => ({
    url: `ws://127.0.0.1:${router.port}/?token=${encodeURIComponent(token)}`,
    headers: { 'X-Sandbox-ID': name, 'X-Sandbox-Namespace': namespace },
  });

  const names =
    typeof opts.pods === 'number' ? Array.from({ length: opts.pods }, (_, i) => `pod-${i + 1}`) : opts.pods;
  const fleet: Fleet = {
    router,
    token,
    panelToken,
    nodesCpuGroup:
      nodes === null ? null : typeof nodes === 'string' ? { problem: nodes } : { dir: nodes.dir },
    pods: () => [...pods.values()],
    pod: find,
    route,
    async connect(name, o = {}) {
      const r = route(name, o.namespace);
      const c = await RpcClient.connect(r.url, { headers: r.headers });
      const init = (await c.request('initialize', { clientName: o.clientName ?? `agent-${name}` })) as {
        sessionId: string;
      };
      c.notify('initialized', {});
      return Object.assign(c, { sessionId: init.sessionId });
    },
    startPod,
    killPod: (name, namespace) => find(name, namespace).kill(),
    probe: (name, path, namespace) => probe(find(name, namespace), path),
    async close() {
      await router.close();
      for (const p of pods.values()) {
        await p.kill();
        p.dialer.close();
      }
      if (nodes && typeof nodes !== 'string') await nodes.remove();
      rmSync(base, { recursive: true, force: true });
    },
  };
  try {
    // One at a time: each start runs node and a bwrap preflight; two cores are shared with other tests.
    for (const n of names) await startPod(n);
  } catch (e) {
    await fleet.close();
    throw e;
  }
  return fleet;
}
