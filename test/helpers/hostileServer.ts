// A Corral server that is hostile, for the fleet host's tests: it answers the handshake and the few methods a fleet
// host calls, records what it receives (and the credential each connection presented), and sends whatever a test
// makes it send.
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import { emptySnapshot } from './monitorRows.js';
import { until } from './server.js';

export interface HostileServer {
  url: string;
  received: { method: string; params: unknown }[];
  sockets: WebSocket[];
  /** The `?token=` of each connection. */
  tokens: string[];
  /** What the host sent on `ws`, as text, in order. */
  framesOf(ws: WebSocket): string[];
  /** Sends to every open connection (a string as is, anything else as JSON). */
  send(msg: unknown): void;
  close(): Promise<void>;
}

/**
 * A joined server that is hostile: it answers the handshake, then tries what a malicious server could.
 */
export async function startHostileServer(
  /** Answers of its own, by method: a string is sent as the whole frame (`ID` replaced by the request's id). */
  answers: Record<string, (params: unknown) => string | { result: unknown }> = {},
): Promise<HostileServer> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((r) => wss.once('listening', r));
  const received: { method: string; params: unknown }[] = [];
  const sockets: WebSocket[] = [];
  const tokens: string[] = [];
  const frames = new WeakMap<WebSocket, string[]>();
  wss.on('connection', (ws, req) => {
    tokens.push(new URL(req.url ?? '/', 'http://x').searchParams.get('token') ?? '');
    sockets.push(ws);
    const mine: string[] = [];
    frames.set(ws, mine);
    ws.on('message', (data) => {
      mine.push(data.toString());
      const m = JSON.parse(data.toString()) as { id?: number; method: string; params: unknown };
      received.push({ method: m.method, params: m.params });
      if (m.id === undefined || m.method === undefined) return;
      const reply = (result: unknown) => ws.send(JSON.stringify({ id: m.id, result }));
      const own = answers[m.method];
      if (own) {
        const a = own(m.params);
        if (typeof a === 'string') ws.send(a.replace('ID', String(m.id)));
        else reply(a.result);
      } else if (m.method === 'initialize') reply({ sessionId: 'hostile' });
      else if (m.method === 'monitor/subscribe') {
        reply(emptySnapshot());
      } else if (m.method === 'approvals/subscribe')
        reply({ pending: [], decisions: [], audit: [], timeoutMs: 1000 });
      else if (m.method === 'monitor/terminate') reply({ running: true });
      else if (m.method === 'approvals/decide') reply({ released: 7 });
      else ws.send(JSON.stringify({ id: m.id, error: { code: -32601, message: 'no' } }));
    });
  });
  const { port } = wss.address() as AddressInfo;
  return {
    url: `ws://127.0.0.1:${port}/`,
    received,
    sockets,
    tokens,
    framesOf: (ws) => frames.get(ws) ?? [],
    send: (msg) => {
      for (const s of sockets)
        if (s.readyState === WebSocket.OPEN) s.send(typeof msg === 'string' ? msg : JSON.stringify(msg));
    },
    close: () =>
      new Promise((r) => {
        for (const s of sockets) s.terminate();
        wss.close(() => r());
      }),
  };
}

/** Once a fleet host has joined `evil` and subscribed to its approvals: the (newest) socket it did so on. */
export async function joinedSocket(evil: HostileServer): Promise<WebSocket> {
  await until(
    () =>
      evil.sockets.some(
        (s) =>
          s.readyState === WebSocket.OPEN && evil.framesOf(s).some((f) => f.includes('approvals/subscribe')),
      ),
    20_000,
    'the host joined the hostile server',
  );
  return evil.sockets.filter((s) => s.readyState === WebSocket.OPEN).at(-1)!;
}
