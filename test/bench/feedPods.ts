/**
 * Stand-in pods for the fleet bench's second question: can the fleet host and the panel carry the feed the issue asks
 * for (8 pods × 500 processes/s), which two cores cannot produce with real commands (an exec alone costs ~0.5 ms of
 * CPU here)? Each stand-in is a WebSocket server that a real `corral serve --join` links to: it answers the handshake,
 * `monitor/subscribe` and `approvals/subscribe` as a Corral server does, `/readyz` over HTTP, and then sends
 * `monitor/batch`es every 25 ms (a server's batch interval) carrying processes that start at the asked rate and close
 * 2 ms later (one row if both fall in one batch, as the real feed coalesces). The rows are real rows: taken from a
 * real Corral server by the bench, only their ids and times changed. Nothing else of a server is simulated: what the
 * rows measure is the fleet host's relay and the page.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import type { MonitorAudit, MonitorBlocked, MonitorProcess } from '../../src/protocol/monitor.js';
import { emptySnapshot } from '../helpers/monitorRows.js';
import { Agent, type Serve, type Timing } from './panelDriver.js';

export const BATCH_MS = 25;
const LIFE_MS = 2;

export interface FeedPod {
  /** ws://127.0.0.1:PORT/ */
  readonly url: string;
  /** Resolves once a fleet host subscribed to this pod's monitor feed. */
  readonly subscribed: Promise<void>;
  /**
   * Starts `total` processes at `rate`/s (ids `${prefix}${i}`), batched every 25 ms; resolves with when each started
   * and closed (by this pod's clock, the bench's) once the last closed row was sent.
   */
  run(opts: { total: number; rate: number; prefix: string }): Promise<Timing[]>;
  /**
   * Sends `total` network events at `rate`/s, batched every 25 ms: half blocked requests, half policy decisions of its
   * proxies (as a proxy flood would), for 40 hosts under `.invalid` (names only: nothing is dialled).
   */
  runNetwork(opts: { total: number; rate: number }): Promise<void>;
  /**
   * Asks `total` network approvals at `rate`/s (a prompt each, with its audit event), each answered (denied) 100 ms
   * later: the prompt stack over every view, under a burst of prompts.
   */
  runApprovals(opts: { total: number; rate: number }): Promise<void>;
  close(): Promise<void>;
}

interface Live {
  row: MonitorProcess;
  closeAt: number;
}

/** A stand-in pod whose rows are copies of `template` (a closed process row of a real server). */
export async function startFeedPod(template: MonitorProcess, sessionId: string): Promise<FeedPod> {
  const http: Server = createServer((req, res) => {
    res.writeHead(req.url === '/readyz' || req.url === '/healthz' ? 200 : 404, {
      'content-type': 'application/json',
    });
    res.end('{"status":"ok"}');
  });
  const wss = new WebSocketServer({ server: http, perMessageDeflate: false });
  let host: WebSocket | null = null;
  let onSubscribed: () => void = () => {};
  const subscribed = new Promise<void>((r) => {
    onSubscribed = r;
  });
  wss.on('connection', (ws) => {
    ws.on('message', (data: Buffer) => {
      const m = JSON.parse(data.toString()) as { id?: number; method: string };
      if (m.id === undefined) return;
      const reply = (result: unknown) => ws.send(JSON.stringify({ id: m.id, result }));
      if (m.method === 'initialize') reply({ sessionId: 'fleet-host-session' });
      else if (m.method === 'monitor/subscribe') {
        reply(emptySnapshot());
        host = ws;
        onSubscribed();
      } else if (m.method === 'approvals/subscribe')
        reply({ pending: [], decisions: [], audit: [], timeoutMs: 60_000 });
      else
        ws.send(
          JSON.stringify({ id: m.id, error: { code: -32601, message: `not in a stand-in: ${m.method}` } }),
        );
    });
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const { port } = http.address() as AddressInfo;

  const row = (processId: string, startedAt: number, closed: boolean): MonitorProcess => ({
    ...template,
    sessionId,
    processId,
    pid: 100_000 + (startedAt % 100_000),
    state: closed ? 'closed' : 'running',
    exitCode: closed ? 0 : null,
    startedAt,
    exitedAt: closed ? startedAt + LIFE_MS : null,
    closedAt: closed ? startedAt + LIFE_MS : null,
  });

  let networkId = 0;
  return {
    url: `ws://127.0.0.1:${port}/`,
    subscribed,
    run({ total, rate, prefix }) {
      return new Promise((resolve) => {
        const t0 = Date.now();
        const timings: Timing[] = [];
        const live: Live[] = [];
        let started = 0;
        const tick = () => {
          const now = Date.now();
          const processes: MonitorProcess[] = [];
          // Those that closed since the last batch (sent running before).
          while (live.length > 0 && live[0]!.closeAt <= now) {
            const l = live.shift()!;
            processes.push({
              ...l.row,
              state: 'closed',
              exitCode: 0,
              exitedAt: l.closeAt,
              closedAt: l.closeAt,
            });
          }
          const due = Math.min(total, Math.floor(((now - t0) / 1000) * rate) + 1);
          for (; started < due; started++) {
            const at = Math.round(t0 + (started * 1000) / rate);
            const id = `${prefix}${started}`;
            timings.push({ processId: id, started: at, closed: at + LIFE_MS });
            if (at + LIFE_MS <= now) processes.push(row(id, at, true));
            else {
              const r = row(id, at, false);
              processes.push(r);
              live.push({ row: r, closeAt: at + LIFE_MS });
            }
          }
          if (processes.length > 0)
            host?.send(JSON.stringify({ method: 'monitor/batch', params: { processes, serverTime: now } }));
          if (started >= total && live.length === 0) {
            clearInterval(timer);
            resolve(timings);
          }
        };
        const timer = setInterval(tick, BATCH_MS);
      });
    },
    runNetwork({ total, rate }) {
      return new Promise((resolve) => {
        const t0 = Date.now();
        let sent = 0;
        const tick = () => {
          const now = Date.now();
          const blocked: MonitorBlocked[] = [];
          const audit: MonitorAudit[] = [];
          const due = Math.min(total, Math.floor(((now - t0) / 1000) * rate) + 1);
          for (; sent < due; sent++) {
            const target = `host-${sent % 40}.invalid`;
            const processId = `net-${sent % 64}`;
            if (sent % 2 === 0)
              blocked.push({
                id: ++networkId,
                processId,
                sessionId,
                host: target,
                port: 443,
                reason: 'not_allowed',
                method: 'CONNECT',
                protocol: 'http-connect',
                mode: 'full',
                decision: 'deny',
                source: 'baseline_policy',
                client: null,
                timestamp: now / 1000,
                blockedTotal: networkId,
              });
            else
              audit.push({
                id: ++networkId,
                processId,
                sessionId,
                host: target,
                port: 443,
                decision: sent % 4 === 1 ? 'allow' : 'deny',
                reason: sent % 4 === 1 ? 'allowed' : 'not_allowed',
                source: 'baseline_policy',
                protocol: 'http-connect',
                method: 'CONNECT',
                scope: 'domain',
                override: false,
                timestamp: new Date(now).toISOString(),
                metadata: { 'conversation.id': 'bench' },
              });
          }
          if (blocked.length + audit.length > 0)
            host?.send(
              JSON.stringify({ method: 'monitor/batch', params: { blocked, audit, serverTime: now } }),
            );
          if (sent >= total) {
            clearInterval(timer);
            resolve();
          }
        };
        const timer = setInterval(tick, BATCH_MS);
      });
    },
    runApprovals({ total, rate }) {
      return new Promise((resolve) => {
        const t0 = Date.now();
        let asked = 0;
        let seq = 0;
        const open: { id: string; at: number; processId: string; host: string }[] = [];
        const send = (method: string, params: unknown) => host?.send(JSON.stringify({ method, params }));
        const event = (kind: 'requested' | 'decided', o: (typeof open)[number], now: number) => ({
          seq: ++seq,
          timestamp: now,
          kind,
          promptId: o.id,
          decisionId: null,
          decision: kind === 'decided' ? 'deny' : null,
          sessionId,
          processId: o.processId,
          command: ['/bin/true'],
          host: o.host,
          port: 443,
          protocol: 'https_connect',
          method: 'CONNECT',
          released: kind === 'decided' ? 1 : 0,
          note: null,
          decidedBy:
            kind === 'decided' ? { kind: 'panel', credential: 'panel-token', clientName: null } : null,
        });
        const tick = () => {
          const now = Date.now();
          while (open.length > 0 && open[0]!.at + 100 <= now) {
            const o = open.shift()!;
            send('approvals/resolved', { id: o.id, outcome: 'deny', released: 1, resolvedAt: now });
            send('approvals/audit', { event: event('decided', o, now) });
          }
          const due = Math.min(total, Math.floor(((now - t0) / 1000) * rate) + 1);
          for (; asked < due; asked++) {
            const o = {
              id: `prompt-${asked}`,
              at: now,
              processId: `ask-${asked % 16}`,
              host: `ask-${asked % 8}.invalid`,
            };
            open.push(o);
            send('approvals/requested', {
              prompt: {
                id: o.id,
                sessionId,
                processId: o.processId,
                clientName: 'agent-pod',
                command: ['/bin/true'],
                cwd: '/tmp',
                host: o.host,
                port: 443,
                protocol: 'https_connect',
                method: 'CONNECT',
                waiting: 1,
                requestedAt: now,
                expiresAt: now + 60_000,
                timeoutMs: 60_000,
                requestedTimeoutMs: null,
              },
            });
            send('approvals/audit', { event: event('requested', o, now) });
          }
          if (asked >= total && open.length === 0) {
            clearInterval(timer);
            resolve();
          }
        };
        const timer = setInterval(tick, BATCH_MS);
      });
    },
    async close() {
      for (const c of wss.clients) c.terminate();
      await new Promise<void>((r) => wss.close(() => r()));
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}

/** A real row: one `/bin/true` run on the host `serve`, as its monitor feed describes it once closed. */
export async function realRow(serve: Serve): Promise<MonitorProcess> {
  const agent = await Agent.open(serve.execUrl, 'agent-template');
  try {
    await agent.run('template-0');
  } finally {
    agent.close();
  }
  const u = new URL(serve.panelUrl);
  const token = new URLSearchParams(u.hash.slice(1)).get('token') ?? '';
  const ws = new WebSocket(`ws://${u.host}/?token=${encodeURIComponent(token)}`, {
    perMessageDeflate: false,
  });
  try {
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    const answers = new Map<number, (r: unknown) => void>();
    ws.on('message', (d: Buffer) => {
      const m = JSON.parse(d.toString()) as { id?: number; result?: unknown };
      if (typeof m.id === 'number') answers.get(m.id)?.(m.result);
    });
    let id = 0;
    const request = (method: string, params: unknown) =>
      new Promise<unknown>((r) => {
        answers.set(++id, r);
        ws.send(JSON.stringify({ id, method, params }));
      });
    await request('initialize', { clientName: 'bench-template' });
    ws.send('{"method":"initialized","params":{}}');
    const snap = (await request('monitor/subscribe', { output: 'followed' })) as {
      processes: MonitorProcess[];
    };
    const row = snap.processes.find((p) => p.processId === 'template-0' && p.state === 'closed');
    if (!row) throw new Error('the host did not describe its template process');
    return row;
  } finally {
    ws.close();
  }
}
