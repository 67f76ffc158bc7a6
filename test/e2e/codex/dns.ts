/**
 * A DNS responder for the rig's network namespace: it answers every query on 127.0.0.1:53 with NXDOMAIN and records
 * the names asked. Inside a namespace with only `lo`, the system resolver would otherwise wait out its full timeout
 * (musl: 5 s per lookup) for each name the CLI tries to reach; this injected resolver answers at once, and its log
 * shows what the CLI tried to contact. No real DNS lookup ever happens.
 */
import { createSocket, type Socket } from 'node:dgram';
import { once } from 'node:events';

export interface DnsSink {
  queries: { name: string; type: number }[];
  close(): Promise<void>;
}

function questionName(msg: Buffer): { name: string; end: number } | null {
  const labels: string[] = [];
  let off = 12;
  while (off < msg.length) {
    const len = msg[off]!;
    if (len === 0) return { name: labels.join('.'), end: off + 1 };
    if (len >= 0xc0) return null;
    labels.push(msg.subarray(off + 1, off + 1 + len).toString('latin1'));
    off += 1 + len;
  }
  return null;
}

/** Answers NXDOMAIN to everything on host:port (127.0.0.1:53 by default). */
export async function startDnsSink(host = '127.0.0.1', port = 53): Promise<DnsSink> {
  const queries: { name: string; type: number }[] = [];
  const sock: Socket = createSocket('udp4');
  sock.on('message', (msg, rinfo) => {
    if (msg.length < 12) return;
    const q = questionName(msg);
    if (!q || msg.length < q.end + 4) return;
    queries.push({ name: q.name, type: msg.readUInt16BE(q.end) });
    const reply = Buffer.from(msg.subarray(0, q.end + 4));
    // QR=1, opcode from the query, RD copied, RA=1, RCODE=3 (NXDOMAIN); one question, no answers.
    reply[2] = 0x80 | (msg[2]! & 0x79);
    reply[3] = 0x80 | 3;
    reply.writeUInt16BE(1, 4);
    reply.writeUInt16BE(0, 6);
    reply.writeUInt16BE(0, 8);
    reply.writeUInt16BE(0, 10);
    sock.send(reply, rinfo.port, rinfo.address);
  });
  sock.bind(port, host);
  await once(sock, 'listening');
  return {
    queries,
    close: () => new Promise<void>((resolve) => sock.close(() => resolve())),
  };
}
