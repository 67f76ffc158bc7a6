/**
 * `corral audit …`: export (JSON Lines, the chain with it), verify (the hash chain of a database or an export).
 * Each opens the database read-only: a running server may keep writing it meanwhile.
 */
import { existsSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { terminalJson } from '../protocol/terminalText.js';
import { localPublicKey, parsePublicKey } from './chainKey.js';
import { writeJsonl } from './export.js';
import { chainLines, chainRef, hasChain, verifyExport } from './exportChain.js';
import { openAuditStore } from './openStore.js';
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
  if (sub !== 'export')
    throw new AuditUsageError(`audit: unknown subcommand ${sub ?? '(none)'}; expected export or verify`);
  const { values } = parseArgs({
    args: rest,
    options: {
      db: { type: 'string' },
      format: { type: 'string', default: 'jsonl' },
      since: { type: 'string' },
      session: { type: 'string' },
      chain: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.format !== 'jsonl')
    throw new AuditUsageError(`--format: only jsonl is supported, got ${values.format}`);
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
