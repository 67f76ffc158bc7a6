/**
 * `corral approvals …` (issue 36, item 4): answer network approvals from a terminal, with a panel credential.
 *
 *   corral approvals list [--json]
 *   corral approvals allow ID [--scope once|process|session|project]
 *   corral approvals deny ID [--scope once|process|session|project]
 *   corral approvals rules [--json] [--workspace DIR]
 *   corral approvals revoke RULE
 *   corral approvals wait ID                       (wait until the process exits: its exit denies)
 *   corral approvals repo DIR [--json]             (the workspace's .corral/network.json: new, changed, accepted)
 *   corral approvals accept-repo DIR [--sha256 H]  (accept it as it is now; H: the hash you read)
 *
 * By default it reaches the local host (`corral serve`, the desktop app) through the state file that host writes for
 * its own user (src/app/localState.ts); `--connect URL#token-file=PATH` (the `--join` syntax: header=, name= too)
 * reaches any server with its panel token. Bad input and unknown ids: a message and exit 2; no server or a refused
 * credential: a message and exit 1; nothing on stdout either way.
 */
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import type { z } from 'zod';
import { localStatePath, readLocalState } from '../app/localState.js';
import { readSecretFile } from '../cliAuth.js';
import {
  APPROVALS_CLI_CLIENT_NAME,
  type ApprovalDecision,
  type ApprovalPrompt,
  ApprovalsState,
  DecideResult,
  RepoPolicyState,
  RevokeResult,
  RulesResult,
  WaitForExitResult,
} from '../protocol/approvals.js';
import { parseJoinText } from '../protocol/fleet.js';
import { escapeTerminalLines, escapeTerminalText, terminalJson } from '../protocol/terminalText.js';

export const APPROVALS_USAGE = `usage:
  corral approvals list [--json]
  corral approvals allow ID [--scope once|process|session|project] [--path-prefix /P]
  corral approvals deny ID [--scope once|process|session|project] [--path-prefix /P]
  corral approvals rules [--json] [--workspace DIR]
  corral approvals revoke RULE
  corral approvals wait ID
  corral approvals repo DIR [--json]
  corral approvals accept-repo DIR [--sha256 HASH]
options:
  --connect URL#token-file=PATH   a server and a file holding its panel token (default: the local host's state file)
  --scope                         how long the answer lasts (default: once; project stores a rule for the workspace)
  --path-prefix /P                with --scope project on plain HTTP: the path prefix the rule matches (default: the
                                  request path's first segment)
  --sha256 HASH                   accept-repo: the hash you read (repo shows it); default: the file as it is now`;

/** A failure with its exit code: 2 for what the person typed (and unknown ids), 1 for the rest. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: 1 | 2,
  ) {
    super(message);
  }
}

const usage = (message: string): never => {
  throw new CliError(`${message}\n${APPROVALS_USAGE}`, 2);
};

const SCOPES = ['once', 'process', 'session', 'project'] as const;
type Scope = (typeof SCOPES)[number];
const ALLOW: Record<Scope, ApprovalDecision> = {
  once: 'allowOnce',
  process: 'allowProcess',
  session: 'allowSession',
  project: 'allowProject',
};
const DENY: Record<Scope, ApprovalDecision> = {
  once: 'denyOnce',
  process: 'denyProcess',
  session: 'deny',
  project: 'denyProject',
};

/** An approval or rule id as typed: printable, no spaces, bounded. */
const ID = /^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$/;

/** How long the whole call may take (connect, initialize, the request). */
const CALL_TIMEOUT_MS = 15_000;
/** Bounds what the server may send back (a list of prompts, rules and audit). */
const MAX_PAYLOAD = 64 * 1024 * 1024;

interface Target {
  url: string;
  token: string;
  headers: Record<string, string>;
}

const SUBCOMMANDS = ['list', 'allow', 'deny', 'rules', 'revoke', 'wait', 'repo', 'accept-repo'] as const;

interface Parsed {
  sub: (typeof SUBCOMMANDS)[number];
  id: string | null;
  pathPrefix: string | null;
  sha256: string | null;
  scope: Scope;
  json: boolean;
  workspace: string | null;
  connect: string | null;
}

/** The command line, checked; throws a CliError (exit 2) naming what is wrong. */
export function parseApprovalsArgs(argv: string[]): Parsed {
  const [sub, ...rest] = argv;
  if (sub === undefined) usage(`approvals: a subcommand is required (${SUBCOMMANDS.join(', ')})`);
  if (!(SUBCOMMANDS as readonly string[]).includes(sub!))
    usage(`approvals: unknown subcommand ${JSON.stringify(sub).slice(0, 80)}`);
  let values: Record<string, string | boolean | undefined>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: rest,
      options: {
        json: { type: 'boolean', default: false },
        scope: { type: 'string' },
        workspace: { type: 'string' },
        connect: { type: 'string' },
        'path-prefix': { type: 'string' },
        sha256: { type: 'string' },
      },
      strict: true,
      allowPositionals: true,
    }));
  } catch (e) {
    usage(`approvals ${sub}: ${(e as Error).message.split('\n')[0]!.slice(0, 300)}`);
  }
  const s = sub as Parsed['sub'];
  const takesId = s === 'allow' || s === 'deny' || s === 'revoke' || s === 'wait';
  const takesDir = s === 'repo' || s === 'accept-repo';
  if (takesDir) {
    if (positionals!.length !== 1) usage(`approvals ${s}: DIR (one workspace directory) is required`);
    const dir = positionals![0]!;
    if (!dir.startsWith('/') || dir.length > 4096 || /[\u0000-\u001f]/.test(dir))
      usage(`approvals ${s}: DIR must be an absolute path`);
    const sha = (values!.sha256 as string | undefined) ?? null;
    if (sha !== null && s !== 'accept-repo') usage(`approvals ${s}: --sha256 is for accept-repo`);
    if (sha !== null && !/^[0-9a-f]{64}$/.test(sha))
      usage(`approvals ${s}: --sha256 ${JSON.stringify(sha).slice(0, 80)}: expected a lower-case hex sha256`);
    for (const o of ['scope', 'path-prefix', 'workspace'])
      if (values![o] !== undefined) usage(`approvals ${s}: --${o} is not for ${s}`);
    if (values!.json && s !== 'repo') usage(`approvals ${s}: --json is for list, rules and repo`);
    return {
      sub: s,
      id: null,
      pathPrefix: null,
      sha256: sha,
      scope: 'once',
      json: values!.json === true,
      workspace: dir,
      connect: (values!.connect as string | undefined) ?? null,
    };
  }
  if (values!.sha256 !== undefined) usage(`approvals ${s}: --sha256 is for accept-repo`);
  const what = s === 'revoke' ? 'RULE' : 'ID';
  if (takesId && positionals!.length === 0) usage(`approvals ${s}: ${what} is required`);
  if (positionals!.length > (takesId ? 1 : 0))
    usage(
      `approvals ${s}: unexpected argument ${JSON.stringify(positionals![takesId ? 1 : 0]).slice(0, 80)}`,
    );
  const id = takesId ? positionals![0]! : null;
  if (id !== null && !ID.test(id))
    usage(`approvals ${s}: ${what} ${JSON.stringify(id).slice(0, 80)} is not an approval or rule id`);
  if (values!.scope !== undefined && s !== 'allow' && s !== 'deny')
    usage(`approvals ${s}: --scope is for allow and deny`);
  const scope = (values!.scope ?? 'once') as string;
  if (!(SCOPES as readonly string[]).includes(scope))
    usage(
      `approvals ${s}: --scope ${JSON.stringify(scope).slice(0, 80)}: expected once, process, session or project`,
    );
  const pathPrefix = (values!['path-prefix'] as string | undefined) ?? null;
  if (pathPrefix !== null && scope !== 'project')
    usage(`approvals ${s}: --path-prefix is for allow and deny with --scope project`);
  if (pathPrefix !== null && (!pathPrefix.startsWith('/') || pathPrefix.length > 1024))
    usage(`approvals ${s}: --path-prefix must start with '/' (at most 1024 characters)`);
  if (values!.json && s !== 'list' && s !== 'rules') usage(`approvals ${s}: --json is for list and rules`);
  if (values!.workspace !== undefined && s !== 'rules') usage(`approvals ${s}: --workspace is for rules`);
  const workspace = (values!.workspace as string | undefined) ?? null;
  if (workspace !== null && (!workspace.startsWith('/') || workspace.length > 4096))
    usage('approvals rules: --workspace must be an absolute path');
  return {
    sub: s,
    id,
    pathPrefix,
    sha256: null,
    scope: scope as Scope,
    json: values!.json === true,
    workspace,
    connect: (values!.connect as string | undefined) ?? null,
  };
}

/** Where to connect: `--connect URL#token-file=PATH`, else the local host's state file. */
function target(connect: string | null): Target {
  if (connect === null) {
    try {
      const s = readLocalState(localStatePath());
      return { url: s.url, token: s.token, headers: {} };
    } catch (e) {
      throw new CliError(`approvals: ${(e as Error).message}; start \`corral serve\`, or give --connect`, 1);
    }
  }
  let t: ReturnType<typeof parseJoinText>;
  try {
    t = parseJoinText(connect);
  } catch (e) {
    return usage(`approvals: --connect: ${(e as Error).message}`);
  }
  let url: URL;
  try {
    url = new URL(t.url);
  } catch {
    return usage(`approvals: --connect: not a URL: ${JSON.stringify(t.url).slice(0, 200)}`);
  }
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:')
    usage(`approvals: --connect: expected ws:// or wss://, got ${url.protocol}`);
  if (url.searchParams.has('token'))
    usage(
      'approvals: --connect: a ?token= on the command line can be read by every local user (ps): give #token-file=PATH',
    );
  if (!t.tokenFile) usage("approvals: --connect: the server's panel token is missing (#token-file=PATH)");
  const token = readSecretFile(t.tokenFile!, '--connect token-file', 16).token;
  return { url: t.url, token, headers: t.headers };
}

/** One JSON-RPC call to `t` as a panel client (initialize, initialized, the call); its result, parsed. */
async function call<T>(t: Target, method: string, params: unknown, schema: z.ZodType<T>): Promise<T> {
  const url = new URL(t.url);
  url.searchParams.set('token', t.token);
  const ws = new WebSocket(url, {
    headers: t.headers,
    perMessageDeflate: false,
    maxPayload: MAX_PAYLOAD,
    handshakeTimeout: CALL_TIMEOUT_MS,
    followRedirects: false,
  });
  try {
    return await new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new CliError(`approvals: ${t.url} did not answer in ${CALL_TIMEOUT_MS / 1000} s`, 1)),
        CALL_TIMEOUT_MS,
      );
      const done = (f: () => void) => {
        clearTimeout(timer);
        f();
      };
      ws.on('unexpected-response', (_req, res) => {
        res.resume();
        const why = res.statusCode === 401 || res.statusCode === 403 ? ': the credential was refused' : '';
        done(() => reject(new CliError(`approvals: ${t.url}: HTTP ${res.statusCode}${why}`, 1)));
      });
      ws.on('error', (e) => done(() => reject(new CliError(`approvals: ${t.url}: ${e.message}`, 1))));
      ws.on('close', () => done(() => reject(new CliError(`approvals: ${t.url} closed the connection`, 1))));
      ws.on('open', () => {
        ws.send(
          JSON.stringify({ id: 1, method: 'initialize', params: { clientName: APPROVALS_CLI_CLIENT_NAME } }),
        );
      });
      ws.on('message', (data) => {
        let m: { id?: unknown; result?: unknown; error?: { code?: number; message?: string } };
        try {
          m = JSON.parse(String(data));
        } catch {
          return done(() => reject(new CliError(`approvals: ${t.url} sent something that is not JSON`, 1)));
        }
        if (m.id !== 1 && m.id !== 2) return; // a notification or a server → client request: not ours
        if (m.error) {
          const code = m.error.code;
          // The server says the input is wrong (an unknown id, a bad param): the person's to fix.
          const exit = code === -32600 || code === -32602 ? 2 : 1;
          return done(() =>
            reject(new CliError(`approvals ${method}: ${String(m.error!.message).slice(0, 2000)}`, exit)),
          );
        }
        if (m.id === 1) {
          ws.send('{"method":"initialized","params":{}}');
          ws.send(JSON.stringify({ id: 2, method, params }));
          return;
        }
        const r = schema.safeParse(m.result);
        done(() =>
          r.success
            ? resolve(r.data)
            : reject(new CliError(`approvals: ${method}: the server's answer is not what was expected`, 1)),
        );
      });
    });
  } finally {
    ws.terminate();
  }
}

const text = (s: string | null | undefined) => escapeTerminalText(s ?? '');
const ago = (ms: number) => `${Math.max(0, Math.round(ms / 1000))} s`;

function printPrompt(p: ApprovalPrompt, now: number): string {
  const target = `${p.protocol} ${text(p.host)}:${p.port}${p.method ? ` ${text(p.method)}` : ''}${p.path ? ` ${text(p.path)}` : ''}`;
  const until = p.waitingForExit ? 'until the process exits' : `expires in ${ago(p.expiresAt - now)}`;
  return [
    `${text(p.server ? `${p.server}/` : '')}${text(p.id)}  ${target}  waiting ${p.waiting}  ${until}`,
    `  process ${text(p.processId)} of session ${text(p.sessionId)} (${text(p.clientName)}): ${p.command.map(text).join(' ')}`,
    `  cwd ${text(p.cwd)}  workspace ${p.workspace ? text(p.workspace) : '(none: project answers refused)'}`,
  ].join('\n');
}

/** Runs `corral approvals …`; the exit code (0, or a CliError's). Writes the result to `out`. */
export async function approvalsCommand(argv: string[], out: (s: string) => void): Promise<number> {
  const a = parseApprovalsArgs(argv);
  const t = target(a.connect);
  switch (a.sub) {
    case 'list': {
      const s = await call(t, 'approvals/list', {}, ApprovalsState);
      if (a.json) out(`${terminalJson({ pending: s.pending }, 2)}\n`);
      else if (s.pending.length === 0) out('no pending approvals\n');
      else out(`${s.pending.map((p) => printPrompt(p, Date.now())).join('\n')}\n`);
      return 0;
    }
    case 'allow':
    case 'deny': {
      const decision = (a.sub === 'allow' ? ALLOW : DENY)[a.scope];
      const params = { id: a.id, decision, ...(a.pathPrefix ? { pathPrefix: a.pathPrefix } : {}) };
      const r = await call(t, 'approvals/decide', params, DecideResult);
      out(`${decision}: released ${r.released} held request${r.released === 1 ? '' : 's'}\n`);
      return 0;
    }
    case 'rules': {
      const r = await call(t, 'approvals/rules', a.workspace ? { workspace: a.workspace } : {}, RulesResult);
      if (a.json) {
        out(`${terminalJson(r, 2)}\n`);
        return 0;
      }
      const lines = [`project rules: ${r.store ? text(r.store) : `off (${text(r.problem)})`}`];
      for (const x of r.rules)
        lines.push(
          `${text(x.id)}  ${x.decision} ${x.protocol} ${text(x.host)}:${x.port}${x.method ? ` ${text(x.method)}` : ''}${x.pathPrefix ? ` ${text(x.pathPrefix)}` : ''}  ` +
            `workspace ${text(x.workspace)}  by ${x.origin} ${new Date(x.createdAt).toISOString()}  ` +
            `hits ${x.hits}${x.lastHitAt ? ` (last ${new Date(x.lastHitAt).toISOString()})` : ''}${x.enabled ? '' : '  disabled'}`,
        );
      for (const d of r.decisions)
        lines.push(
          `${text(d.id)}  ${d.decision} ${d.protocol} ${text(d.host)}:${d.port}  ${d.scope} ${text(d.sessionId)}` +
            `${d.processId ? `/${text(d.processId)}` : ''}  (until the ${d.scope} ends)`,
        );
      out(`${lines.join('\n')}\n`);
      return 0;
    }
    case 'wait': {
      const r = await call(t, 'approvals/waitForExit', { id: a.id }, WaitForExitResult);
      out(
        `waiting until the process exits: ${r.waiting} held request${r.waiting === 1 ? '' : 's'} (its exit denies them)\n`,
      );
      return 0;
    }
    case 'repo':
    case 'accept-repo': {
      let r = await call(t, 'approvals/repoPolicy', { workspace: a.workspace }, RepoPolicyState);
      if (a.sub === 'accept-repo') {
        if (!r.sha256)
          throw new CliError(`approvals accept-repo: ${r.problem ?? 'no .corral/network.json to accept'}`, 2);
        const sha256 = a.sha256 ?? r.sha256;
        r = await call(t, 'approvals/repoAccept', { workspace: a.workspace, sha256 }, RepoPolicyState);
        out(`accepted ${text(r.file)} (sha256 ${text(r.sha256)}): it narrows only, as before\n`);
        return 0;
      }
      if (a.json) {
        out(`${terminalJson(r, 2)}\n`);
        return 0;
      }
      const lines = [
        `${text(r.file ?? `${a.workspace}/.corral/network.json`)}: ${r.status}${r.acceptance ? `, ${r.acceptance}` : ''}${r.sha256 ? `  sha256 ${r.sha256}` : ''}`,
        `  ${r.endpoints} endpoint${r.endpoints === 1 ? '' : 's'} declared (it can only narrow)`,
      ];
      if (r.acceptedSha256)
        lines.push(
          `  last accepted ${r.acceptedSha256} at ${new Date(r.acceptedAt ?? 0).toISOString()} by ${text(r.acceptedBy)}`,
        );
      if (r.problem) lines.push(`  problem: ${text(r.problem)}`);
      for (const i of r.ignored) lines.push(`  ignored: ${text(i)}`);
      out(`${lines.join('\n')}\n`);
      return 0;
    }
    case 'revoke': {
      const r = await call(t, 'approvals/revoke', { id: a.id }, RevokeResult);
      if (!r.revoked) throw new CliError(`approvals revoke: unknown rule ${a.id}`, 2);
      out(`revoked ${a.id}\n`);
      return 0;
    }
  }
}

/** The CLI's entry: runs, prints any failure to stderr, exits with its code. */
export async function approvalsMain(argv: string[]): Promise<never> {
  let code: number;
  if (argv.length === 1 && (argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help')) {
    process.stdout.write(APPROVALS_USAGE);
    process.exit(0);
  }
  try {
    code = await approvalsCommand(argv, (s) => process.stdout.write(s));
  } catch (e) {
    const err = e instanceof CliError ? e : new CliError((e as Error).message, 1);
    process.stderr.write(`corral: ${escapeTerminalLines(err.message)}\n`);
    code = err.exitCode;
  }
  process.exit(code);
}
