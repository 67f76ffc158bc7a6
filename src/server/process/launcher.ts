import type { Dialer, UpstreamSettings } from '../../network/index.js';
import {
  applyProxyEnv,
  type ManagedProxy,
  NetworkConfigError,
  NetworkEvents,
  parseProcessNetwork,
  type Resolver,
  startManagedProxy,
} from '../../network/index.js';
import type { LaunchSpec, PreparedLaunch, SandboxType } from '../../process/launch.js';
import type { DenialClassifier } from '../../process/managedProcess.js';
import { checkCwd, LaunchCheckError, resolveProgram } from '../../process/resolveProgram.js';
import { internalError, invalidParams, RpcError } from '../../protocol/errors.js';
import type { ExecParams } from '../../protocol/exec.js';
import { type SandboxPolicy, SandboxPolicySchema } from '../../protocol/sandbox.js';
import { serdeMessage } from '../../protocol/serde.js';
import { parseClientWrapped, shouldUnwrap, type UnwrapMode } from '../../sandbox/codexWrapped.js';
import { fsRulesFor } from '../../sandbox/fsAccess.js';
import {
  type EffectiveSandbox,
  isLikelySandboxDenied,
  type ParsedSandbox,
  type PrepareOptions,
  parseSandboxParam,
  prepareLaunch,
  SandboxSetupError,
  startSandbox,
  sweepStalePrivateDirs,
} from '../../sandbox/index.js';
import type { Logger } from '../core/log.js';
import type { FsContextResolver } from '../fs/fsHandlers.js';

/** What process/start asks of the sandbox and proxy layers: turn a plain launch into the one that runs. */
export interface LaunchPreparer {
  prepare(
    params: ExecParams,
    spec: LaunchSpec,
    ctx: { sessionId: string },
  ): PreparedLaunch | Promise<PreparedLaunch>;
  classify: DenialClassifier;
  /** Whether a start must carry a sandbox (`--require-sandbox`; initialize reports it). */
  readonly requireSandbox?: boolean;
  /** Refuses a start's params before anything else is checked or made (as a parse error of the seed would). */
  checkStart?(params: ExecParams): void;
  /** The live managed proxy of a process, if this preparer started one (network approvals install their decider). */
  proxyOf?(sessionId: string, processId: string): ManagedProxy | undefined;
}

export interface LauncherOptions {
  log: Logger;
  /** Where proxy audit events and blocked requests go (the panel subscribes). */
  networkEvents?: NetworkEvents;
  sandbox?: PrepareOptions;
  /** Test seams for the managed proxy (tests never make real DNS lookups). */
  resolver?: Resolver;
  dialer?: Dialer;
  /** The server's upstream proxies for every managed proxy (--tcp-upstream-proxy, …; network/upstream.ts). */
  upstream?: UpstreamSettings;
  /**
   * Codex 0.120–0.130 wrap sandboxed commands in their own `codex-linux-sandbox` launcher, which as root runs bwrap
   * without `--cap-drop ALL` (sandbox.md §3.1, §7.1). `auto` (default): when this server runs as root, run the
   * command after `--` under our own sandbox instead; `always` / `never` force it on / off.
   */
  unwrapClientSandbox?: UnwrapMode;
}

/** A client-wrapped command: either unwrapped (our sandbox + the inner command) or run as sent, with a panel note. */
interface ClientUnwrap {
  sandbox?: ParsedSandbox;
  spec?: LaunchSpec;
  note: Record<string, unknown>;
}

/**
 * The launch pipeline of process/start, on params the method table has already typed (`sandbox`, `managedNetwork`,
 * `networkProxy`): make the one effective sandbox of the start (effective.ts `startSandbox`), check the proxy
 * config, start the process's proxy and apply its environment, then wrap the command in that sandbox. Anything that
 * cannot be honoured fails the start (-32602 for bad input, -32603 for setup failures); nothing runs with less
 * isolation than asked for.
 */
export class Launcher implements LaunchPreparer {
  readonly networkEvents: NetworkEvents;
  /** Live proxies by `${sessionId}/${processId}`, for the panel and for approvals. */
  readonly proxies = new Map<string, ManagedProxy>();

  constructor(private readonly opts: LauncherOptions) {
    // What SIGKILLed servers left in /tmp (their private and launch directories) goes at the next start.
    for (const dir of sweepStalePrivateDirs()) opts.log.info(`removed ${dir}, left by a server that is gone`);
    this.networkEvents =
      opts.networkEvents ?? new NetworkEvents((e) => opts.log.error('network event listener failed', e));
  }

  proxyOf(sessionId: string, processId: string): ManagedProxy | undefined {
    return this.proxies.get(`${sessionId}/${processId}`);
  }

  get requireSandbox(): boolean {
    return this.opts.sandbox?.requireSandbox === true;
  }

  /** `--require-sandbox`: serde's text for the seed's required `sandbox`, absent or null alike (issue 33, item 5). */
  checkStart(params: ExecParams): void {
    if (this.requireSandbox && (params.sandbox === undefined || params.sandbox === null))
      throw invalidParams('missing field `sandbox`');
  }

  classify = (sandboxType: SandboxType, exitCode: number, output: string): boolean =>
    isLikelySandboxDenied(sandboxType !== 'none', exitCode, output);

  prepare(
    params: ExecParams,
    spec: LaunchSpec,
    ctx: { sessionId: string },
  ): PreparedLaunch | Promise<PreparedLaunch> {
    const client = this.clientWrapped(params, spec);
    if (client?.spec) spec = client.spec;
    const sandbox = startSandbox(
      client?.sandbox ?? params.sandbox,
      params.enforceManagedNetwork === true,
      spec.cwd,
    );
    let network: ReturnType<typeof parseProcessNetwork>;
    try {
      network = parseProcessNetwork({
        managedNetwork: params.managedNetwork,
        networkProxy: params.networkProxy,
      });
    } catch (e) {
      if (e instanceof NetworkConfigError) {
        // The seed's managedNetwork: -32603 for a broken constraint or an unbuildable state; else -32602 (0.169).
        const a = e.answer();
        throw a.internal ? internalError(a.message) : invalidParams(a.message);
      }
      throw e;
    }
    const mn = params.managedNetwork;
    if (!network && sandbox?.enforceManagedNetwork && mn && 'config' in mn) {
      throw internalError(
        'managed network enforcement requested but the managed proxy is disabled (network.enabled is false): refusing to start',
      );
    }
    // Fast path: nothing to wrap, nothing to start.
    if (!sandbox && !network)
      return { spec, sandboxType: 'none', cleanup() {}, ...(client ? { summary: client.note } : {}) };
    const launch = this.prepareAsync(params, spec, ctx, sandbox, network);
    if (!client) return launch;
    return launch.then((l) => {
      if (client.sandbox && l.sandboxType === 'none') {
        // Never run an unwrapped command with less isolation than the client's launcher would have applied.
        l.cleanup();
        throw internalError(
          'the client-wrapped command could not be placed under our sandbox: refusing to start',
        );
      }
      l.summary = { ...(l.summary ?? {}), ...client.note };
      return l;
    });
  }

  /**
   * Recognises a 0.120–0.130 client-wrapped argv (`codex-linux-sandbox … -- cmd`). When unwrapping applies and every
   * launcher flag is understood: the inner command (resolved against the child's PATH, in `--command-cwd`) and the
   * equivalent sandbox param. Otherwise the argv runs as sent (today's behaviour) with a note saying why.
   */
  private clientWrapped(params: ExecParams, spec: LaunchSpec): ClientUnwrap | null {
    if (params.sandbox) return null;
    const parsed = parseClientWrapped(params.argv);
    if (parsed.kind === 'not-wrapped') return null;
    const mode = this.opts.unwrapClientSandbox ?? 'auto';
    if (!shouldUnwrap(mode, process.geteuid?.())) {
      const why =
        mode === 'never'
          ? 'unwrapClientSandbox is "never"'
          : 'the server does not run as root: the client launcher applies its sandbox';
      return { note: { clientWrapped: true, unwrapped: false, unwrapReason: why } };
    }
    if (parsed.kind === 'refused') {
      this.opts.log.warn(
        `process ${params.processId}: client-wrapped command not unwrapped, run as sent: ${parsed.reason}`,
      );
      return { note: { clientWrapped: true, unwrapped: false, unwrapReason: parsed.reason } };
    }
    const cwd = parsed.cwd ?? spec.cwd;
    let file: string;
    try {
      checkCwd(cwd);
      file = resolveProgram(parsed.command[0]!, cwd, spec.env);
    } catch (e) {
      if (e instanceof LaunchCheckError) throw internalError(e.message);
      throw e;
    }
    this.opts.log.info(
      `process ${params.processId}: unwrapped the client's ${parsed.launcher} (${parsed.shape}); running ${file} under our sandbox`,
    );
    return {
      sandbox: parsed.sandbox,
      spec: { file, argv: parsed.command, env: spec.env, cwd },
      note: {
        clientWrapped: true,
        unwrapped: true,
        clientShape: parsed.shape,
        clientLauncher: parsed.launcher,
      },
    };
  }

  private async prepareAsync(
    params: ExecParams,
    spec: LaunchSpec,
    ctx: { sessionId: string },
    sandbox: EffectiveSandbox | null,
    network: ReturnType<typeof parseProcessNetwork>,
  ): Promise<PreparedLaunch> {
    let proxy: ManagedProxy | null = null;
    const key = `${ctx.sessionId}/${params.processId}`;
    if (network) {
      try {
        proxy = await startManagedProxy(network, {
          processId: params.processId,
          sessionId: ctx.sessionId,
          events: this.networkEvents,
          log: (line) => this.opts.log.info(line),
          ...(this.opts.resolver ? { resolver: this.opts.resolver } : {}),
          ...(this.opts.dialer ? { dialer: this.opts.dialer } : {}),
          ...(this.opts.upstream ? { upstream: this.opts.upstream } : {}),
        });
      } catch (e) {
        throw internalError(`failed to start the managed network proxy: ${(e as Error).message}`);
      }
      this.proxies.set(key, proxy);
      spec = { ...spec, env: applyProxyEnv(spec.env, proxy) };
    }
    const closeProxy = () => {
      if (!proxy) return;
      this.proxies.delete(key);
      proxy
        .close()
        .catch((e) => this.opts.log.warn(`closing proxy of ${params.processId}: ${(e as Error).message}`));
    };
    let launch: PreparedLaunch;
    try {
      launch = await prepareLaunch(
        sandbox,
        { spec, tty: params.tty, proxy: proxy?.route },
        this.opts.sandbox,
      );
    } catch (e) {
      closeProxy();
      if (e instanceof SandboxSetupError) throw internalError(e.message);
      if (e instanceof RpcError) throw e;
      throw internalError(`sandbox setup failed: ${(e as Error).message}`);
    }
    if (!proxy) return launch;
    const warnings = [...proxy.spec.warnings];
    // network-proxy.md §1: started and applied but not enforced, under a restricted network nothing reaches it.
    if (
      sandbox &&
      launch.sandboxType !== 'none' &&
      !sandbox.enforceManagedNetwork &&
      sandbox.network === 'restricted'
    )
      warnings.push(
        'the managed proxy is unreachable: the sandbox network is restricted and enforceManagedNetwork is false',
      );
    const summary = {
      ...(launch.summary ?? {}),
      proxy: { httpPort: proxy.httpPort, socksPort: proxy.socksPort ?? null },
      ...(warnings.length > 0 ? { warnings } : {}),
    };
    return {
      ...launch,
      summary,
      ...(warnings.length > 0 ? { warnings } : {}),
      afterSpawn: launch.afterSpawn?.bind(launch),
      cleanup() {
        try {
          launch.cleanup();
        } finally {
          closeProxy();
        }
      },
    };
  }

  /** Resolves the sandbox context carried by fs/* requests exactly as for a process (same TMPDIR). */
  fsContext: FsContextResolver = (context) => {
    if (context === null || context === undefined) return null;
    const asSandbox = parseSandboxParam(context);
    let parsed: ParsedSandbox | SandboxPolicy | null | undefined = asSandbox.data;
    if (!asSandbox.success) {
      const legacy = SandboxPolicySchema.safeParse(context);
      if (!legacy.success)
        throw invalidParams(serdeMessage(asSandbox.error, context, 'FileSystemSandboxContext'));
      parsed = legacy.data;
    }
    const rules = fsRulesFor(parsed, { tmpdir: this.opts.sandbox?.tmpdir });
    if (typeof rules === 'string') throw internalError(rules);
    return rules;
  };
}
