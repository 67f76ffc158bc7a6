/**
 * Reads a stored process's timed output (`process_chunks`, written at its close: replayRecorder.ts) and turns it into
 * what replays it: the panel's `audit/replay` answer, asciicast v2 (`corral audit export --format asciicast`), and
 * the timed steps of `corral audit replay` (cli.ts).
 */
import type { AuditProcessItem, AuditReplayResult } from '../protocol/audit.js';
import type { OutputStream } from '../protocol/exec.js';
import { terminalJson } from '../protocol/terminalText.js';
import { TRUNCATED_STREAM } from './replayRecorder.js';
import { type Row, toItem } from './rowItems.js';
import type { SqliteDatabase } from './sqliteDriver.js';

export interface StoredChunk {
  at: number;
  stream: OutputStream;
  data: Buffer;
}

export interface StoredReplay {
  process: AuditProcessItem | null;
  tty: boolean;
  startedAt: number | null;
  chunks: StoredChunk[];
  droppedBytes: number;
}

const STREAMS = new Set<string>(['stdout', 'stderr', 'pty']);

function hasChunksTable(db: SqliteDatabase): boolean {
  return (
    db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'process_chunks'").get() !==
    undefined
  );
}

/** The process's stored chunks in order (by seq: the order they arrived), and how many bytes were not kept. */
export function storedReplay(db: SqliteDatabase, sessionId: string, processId: string): StoredReplay {
  const row = db
    .prepare('SELECT * FROM processes WHERE session_id = ? AND process_id = ?')
    .get(sessionId, processId) as Row | undefined;
  if (!row) return { process: null, tty: false, startedAt: null, chunks: [], droppedBytes: 0 };
  const chunks: StoredChunk[] = [];
  let droppedBytes = 0;
  if (hasChunksTable(db)) {
    const rows = db
      .prepare('SELECT at, stream, data FROM process_chunks WHERE process = ? ORDER BY seq')
      .all(row.id) as Row[];
    for (const r of rows) {
      const stream = String(r.stream);
      const data = Buffer.isBuffer(r.data) ? r.data : Buffer.from(String(r.data ?? ''));
      if (stream === TRUNCATED_STREAM) {
        const n = Number(data.toString('latin1'));
        if (Number.isSafeInteger(n) && n > 0) droppedBytes += n;
      } else if (STREAMS.has(stream) && typeof r.at === 'number') {
        chunks.push({ at: r.at, stream: stream as OutputStream, data });
      }
    }
  }
  return {
    process: toItem('process', row) as AuditProcessItem,
    tty: row.tty === 1,
    startedAt: row.started_at as number,
    chunks,
    droppedBytes,
  };
}

/** `audit/replay`'s answer: the stored replay, each chunk's bytes base64. */
export function replayResult(db: SqliteDatabase, sessionId: string, processId: string): AuditReplayResult {
  const r = storedReplay(db, sessionId, processId);
  return {
    ...r,
    chunks: r.chunks.map((c) => ({ at: c.at, stream: c.stream, data: c.data.toString('base64') })),
  };
}

/** Seconds from `origin` to `at`, never before the previous event (clocks may step back; asciicast is ordered). */
function offsets(chunks: readonly StoredChunk[], origin: number): number[] {
  let last = 0;
  return chunks.map((c) => {
    last = Math.max(last, (c.at - origin) / 1000);
    return Math.round(last * 1e6) / 1e6;
  });
}

/**
 * asciicast v2 (https://docs.asciinema.org/manual/asciicast/v2/): a header line, then `[time, "o", text]` per chunk,
 * time-ordered, the bytes decoded as UTF-8 across chunk boundaries. A cut replay ends with a marker event saying so.
 * Every line goes through terminalJson: the file is safe to `cat` and parses to the same values.
 */
export function asciicastLines(r: StoredReplay, size: { width: number; height: number }): string[] {
  const origin = r.startedAt ?? r.chunks[0]?.at ?? 0;
  const header: Record<string, unknown> = {
    version: 2,
    width: size.width,
    height: size.height,
    timestamp: Math.floor(origin / 1000),
  };
  if (r.process) header.title = r.process.argv.join(' ');
  const lines = [terminalJson(header)];
  const times = offsets(r.chunks, origin);
  const decoder = new TextDecoder('utf-8');
  r.chunks.forEach((c, i) => {
    const text = decoder.decode(c.data, { stream: true });
    if (text.length > 0) lines.push(terminalJson([times[i], 'o', text]));
  });
  const rest = decoder.decode();
  const end = times[times.length - 1] ?? 0;
  if (rest.length > 0) lines.push(terminalJson([end, 'o', rest]));
  if (r.droppedBytes > 0)
    lines.push(
      terminalJson([end, 'm', `corral: ${r.droppedBytes} bytes of output not recorded (replay bound)`]),
    );
  return lines;
}

/** One step of a terminal replay: wait `delayMs` (already divided by the speed), then write `data`. */
export interface ReplayStep {
  delayMs: number;
  stream: OutputStream;
  /** Seconds since the start, for the text form. */
  offset: number;
  data: Buffer;
}

export function replaySteps(r: StoredReplay, speed: number, maxIdleMs: number | null): ReplayStep[] {
  const origin = r.startedAt ?? r.chunks[0]?.at ?? 0;
  const times = offsets(r.chunks, origin);
  let prev = 0;
  return r.chunks.map((c, i) => {
    let gap = (times[i]! - prev) * 1000;
    prev = times[i]!;
    if (maxIdleMs !== null) gap = Math.min(gap, maxIdleMs);
    return { delayMs: gap / speed, stream: c.stream, offset: times[i]!, data: c.data };
  });
}
