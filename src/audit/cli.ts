/**
 * `corral audit …`: export (JSON Lines, the chain with it; asciicast v2 of one process), verify (the hash chain of a
 * database or an export), replay (one process's stored output at its own pace). Each opens the database read-only: a
 * running server may keep writing it meanwhile.
 */
import { existsSync, readFileSync } from 'node:fs';
import { parseArgs, TextDecoder } from 'node:util';
import { escapeTerminalLines, terminalJson } from '../protocol/terminalText.js';
import { localPublicKey, parsePublicKey } from './chainKey.js';
import { writeJsonl } from './export.js';
import { chainLines, chainRef, hasChain, verifyExport } from './exportChain.js';
import { openAuditStore } from './openStore.js';
import { asciicastLines, replaySteps, type StoredReplay, storedReplay } from './replay.js';
import { defaultAuditPath } from './trail.js';
import { databaseSource, verifyChain, verifyReport } from './verify.js';

export async function exportAudit(opts: {
  dbPath: string;
  since: number | null;
  sessionId: string | null;
  out: NodeJS.WritableStream;
  /** Add the hash chain and the public key (exportChain.ts): `--chain`, for `audit verify --export`. */
  chain?: boolean;
}): Promise<number> {
  if (!existsSync(opts.dbPath)) throw new Error(`no audit database at ${opts.dbPath}`);
  const store = openAuditStore(opts.dbPath, { readonly: true });
  try {
    const filtered = opts.since !== null || opts.sessionId !== null;
    const chain =
      opts.chain && hasChain(store.db)
        ? { ref: chainRef, lines: () => chainLines(store.db, filtered) }
        : undefined;
    return await writeJsonl(store.db, { since: opts.since, sessionId: opts.sessionId }, opts.out, chain);
  } finally {
    store.close();
  }
}

/** A usage error of an audit subcommand (exit 2). */
export class AuditUsageError extends Error {}

export interface AuditIo {
  out: NodeJS.WritableStream;
  err: NodeJS.WritableStream;
}

const stdio: AuditIo = { out: process.stdout, err: process.stderr };

/**
 * `corral audit verify [--db FILE | --export FILE] [--public-key KEY|@FILE] [--json]`: 0 when the chain holds, 1 when
 * it is broken (the first problem named first), 2 on a usage error.
 */
export function verifyCommand(argv: string[], io: AuditIo = stdio): number {
  const { values } = parseArgs({
    args: argv,
    options: {
      db: { type: 'string' },
      export: { type: 'string' },
      'public-key': { type: 'string' },
      json: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.db !== undefined && values.export !== undefined)
    throw new AuditUsageError('verify: give --db or --export, not both');
  const keyArg = values['public-key'];
  const given = keyArg
    ? parsePublicKey(keyArg.startsWith('@') ? readFileSync(keyArg.slice(1), 'utf8') : keyArg)
    : null;
  let result: ReturnType<typeof verifyChain>;
  let what: string;
  if (values.export !== undefined) {
    what = values.export;
    result = verifyExport(readFileSync(values.export, 'utf8'), given);
  } else {
    const dbPath = values.db ?? defaultAuditPath();
    what = dbPath;
    if (!existsSync(dbPath)) throw new Error(`no audit database at ${dbPath}`);
    const local = given ? null : localPublicKey(dbPath);
    const store = openAuditStore(dbPath, { readonly: true });
    try {
      result = verifyChain(databaseSource(store.db), {
        publicKey: given ?? local,
        keySource: given ? 'given' : 'local',
      });
    } finally {
      store.close();
    }
  }
  if (values.json) io.out.write(`${terminalJson(result)}\n`);
  else for (const line of verifyReport(result, what)) io.out.write(`${line}\n`);
  return result.ok ? 0 : 1;
}

/**
 * `corral audit export|verify …`: the exit code (0 fine, 1 broken or failed). Throws AuditUsageError (or parseArgs'
 * ERR_PARSE_ARGS_*) on a usage error: the caller prints the usage and exits 2.
 */
export async function auditMain(argv: string[], io: AuditIo = stdio): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === 'verify') return verifyCommand(rest, io);
  if (sub === 'replay') return replayCommand(rest, io);
  if (sub !== 'export')
    throw new AuditUsageError(
      `audit: unknown subcommand ${sub ?? '(none)'}; expected export, verify or replay`,
    );
  const { values } = parseArgs({
    args: rest,
    options: {
      db: { type: 'string' },
      format: { type: 'string', default: 'jsonl' },
      since: { type: 'string' },
      session: { type: 'string' },
      process: { type: 'string' },
      width: { type: 'string' },
      height: { type: 'string' },
      chain: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.format === 'asciicast') {
    if (values.session === undefined || values.process === undefined)
      throw new AuditUsageError('--format asciicast: give --session and --process');
    const r = readReplay(values.db ?? defaultAuditPath(), values.session, values.process);
    const size = {
      width: whole(values.width, '--width', 80, 1, 1000),
      height: whole(values.height, '--height', 24, 1, 1000),
    };
    for (const line of asciicastLines(r, size)) io.out.write(`${line}\n`);
    return 0;
  }
  if (values.format !== 'jsonl')
    throw new AuditUsageError(`--format: jsonl or asciicast, got ${values.format}`);
  if (values.process !== undefined) throw new AuditUsageError('--process: only with --format asciicast');
  let since: number | null = null;
  if (values.since !== undefined) {
    since = Date.parse(values.since);
    if (Number.isNaN(since)) throw new AuditUsageError(`--since: not an ISO 8601 time: ${values.since}`);
  }
  await exportAudit({
    dbPath: values.db ?? defaultAuditPath(),
    since,
    sessionId: values.session ?? null,
    out: io.out,
    chain: values.chain,
  });
  return 0;
}

/** Whether `e` is a usage error of auditMain (exit 2 with the usage). */
export function isAuditUsageError(e: unknown): boolean {
  return (
    e instanceof AuditUsageError || /^ERR_PARSE_ARGS/.test(String((e as { code?: unknown })?.code ?? ''))
  );
}

/** A whole number option within [min, max] (`fallback` when absent). */
function whole(v: string | undefined, name: string, fallback: number, min: number, max: number): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!/^\d+$/.test(v) || n < min || n > max)
    throw new AuditUsageError(`${name}: a whole number ${min}..${max}, got ${v.slice(0, 40)}`);
  return n;
}

/** The stored replay of one process (read-only); an error naming it when there is no such process. */
function readReplay(dbPath: string, sessionId: string, processId: string): StoredReplay {
  if (!existsSync(dbPath)) throw new Error(`no audit database at ${dbPath}`);
  const store = openAuditStore(dbPath, { readonly: true });
  try {
    const r = storedReplay(store.db, sessionId, processId);
    if (!r.process)
      throw new Error(`no stored process ${terminalJson(processId)} in session ${terminalJson(sessionId)}`);
    return r;
  } finally {
    store.close();
  }
}

const pause = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));

/**
 * `corral audit replay SESSION PROCESS [--db FILE] [--speed N] [--max-idle SECONDS] [--raw]`: the process's stored
 * output at its recorded pace (divided by --speed). With --raw the recorded bytes go out as they are (a terminal
 * session plays in this terminal); without, every terminal control is escaped (escapeTerminalLines) and pipes' output
 * is prefixed with its time and stream, so a recording cannot act on the terminal that reads it.
 */
export async function replayCommand(argv: string[], io: AuditIo = stdio): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      db: { type: 'string' },
      speed: { type: 'string' },
      'max-idle': { type: 'string' },
      raw: { type: 'boolean', default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  if (positionals.length !== 2) throw new AuditUsageError('replay: give SESSION and PROCESS');
  const speed = values.speed === undefined ? 1 : Number(values.speed);
  if (!Number.isFinite(speed) || speed <= 0 || speed > 1_000_000)
    throw new AuditUsageError(
      `--speed: a number above 0, at most 1000000, got ${String(values.speed).slice(0, 40)}`,
    );
  const maxIdle = values['max-idle'] === undefined ? null : Number(values['max-idle']);
  if (maxIdle !== null && (!Number.isFinite(maxIdle) || maxIdle < 0))
    throw new AuditUsageError(
      `--max-idle: seconds, 0 or more, got ${String(values['max-idle']).slice(0, 40)}`,
    );
  const r = readReplay(values.db ?? defaultAuditPath(), positionals[0]!, positionals[1]!);
  const decoders = new Map<string, TextDecoder>();
  for (const step of replaySteps(r, speed, maxIdle === null ? null : maxIdle * 1000)) {
    if (step.delayMs >= 1) await pause(step.delayMs);
    if (values.raw) {
      io.out.write(step.data);
      continue;
    }
    let decoder = decoders.get(step.stream);
    if (!decoder) {
      decoder = new TextDecoder('utf-8');
      decoders.set(step.stream, decoder);
    }
    const text = escapeTerminalLines(decoder.decode(step.data, { stream: true }).replace(/\r\n/g, '\n'));
    if (r.tty) io.out.write(text);
    else {
      const prefix = `[${step.offset.toFixed(3).padStart(9)}s ${step.stream}] `;
      const lines = text.endsWith('\n') ? text.slice(0, -1).split('\n') : text.split('\n');
      io.out.write(`${lines.map((l) => prefix + l).join('\n')}\n`);
    }
  }
  if (r.droppedBytes > 0)
    io.err.write(
      `corral: ${r.droppedBytes} bytes of output were not recorded (the replay bound) and are not shown\n`,
    );
  if (r.chunks.length === 0) io.err.write('corral: no timed output stored for this process\n');
  return 0;
}
