import { MAX_MESSAGE_BYTES } from '../../protocol/methods.js';
import type { ExecServer } from '../execServer.js';

const NEWLINE = Buffer.from('\n');
const LF = 0x0a;

/**
 * `--listen stdio`: newline-delimited JSON-RPC on stdin/stdout (as 0.169's `codex exec-server --listen stdio`).
 * A line may be as long as a WebSocket message (MAX_MESSAGE_BYTES): a longer one closes the connection (as 1009
 * does on a WebSocket) instead of being buffered without end.
 */
export function serveStdio(server: ExecServer, onEnd: () => void): void {
  const conn = server.connect({
    peer: 'stdio',
    write(messages, onWritten) {
      const last = messages.length - 1;
      for (let i = 0; i <= last; i++) {
        process.stdout.write(messages[i]!);
        process.stdout.write(NEWLINE, i === last ? () => onWritten() : undefined);
      }
    },
    close() {
      process.stdin.pause();
      onEnd();
    },
  });
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const line = (bytes: Buffer) => {
    const text = bytes.toString('utf8');
    if (text.trim() !== '') conn.receive(text);
  };
  process.stdin.on('data', (chunk: Buffer) => {
    let start = 0;
    for (let nl = chunk.indexOf(LF); nl >= 0 && !conn.closed; nl = chunk.indexOf(LF, start)) {
      const part = chunk.subarray(start, nl);
      start = nl + 1;
      if (pendingBytes + part.length > MAX_MESSAGE_BYTES) return conn.close(1009, 'message too big');
      line(pendingBytes === 0 ? part : Buffer.concat([...pending, part]));
      pending = [];
      pendingBytes = 0;
    }
    if (conn.closed || start === chunk.length) return;
    pendingBytes += chunk.length - start;
    if (pendingBytes > MAX_MESSAGE_BYTES) return conn.close(1009, 'message too big');
    pending.push(chunk.subarray(start));
  });
  process.stdin.on('end', () => {
    if (pendingBytes > 0 && !conn.closed) line(Buffer.concat(pending));
    conn.transportClosed();
    onEnd();
  });
}
