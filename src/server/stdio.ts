import { createInterface } from 'node:readline';
import type { ExecServer } from './execServer.js';

const NEWLINE = Buffer.from('\n');

/** `--listen stdio`: newline-delimited JSON-RPC on stdin/stdout (as 0.169's `codex exec-server --listen stdio`). */
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
  const rl = createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY });
  rl.on('line', (line) => {
    if (line.trim() !== '') conn.receive(line);
  });
  rl.on('close', () => {
    conn.transportClosed();
    onEnd();
  });
}
