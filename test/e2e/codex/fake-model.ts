/**
 * A scripted, offline stand-in for the OpenAI Responses API, for driving the released Codex CLI
 * (spec codex-clients.md §2). It listens on 127.0.0.1 and answers every `POST /v1/responses` with one SSE body:
 * `response.created`, one `response.output_item.done` (a tool call or the final message), `response.completed`.
 *
 * The script is turn-based: step N (1-based) uses call id `call_fake_N`, and the step to answer with is the one after
 * the highest N that already has a `*_call_output` in the request. Every tool output the CLI sends back is recorded.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync, inflateSync } from 'node:zlib';

/** What one model turn asks for. `write_stdin` steps may derive their arguments from earlier tool outputs. */
export type Step =
  | { kind: 'exec'; args: Record<string, unknown> }
  | { kind: 'write_stdin'; args: (outputs: ToolOutputs) => Record<string, unknown> }
  | { kind: 'patch'; input: string };

/** Tool outputs the CLI sent back, by call id (`call_fake_N`). */
export type ToolOutputs = Record<string, string>;

export type ScenarioName = 'basic' | 'tty' | 'poll' | 'patch' | 'full' | 'outside' | 'resume';

/** A line per ancestor: `ancestor <pid> <cmdline>`, for the first three ancestors of the command's shell. */
const ANCESTORS =
  'p=$$; for i in 1 2 3; do p=$(sed -n "s/^PPid:[[:space:]]*//p" /proc/$p/status); ' +
  '[ -n "$p" ] && [ "$p" != 0 ] || break; echo "ancestor $p $(tr "\\0" " " < /proc/$p/cmdline)"; done';

/** How many variables of the command's environment hold a `token=` (the exec-server URL's capability token). */
const TOKEN_VARS = `echo "token-vars $(env | grep -c 'token=')"`;

/** The command of the `basic` step. */
export const BASIC_CMD = `echo hello > out.txt && cat out.txt && ${ANCESTORS}; ${TOKEN_VARS}`;
export const PATCH_INPUT =
  '*** Begin Patch\n*** Add File: patched.txt\n+written by apply_patch\n*** End Patch\n';
export const OUTSIDE_CMD = 'echo x > ../outside.txt';
export const OUTSIDE_PATCH = '*** Begin Patch\n*** Add File: ../outside.txt\n+escaped\n*** End Patch\n';

/** The session id of a still-running unified-exec process, from the previous step's output. */
export function sessionIdFrom(outputs: ToolOutputs, callId: string): number {
  const text = outputs[callId] ?? '';
  const m = /session ID (\d+)/i.exec(text) ?? /"session_id"\s*:\s*(\d+)/.exec(text);
  if (!m) throw new Error(`no session id in the output of ${callId}: ${JSON.stringify(text).slice(0, 400)}`);
  return Number(m[1]);
}

/** The steps of a named scenario (spec codex-clients.md §2, plus `outside` for the sandbox-enforcement checks). */
export function scenarioSteps(name: ScenarioName): Step[] {
  const basic: Step[] = [{ kind: 'exec', args: { cmd: BASIC_CMD, yield_time_ms: 10000 } }];
  // Step numbers are assigned after concatenation, so `write_stdin` looks back at "the previous call".
  const tty = (): Step[] => [
    { kind: 'exec', args: { cmd: 'read line; echo "got:$line"', tty: true, yield_time_ms: 500 } },
    {
      kind: 'write_stdin',
      args: (o) => ({ session_id: sessionIdFrom(o, previousCall(o)), chars: 'hi\n', yield_time_ms: 2000 }),
    },
  ];
  const poll = (): Step[] => [
    { kind: 'exec', args: { cmd: 'echo early; sleep 2; echo late', yield_time_ms: 250 } },
    {
      kind: 'write_stdin',
      args: (o) => ({ session_id: sessionIdFrom(o, previousCall(o)), chars: '', yield_time_ms: 5000 }),
    },
  ];
  const patch: Step[] = [
    { kind: 'patch', input: PATCH_INPUT },
    { kind: 'exec', args: { cmd: 'cat patched.txt', yield_time_ms: 10000 } },
  ];
  switch (name) {
    case 'basic':
      return basic;
    case 'tty':
      return tty();
    case 'poll':
      return poll();
    case 'patch':
      return patch;
    case 'full':
      return [...basic, ...tty(), ...poll(), ...patch];
    case 'resume':
      // A process that outlives a dropped exec-server connection: `early` now, `late` after the drop (the rig drops
      // the connection before it answers step 2), then a poll that must still find the process and its output.
      return [
        { kind: 'exec', args: { cmd: 'echo early; sleep 4; echo late', yield_time_ms: 250 } },
        {
          kind: 'write_stdin',
          args: (o) => ({ session_id: sessionIdFrom(o, previousCall(o)), chars: '', yield_time_ms: 10000 }),
        },
      ];
    case 'outside':
      return [
        { kind: 'exec', args: { cmd: OUTSIDE_CMD, yield_time_ms: 10000 } },
        { kind: 'patch', input: OUTSIDE_PATCH },
        { kind: 'exec', args: { cmd: 'ls ../outside.txt; echo rc=$?', yield_time_ms: 10000 } },
      ];
  }
}

/** The call id of the highest-numbered recorded output. */
function previousCall(o: ToolOutputs): string {
  return `call_fake_${highestCall(Object.keys(o))}`;
}

function highestCall(callIds: Iterable<string>): number {
  let n = 0;
  for (const id of callIds) {
    const m = /^call_fake_(\d+)$/.exec(id);
    if (m) n = Math.max(n, Number(m[1]));
  }
  return n;
}

export interface FakeModelRequest {
  path: string;
  method: string;
  /** The step answered (1-based), or 0 for "not a responses request", or steps+1 for the final message. */
  step: number;
  tools: string[];
  model?: string;
}

export interface FakeModel {
  url: string;
  port: number;
  /** Every tool output the CLI sent back, by call id. */
  outputs: ToolOutputs;
  requests: FakeModelRequest[];
  /** Errors raised while scripting an answer (e.g. no session id): a test should fail on them. */
  errors: string[];
  close(): Promise<void>;
}

/** Serialises a tool output item's `output` (a string, or content items) into text. */
function outputText(output: unknown): string {
  if (typeof output === 'string') return output;
  if (Array.isArray(output)) {
    return output
      .map((c) => (c && typeof c === 'object' && 'text' in c ? String((c as { text: unknown }).text) : ''))
      .join('');
  }
  if (output && typeof output === 'object' && 'content' in output) {
    return outputText((output as { content: unknown }).content);
  }
  return JSON.stringify(output);
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  let buf = Buffer.concat(chunks);
  const enc = String(req.headers['content-encoding'] ?? '').toLowerCase();
  if (enc === 'gzip') buf = gunzipSync(buf);
  else if (enc === 'deflate') buf = inflateSync(buf);
  else if (enc && enc !== 'identity') throw new Error(`unsupported content-encoding ${enc}`);
  return buf.toString('utf8');
}

function sse(type: string, data: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
}

const USAGE = {
  input_tokens: 0,
  input_tokens_details: null,
  output_tokens: 0,
  output_tokens_details: null,
  total_tokens: 0,
};

/**
 * Starts the fake model with a script of steps; `finalText` is the assistant's closing message. `beforeStep(n)`, when
 * given, is awaited before step n is answered (the rig drops the exec-server's relay there).
 */
export async function startFakeModel(
  steps: Step[],
  finalText = 'done',
  beforeStep?: (n: number) => Promise<void>,
): Promise<FakeModel> {
  const outputs: ToolOutputs = {};
  const requests: FakeModelRequest[] = [];
  const errors: string[] = [];
  const server: Server = createServer((req, res) => {
    void (async () => {
      const path = (req.url ?? '').split('?')[0] ?? '';
      if (req.method !== 'POST' || !path.endsWith('/responses')) {
        requests.push({ path, method: req.method ?? '', step: 0, tools: [] });
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not found"}}');
        return;
      }
      let body: { input?: unknown[]; tools?: { name?: string; type?: string }[]; model?: string };
      try {
        body = JSON.parse(await readBody(req));
      } catch (e) {
        errors.push(`unparseable request: ${String(e)}`);
        res.writeHead(400).end();
        return;
      }
      for (const item of body.input ?? []) {
        const it = item as { type?: string; call_id?: string; output?: unknown };
        if (it.type?.endsWith('_call_output') && it.call_id) outputs[it.call_id] = outputText(it.output);
      }
      const done = highestCall(
        (body.input ?? [])
          .map((i) => i as { type?: string; call_id?: string })
          .filter((i) => i.type?.endsWith('_call_output'))
          .map((i) => i.call_id ?? ''),
      );
      const n = done + 1;
      const tools = (body.tools ?? []).map((t) => t.name ?? t.type ?? '?');
      requests.push({ path, method: 'POST', step: n, tools, model: body.model });
      if (beforeStep && !requests.slice(0, -1).some((r) => r.step === n)) await beforeStep(n);
      const step = steps[n - 1];
      let item: Record<string, unknown>;
      try {
        if (!step) {
          item = {
            type: 'message',
            role: 'assistant',
            id: `msg_${n}`,
            content: [{ type: 'output_text', text: finalText }],
          };
        } else if (step.kind === 'patch') {
          item = {
            type: 'custom_tool_call',
            call_id: `call_fake_${n}`,
            name: 'apply_patch',
            input: step.input,
          };
        } else {
          const args = step.kind === 'exec' ? step.args : step.args(outputs);
          item = {
            type: 'function_call',
            call_id: `call_fake_${n}`,
            name: step.kind === 'exec' ? 'exec_command' : 'write_stdin',
            arguments: JSON.stringify(args),
          };
        }
      } catch (e) {
        errors.push(`step ${n}: ${e instanceof Error ? e.message : String(e)}`);
        item = {
          type: 'message',
          role: 'assistant',
          id: `msg_${n}`,
          content: [{ type: 'output_text', text: `fake model error at step ${n}` }],
        };
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write(sse('response.created', { response: { id: `resp_${n}` } }));
      res.write(sse('response.output_item.done', { item }));
      res.end(sse('response.completed', { response: { id: `resp_${n}`, usage: USAGE } }));
    })().catch((e) => {
      errors.push(String(e));
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    outputs,
    requests,
    errors,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
