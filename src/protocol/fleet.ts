/**
 * Wire shapes of a fleet host (a Corral host watching other Corral servers), for panel connections only:
 * `fleet/join {url, token?, headers?, name?}` → `{server}`, `fleet/leave {server}` → `{left}`, `fleet/list` →
 * `{servers}`. The joined servers' rows then arrive in the monitor feed tagged with their `server`, and the monitor and
 * approvals methods take a `server` to act on them. Pure: no Node imports, so the renderer imports these too.
 */
import { z } from 'zod';
import { MonitorServer } from './monitor.js';

/** Request headers a join may not set (the WebSocket handshake's own, and framing). */
export const RESERVED_JOIN_HEADERS = [
  'host',
  'connection',
  'upgrade',
  'content-length',
  'transfer-encoding',
  'te',
  'trailer',
  'keep-alive',
  'proxy-connection',
];

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const HeaderValue = z
  .string()
  .max(4096)
  .regex(/^[^\r\n\0]*$/, 'a header value cannot hold CR, LF or NUL');

export const JoinParams = z.object({
  /** ws://, wss://, http:// or https:// URL of the server; a `?token=` in it is taken as the credential. */
  url: z.string().min(1).max(2048),
  /** The server's panel credential (if not in the URL). */
  token: z.string().min(1).max(4096).nullish(),
  /** Extra headers of the upgrade, e.g. the agent-sandbox router's X-Sandbox-ID / X-Sandbox-Namespace. */
  headers: z
    .record(z.string(), HeaderValue)
    .superRefine((h, ctx) => {
      for (const name of Object.keys(h)) {
        if (!HEADER_NAME.test(name))
          ctx.addIssue({ code: 'custom', path: [name], message: 'not a header name' });
        else if (RESERVED_JOIN_HEADERS.includes(name.toLowerCase()) || /^sec-websocket-/i.test(name))
          ctx.addIssue({
            code: 'custom',
            path: [name],
            message: 'this header belongs to the WebSocket handshake',
          });
      }
    })
    .nullish(),
  /** What the panel calls it (default: X-Sandbox-ID, or host:port). */
  name: z.string().min(1).max(200).nullish(),
});
export type JoinParams = z.infer<typeof JoinParams>;
export const JoinResult = z.object({ server: MonitorServer });

export const LeaveParams = z.object({ server: z.string().min(1) });
export const LeaveResult = z.object({ left: z.boolean() });
export const ListResult = z.object({ servers: z.array(MonitorServer) });

/**
 * A join as typed on a command line: `URL`, and in its fragment (which no client sends) `token-file=PATH` (the
 * credential: never in the URL, since every local user can read a command line), `header=Name:Value` (repeatable)
 * and `name=NAME`. E.g. `ws://router:8080/#token-file=/run/pod-2&header=X-Sandbox-ID:pod-2`.
 */
export interface JoinText {
  url: string;
  tokenFile: string | null;
  headers: Record<string, string>;
  name: string | null;
}

export function parseJoinText(text: string): JoinText {
  const hash = text.indexOf('#');
  const base = hash < 0 ? text : text.slice(0, hash);
  const fragment = hash < 0 ? '' : text.slice(hash + 1);
  const out: JoinText = { url: base, tokenFile: null, headers: {}, name: null };
  for (const part of fragment.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const key = decodeURIComponent(eq < 0 ? part : part.slice(0, eq));
    const value = decodeURIComponent(eq < 0 ? '' : part.slice(eq + 1));
    if (key === 'header') {
      const colon = value.indexOf(':');
      if (colon <= 0) throw new Error(`header=${value}: expected Name:Value`);
      out.headers[value.slice(0, colon).trim()] = value.slice(colon + 1).trim();
    } else if (key === 'name') out.name = value;
    else if (key === 'token-file') out.tokenFile = value;
    else throw new Error(`unknown join option ${key} (header=, name=, token-file=)`);
  }
  return out;
}
