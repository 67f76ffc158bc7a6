/**
 * `corral approvals …` run as a person would (the CLI from source through tsx), and the host it reaches: `startHost`
 * with a project-rule file and the state file, proxies that resolve through the stub resolver and dial only loopback.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import { localStatePath } from '../../src/app/localState.js';
import type { ApprovalPrompt, ApprovalsState } from '../../src/protocol/approvals.js';
import { loopbackOnlyDialer, startOrigin, stubResolver } from '../integration/network-helpers.js';
import { CORRAL_BIN, ROOT } from './cli.js';
import { RpcClient } from './client.js';
import { shellStart } from './registry-contract.js';
import { tempDir } from './server.js';

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `corral approvals ARGS` with `XDG_STATE_HOME=stateHome` (where it finds the local host's state file). */
export function runApprovalsCli(args: string[], stateHome: string): Promise<CliRun> {
  const proc = spawn(process.execPath, [CORRAL_BIN, 'approvals', ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: stateHome, XDG_STATE_HOME: stateHome },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => {
    stdout += d;
  });
  proc.stderr.on('data', (d) => {
    stderr += d;
  });
  return new Promise((resolve) => proc.once('close', (code) => resolve({ code, stdout, stderr })));
}

/** A curl through the managed proxy (NO_PROXY ignored) that prints `label=<HTTP status>`, after the body with `body`. */
export const curlCode = (label: string, url: string, body = false) =>
  body
    ? `curl --noproxy '' -s -w '\\n${label}=%{http_code}\\n' ${url}`
    : `curl --noproxy '' -s -o /dev/null -w '${label}=%{http_code}\\n' ${url}`;

/** The seed managedNetwork asking for approvals (loopback governed by the allowlist alone). */
export function askingNetwork(domains: Record<string, string> = {}) {
  return {
    config: {
      network: {
        enabled: true,
        allow_local_binding: true,
        hard_deny_allowlist_misses: false,
        domains,
      },
    },
  };
}

/** A host writing its state file under `stateHome` and keeping project rules in `rulesFile`. */
export async function startRulesHost(
  stateHome: string,
  rulesFile: string,
  offMachine: string[],
): Promise<Host> {
  mkdirSync(join(stateHome, 'corral'), { recursive: true, mode: 0o700 });
  return startHost({
    server: {
      launcher: { resolver: stubResolver, dialer: loopbackOnlyDialer(offMachine) },
      approvals: { timeoutMs: 30_000 },
    },
    resumeGraceMs: 0,
    approvalRules: rulesFile,
    localState: localStatePath({ XDG_STATE_HOME: stateHome }),
  });
}

/** process/start of `sh -c script` in `cwd` with PATH=/usr/bin:/bin and a managed network that asks for approvals. */
export const askingStart = (
  agent: RpcClient,
  processId: string,
  script: string,
  cwd: string,
  managedNetwork: unknown = askingNetwork(),
) => agent.request('process/start', { ...shellStart(processId, script, cwd), managedNetwork });

/** Closes what an approvals test opened (its clients, the host, the origin, the temp dir); no dial left the machine. */
export async function closeApprovalsRig(rig: {
  clients: RpcClient[];
  host: Host | undefined;
  origin: { close(): Promise<void> } | undefined;
  tmp: { cleanup(): void };
  offMachine: string[];
}): Promise<void> {
  for (const c of rig.clients) c.close();
  await rig.host?.shutdown();
  await rig.origin?.close();
  rig.tmp.cleanup();
  assert.deepEqual(rig.offMachine, [], 'no dial may ever leave the machine');
}

/**
 * The rig of an approvals suite, set up before its tests and closed after them: a temp dir, an origin on loopback, a
 * host keeping rules in `rulesFile` and its state file under `stateHome`; `open` a client with a token, `pendingOf`
 * the prompts of one process.
 */
export function approvalsRig(prefix: string) {
  const tmp = tempDir(prefix);
  const rig = {
    tmp,
    stateHome: join(tmp.path, 'state'),
    rulesFile: join(tmp.path, 'rules', 'approval-rules.db'),
    offMachine: [] as string[],
    clients: [] as RpcClient[],
    origin: undefined as unknown as Awaited<ReturnType<typeof startOrigin>>,
    host: undefined as unknown as Host,
    async open(token: string, name: string): Promise<RpcClient> {
      const c = await RpcClient.open(`${rig.host.listener.url}/?token=${encodeURIComponent(token)}`, name);
      rig.clients.push(c);
      return c;
    },
    async pendingOf(panel: RpcClient, processId: string): Promise<ApprovalPrompt[]> {
      return (await panel.request<ApprovalsState>('approvals/list', {})).pending.filter(
        (p) => p.processId === processId,
      );
    },
  };
  before(async () => {
    rig.origin = await startOrigin();
    rig.host = await startRulesHost(rig.stateHome, rig.rulesFile, rig.offMachine);
  });
  after(() => closeApprovalsRig(rig));
  return rig;
}
