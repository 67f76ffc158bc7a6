// What a hostile peer sends to an inbound JSON parser (issue 30 item 3): deep, wide, huge and malformed JSON, and
// the checks that a server is still alive, still serves, and stayed within a memory ceiling afterwards.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { RpcClient } from './client.js';
import { shellStart } from './registry-contract.js';

export interface HostilePayload {
  name: string;
  /** The text (a string) or raw bytes (invalid UTF-8). */
  data: string | Buffer;
}

const nestedArrays = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
const nestedObjects = (n: number) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;
const request = (method: string, params: string, id: string | number = 1) =>
  `{"id":${JSON.stringify(id)},"method":${JSON.stringify(method)},"params":${params}}`;

/** A normal request (or with `notification`, a notification) with each wrong value in place of each field in turn. */
export function wrongTypes(
  method: string,
  params: Record<string, unknown>,
  notification = false,
): HostilePayload[] {
  const values: unknown[] = [null, true, -1, 1.5, 1e308, '', 'x', [], {}, [[[{}]]], { __proto__: 1 }];
  const out: HostilePayload[] = [];
  for (const field of Object.keys(params))
    for (const v of values)
      out.push({
        name: `${method} ${field}=${JSON.stringify(v)}`,
        data: notification
          ? JSON.stringify({ method, params: { ...params, [field]: v } })
          : request(method, JSON.stringify({ ...params, [field]: v })),
      });
  return out;
}

/**
 * The corpus: every JSON-RPC inbound parser gets all of it. `methods`: requests whose fields are each given every
 * wrong type (the methods that connection may call).
 */
export function hostileCorpus(methods: Record<string, Record<string, unknown>>): HostilePayload[] {
  const wide1m = `[${'0,'.repeat(1_000_000)}0]`;
  const keys100k = `{${Array.from({ length: 100_000 }, (_, i) => `"k${i}":0`).join(',')}}`;
  const out: HostilePayload[] = [
    { name: '100k nested arrays', data: nestedArrays(100_000) },
    { name: '100k nested objects', data: nestedObjects(100_000) },
    { name: '100k nested arrays in params', data: request('initialize', nestedArrays(100_000)) },
    { name: '100k nested objects in params', data: request('process/start', nestedObjects(100_000)) },
    { name: '65 nested arrays in a request', data: request('process/read', nestedArrays(65)) },
    { name: '1M-element array in params', data: request('initialize', `{"clientName":"x","x":${wide1m}}`) },
    { name: '100k keys in params', data: request('process/start', keys100k) },
    {
      name: '100k keys as env',
      data: request(
        'process/start',
        `{"processId":"p","argv":["true"],"cwd":"/","env":${keys100k.replaceAll(':0', ':"v"')},"tty":false}`,
      ),
    },
    { name: 'empty', data: '' },
    { name: 'truncated', data: '{"id":1,"method":"initialize","params":{"clientName":"x"' },
    { name: 'truncated string', data: '{"id":1,"method":"init' },
    { name: 'trailing garbage', data: '{"id":1,"method":"x"} {}' },
    {
      name: 'invalid UTF-8',
      data: Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0xc0, 0x80, 0x22, 0x3a, 0x31, 0x7d]),
    },
    { name: 'lone surrogate in method', data: request('\ud800', '{}') },
    {
      name: 'escaped lone surrogates',
      data: '{"id":1,"method":"\\udc00\\ud800","params":{"clientName":"\\ud800"}}',
    },
    { name: 'NaN', data: '{"id":NaN,"method":"initialize"}' },
    {
      name: 'Infinity',
      data: '{"id":1,"method":"process/read","params":{"processId":"p","afterSeq":Infinity}}',
    },
    {
      name: '1e999',
      data: '{"id":1e999,"method":"process/read","params":{"processId":"p","afterSeq":1e999}}',
    },
    {
      name: '-0 and huge ints',
      data: '{"id":-0,"method":"process/read","params":{"processId":"p","afterSeq":123456789012345678901234567890}}',
    },
    {
      name: 'duplicate keys',
      data: '{"id":1,"id":"2","method":"initialize","method":"process/start","params":{}}',
    },
    {
      name: '__proto__ keys',
      data: '{"__proto__":{"polluted":1},"id":1,"method":"process/start","params":{"__proto__":{"argv":["x"]},"constructor":{"prototype":{"polluted":1}}}}',
    },
    { name: 'an array message', data: '[{"id":1,"method":"initialize"}]' },
    { name: 'a number message', data: '12' },
    { name: 'null', data: 'null' },
    { name: 'a response to nothing', data: '{"id":987654,"result":{}}' },
    { name: 'an error to nothing', data: '{"id":987654,"error":{"code":{},"message":[]}}' },
    { name: 'unknown notification', data: '{"method":"x/y","params":[]}' },
    {
      name: 'brackets in strings',
      data: `{"id":1,"method":"initialize","params":{"clientName":${JSON.stringify('['.repeat(200_000))}}}`,
    },
    {
      name: 'escaped quotes',
      data: `{"id":1,"method":"initialize","params":{"clientName":"\\\\\\"[[[[${'['.repeat(100)}"}}`,
    },
  ];
  for (const [method, params] of Object.entries(methods)) out.push(...wrongTypes(method, params));
  return out;
}

/** The resident memory of process `pid` (bytes). */
export function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? 0) * 1024;
}

/** Starts `echo <word>` on `c` and reads it to its exit: the server still serves its agents. */
export async function stillServes(c: RpcClient, word: string): Promise<void> {
  await c.request('process/start', shellStart(word, `echo ${word}`, '/tmp'));
  let out = '';
  let afterSeq = 0;
  for (;;) {
    const r = await c.request<{
      chunks: { seq: number; chunk: string }[];
      nextSeq: number;
      exited: boolean;
      closed: boolean;
    }>('process/read', { processId: word, afterSeq, waitMs: 2000 });
    for (const ch of r.chunks) out += Buffer.from(ch.chunk, 'base64').toString();
    afterSeq = r.nextSeq > 0 ? r.nextSeq - 1 : afterSeq;
    if (r.closed) break;
  }
  assert.equal(out.trim(), word);
}

/** One peer of a parser under test: sends text (or raw bytes as a text frame), collects what comes back. */
export interface Peer {
  send(data: string | Buffer): void;
  /** Every message received, in order. */
  readonly frames: string[];
  readonly closed: boolean;
  close?(): void;
}

export interface Fed {
  name: string;
  /** What came back before the probe's answer (or the close). */
  answers: string[];
  closed: boolean;
}

/**
 * Feeds each payload to a peer (a new one from `open` whenever the last was closed), each followed by a probe
 * request (`{"id":"probe-N","method":"probe/none"}`) whose answer says the payload was handled; a peer that closes
 * instead is also an outcome (a protocol violation, a message too big). Nothing may go unanswered: each probe is
 * answered or the peer closes within `timeoutMs`.
 */
export async function feed(
  open: () => Promise<Peer>,
  corpus: HostilePayload[],
  timeoutMs = 20_000,
): Promise<Fed[]> {
  const out: Fed[] = [];
  let peer: Peer | null = null;
  let n = 0;
  for (const p of corpus) {
    if (!peer || peer.closed) peer = await open();
    const current: Peer = peer;
    const from = current.frames.length;
    const probe = `probe-${++n}`;
    current.send(p.data);
    current.send(`{"id":"${probe}","method":"probe/none"}`);
    const deadline = Date.now() + timeoutMs;
    const answered = () => current.frames.slice(from).some((f) => f.includes(`"${probe}"`));
    while (!answered() && !current.closed) {
      if (Date.now() > deadline) throw new Error(`${p.name}: neither answered nor closed in ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 5));
    }
    out.push({
      name: p.name,
      answers: current.frames.slice(from).filter((f) => !f.includes(`"${probe}"`)),
      closed: current.closed,
    });
  }
  return out;
}

/** The answers to the payloads that break a bound name it (a parse error naming the depth or the count). */
export function assertBoundsNamed(fed: Fed[]): void {
  for (const f of fed) {
    if (!/nested (arrays|objects)/.test(f.name) || f.name.startsWith('65')) continue;
    assert.ok(
      f.closed || f.answers.some((a) => /nesting deeper than 64 levels/.test(a)),
      `${f.name}: ${f.answers.join(' ').slice(0, 300)}`,
    );
  }
  const at65 = fed.find((f) => f.name.startsWith('65'));
  if (at65) assert.ok(at65.closed || at65.answers.some((a) => /nesting deeper than 64/.test(a)), at65.name);
}
