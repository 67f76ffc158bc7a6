import { createInterface } from 'node:readline';
import type { ExecServer } from './execServer.js';

/** `--listen stdio`: newline-delimited JSON-RPC on stdin/stdout (as 0.169's `codex exec-server --listen stdio`). */
export function serveStdio(server: ExecServer, onEnd: () => void): void {
  const conn = server.connect({
    peer: 'stdio',
    send(text, onWritten) {
      process.stdout.write(`${text}\n`, onWritten ? () => onWritten() : undefined);
    },
    close() {
      process.stdin.pause();
      onEnd();
    },
  });
  const rl = createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY });
  rl.on('line', (line) => {
    if (line.trim() !== '') conn.receive(line);
  });
  rl.on('close', () => {
    conn.transportClosed();
    onEnd();
  });
}
