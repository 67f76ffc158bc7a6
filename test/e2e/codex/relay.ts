/**
 * A passive TCP relay between a WebSocket client and server: it forwards the bytes unchanged in both directions and
 * decodes every WebSocket frame on the way, so a test can assert on the exact JSON-RPC traffic (spec codex-clients.md §2).
 *
 * With `allowMethods`, it instead forwards frame by frame and answers every request whose method is not allowed
 * itself, with -32601, without the server ever seeing it: the server then looks like one that implements only those
 * methods (the `minimal-full` run of spec §10).
 */
import { once } from 'node:events';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';

export type Direction = 'c2s' | 's2c';

export interface Frame {
  /** Connection number, from 1. */
  conn: number;
  dir: Direction;
  /** Milliseconds since the relay started. */
  t: number;
  opcode: number;
  /** The text payload of text (and binary) messages; absent for control frames. */
  text?: string;
  /** The parsed JSON-RPC message when the payload is JSON. */
  msg?: RpcMessage;
  /** Set on answers the relay made up itself (allowMethods), and on the requests it kept from the server. */
  byRelay?: boolean;
}

export interface RpcMessage {
  id?: number | string | null;
  method?: string;
  params?: unknown;
  result?: unknown;
  error?: { code: number; message: string; data?: unknown };
  jsonrpc?: string;
}

/** Incremental decoder for one direction of a WebSocket connection (after the HTTP upgrade). */
class FrameDecoder {
  private buf = Buffer.alloc(0);
  private headerDone = false;
  private fragments: Buffer[] = [];
  private fragmentOpcode = 0;

  /**
   * `onMessage` returns true to drop a complete single-frame message instead of forwarding it. `forward`, when given,
   * receives the bytes to pass on (the HTTP head, then whole frames); without it the caller forwards raw chunks.
   */
  constructor(
    private readonly onMessage: (opcode: number, payload: Buffer) => boolean | undefined,
    private readonly forward?: (bytes: Buffer) => void,
  ) {}

  push(chunk: Buffer): void {
    this.buf = Buffer.concat([this.buf, chunk]);
    if (!this.headerDone) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      this.forward?.(Buffer.from(this.buf.subarray(0, end + 4)));
      this.buf = this.buf.subarray(end + 4);
      this.headerDone = true;
    }
    for (;;) {
      if (this.buf.length < 2) return;
      const b0 = this.buf[0]!;
      const b1 = this.buf[1]!;
      let len = b1 & 0x7f;
      let off = 2;
      if (len === 126) {
        if (this.buf.length < 4) return;
        len = this.buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (this.buf.length < 10) return;
        len = Number(this.buf.readBigUInt64BE(2));
        off = 10;
      }
      const masked = (b1 & 0x80) !== 0;
      const maskOff = off;
      if (masked) off += 4;
      if (this.buf.length < off + len) return;
      const payload = Buffer.from(this.buf.subarray(off, off + len));
      if (masked) {
        for (let i = 0; i < payload.length; i++) payload[i]! ^= this.buf[maskOff + (i % 4)]!;
      }
      const raw = Buffer.from(this.buf.subarray(0, off + len));
      this.buf = this.buf.subarray(off + len);
      const fin = (b0 & 0x80) !== 0;
      const opcode = b0 & 0x0f;
      let drop: boolean | undefined = false;
      if (opcode >= 8) {
        this.onMessage(opcode, payload);
      } else if (opcode === 0) {
        this.fragments.push(payload);
        if (fin) {
          this.onMessage(this.fragmentOpcode, Buffer.concat(this.fragments));
          this.fragments = [];
        }
      } else if (fin) {
        drop = this.onMessage(opcode, payload);
      } else {
        this.fragmentOpcode = opcode;
        this.fragments = [payload];
      }
      if (!drop) this.forward?.(raw);
    }
  }
}

export interface Relay {
  url: string;
  frames: Frame[];
  /** The HTTP upgrade request heads seen, one per connection. */
  handshakes: string[];
  close(): Promise<void>;
}

/** An unmasked, final text frame (server to client). */
function textFrame(text: string): Buffer {
  const payload = Buffer.from(text, 'utf8');
  const n = payload.length;
  const head = n < 126 ? Buffer.from([0x81, n]) : n < 65536 ? Buffer.alloc(4) : Buffer.alloc(10);
  if (n >= 126 && n < 65536) {
    head[0] = 0x81;
    head[1] = 126;
    head.writeUInt16BE(n, 2);
  } else if (n >= 65536) {
    head[0] = 0x81;
    head[1] = 127;
    head.writeBigUInt64BE(BigInt(n), 2);
  }
  return Buffer.concat([head, payload]);
}

/** The method set of the minimal server that passed every acceptance run (spec codex-clients.md §8). */
export const MINIMAL_METHODS = [
  'initialize',
  'initialized',
  'process/start',
  'process/read',
  'process/write',
  'process/terminate',
  'fs/getMetadata',
  'fs/readFile',
  'fs/writeFile',
  'fs/createDirectory',
  'fs/readDirectory',
  'fs/remove',
  'fs/copy',
];

/**
 * Starts a relay on 127.0.0.1 that forwards to the WebSocket server at `target` (ws://host:port). With
 * `allowMethods`, requests for any other method are answered by the relay with -32601 and never reach the server
 * (notifications for other methods are dropped).
 */
export async function startRelay(target: string, allowMethods?: string[]): Promise<Relay> {
  const allow = allowMethods ? new Set(allowMethods) : null;
  const { hostname, port } = new URL(target);
  const frames: Frame[] = [];
  const handshakes: string[] = [];
  const sockets = new Set<Socket>();
  const started = Date.now();
  let conns = 0;
  const server: Server = createServer((client) => {
    const conn = ++conns;
    const upstream = connect(Number(port), hostname);
    sockets.add(client);
    sockets.add(upstream);
    const record = (dir: Direction) => (opcode: number, payload: Buffer) => {
      const frame: Frame = { conn, dir, t: Date.now() - started, opcode };
      if (opcode === 1 || opcode === 2) {
        frame.text = payload.toString('utf8');
        try {
          frame.msg = JSON.parse(frame.text) as RpcMessage;
        } catch {}
      }
      frames.push(frame);
      const m = frame.msg;
      if (!allow || dir !== 'c2s' || !m?.method || allow.has(m.method)) return false;
      frame.byRelay = true;
      if (m.id !== undefined && m.id !== null) {
        const answer = {
          id: m.id,
          error: { code: -32601, message: `exec-server stub does not implement \`${m.method}\` yet` },
        };
        const text = JSON.stringify(answer);
        frames.push({
          conn,
          dir: 's2c',
          t: Date.now() - started,
          opcode: 1,
          text,
          msg: answer,
          byRelay: true,
        });
        client.write(textFrame(text));
      }
      return true;
    };
    const c2s = new FrameDecoder(record('c2s'), allow ? (b) => upstream.write(b) : undefined);
    const s2c = new FrameDecoder(record('s2c'), allow ? (b) => client.write(b) : undefined);
    let head = '';
    client.on('data', (d: Buffer) => {
      if (handshakes.length < conn) {
        head += d.toString('latin1');
        const end = head.indexOf('\r\n\r\n');
        if (end >= 0) handshakes.push(head.slice(0, end));
      }
      c2s.push(d);
      if (!allow) upstream.write(d);
    });
    upstream.on('data', (d: Buffer) => {
      s2c.push(d);
      if (!allow) client.write(d);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', end);
    upstream.on('close', end);
    client.on('error', end);
    upstream.on('error', end);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const addr = server.address() as AddressInfo;
  return {
    url: `ws://127.0.0.1:${addr.port}`,
    frames,
    handshakes,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Pairs each request with its response (by connection and id): the exchange a test asserts on. */
export interface Exchange {
  conn: number;
  id: number | string;
  method: string;
  params: unknown;
  result?: unknown;
  error?: { code: number; message: string };
}

export function exchanges(frames: Frame[]): Exchange[] {
  const out: Exchange[] = [];
  const open = new Map<string, Exchange>();
  for (const f of frames) {
    const m = f.msg;
    if (!m || m.id === undefined || m.id === null) continue;
    const key = `${f.conn}:${String(m.id)}`;
    if (f.dir === 'c2s' && m.method) {
      const ex: Exchange = { conn: f.conn, id: m.id, method: m.method, params: m.params };
      open.set(key, ex);
      out.push(ex);
    } else if (f.dir === 's2c') {
      const ex = open.get(key);
      if (!ex) continue;
      if ('result' in m) ex.result = m.result;
      if (m.error) ex.error = m.error;
      open.delete(key);
    }
  }
  return out;
}

/** Server-to-client notifications. */
export function notifications(frames: Frame[]): { method: string; params: unknown; t: number }[] {
  return frames
    .filter((f) => f.dir === 's2c' && f.msg?.method && (f.msg.id === undefined || f.msg.id === null))
    .map((f) => ({ method: f.msg!.method!, params: f.msg!.params, t: f.t }));
}
