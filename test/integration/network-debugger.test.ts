/**
 * The policy debugger (`policy/checkUrl`) says what the proxy does: each target goes to the debugger and, with the
 * same config, to a real proxy as a client would send it (a URL as an absolute-form GET or the given method, an
 * `https://` URL or `host:443` as a CONNECT), and the two verdicts must be the same — allow, the block reason, or
 * "invalid" (the proxy's 400).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Monitor } from '../../src/server/monitor/monitor.js';
import { servePanel } from '../../src/server/monitor/panel.js';
import type { RpcClient } from '../helpers/client.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { type ProxyFixture, RawClient, startOrigin, startProxy, stubResolver } from './network-helpers.js';

let ts: TestServer;
let monitor: Monitor;
let panel: RpcClient;
let origin: Awaited<ReturnType<typeof startOrigin>>;

before(async () => {
  ts = await startTestServer({ tokens: true });
  monitor = servePanel(ts.server, { resolver: stubResolver });
  panel = await ts.panel();
  origin = await startOrigin();
});

after(async () => {
  panel.close();
  monitor.dispose();
  await ts.close();
  await origin.close();
});

async function debuggerSays(
  network: Record<string, unknown>,
  target: string,
  method?: string,
): Promise<string> {
  const r = (await panel.request('policy/checkUrl', {
    config: { network: { enabled: true, ...network } },
    target,
    ...(method ? { method } : {}),
  })) as { valid: boolean; decision: string | null; reason: string | null };
  if (!r.valid) return 'invalid';
  return r.decision === 'allow' ? 'allow' : `${r.decision} ${r.reason}`;
}

async function proxySays(fx: ProxyFixture, target: string, method?: string): Promise<string> {
  const connect =
    (method ?? (/^https:/i.test(target) || /:443$/.test(target) ? 'CONNECT' : 'GET')) === 'CONNECT';
  let line = `${method ?? 'GET'} ${target} HTTP/1.1\r\n`;
  if (connect) {
    // An https:// URL reaches the proxy as a CONNECT to its authority (443 when it names no port).
    let authority = target.replace(/^https:\/\/([^/?#]*).*$/i, '$1').replace(/^.*@/, '');
    if (!/:[0-9]+$/.test(authority)) authority += ':443';
    line = `CONNECT ${authority} HTTP/1.1\r\n`;
  }
  const before = fx.blocked.length;
  const c = await RawClient.open(fx.proxy.httpPort);
  try {
    c.write(`${line}content-length: 0\r\n\r\n`);
    const res = await c.readResponse();
    if (res.status === 400) return 'invalid';
    if (res.status === 403) {
      const event = fx.blocked[before];
      assert.ok(event, `a 403 for ${target} records its block`);
      return `${event.record.decision} ${event.record.reason}`;
    }
    return 'allow';
  } finally {
    c.close();
  }
}

const P = () => origin.port;
const CASES: [string, Record<string, unknown>, () => string, string?][] = [
  ['allowed localhost', { domains: { localhost: 'allow' } }, () => `http://localhost:${P()}/x`],
  ['loopback literal', { domains: { localhost: 'allow' } }, () => `http://127.0.0.1:${P()}/`],
  ['IPv6 loopback', { domains: { localhost: 'allow' } }, () => `http://[::1]:${P()}/`],
  [
    'userinfo is not the host',
    { domains: { localhost: 'allow' } },
    () => `http://evil.test@localhost:${P()}/`,
  ],
  [
    'denied, case and dot',
    { domains: { 'evil.test': 'deny', localhost: 'allow' } },
    () => 'http://EVIL.TEST./',
  ],
  [
    'percent-encoded host: the proxy refuses it, it does not decode it',
    { domains: { 'evil.test': 'deny', '*': 'allow' } },
    () => 'http://evil%2etest/',
  ],
  [
    'a backslash in the authority',
    { allow_local_binding: true, domains: { localhost: 'allow' } },
    () => `http://evil.test\\@localhost:${P()}/`,
  ],
  ['non-ASCII host', { domains: { '*': 'allow' } }, () => 'http://b\u00fccher.test/'],
  [
    'T9 shorthand',
    { allow_local_binding: true, domains: { '*': 'allow', '127.0.0.1': 'deny' } },
    () => 'http://127.1/',
  ],
  ['not listed', { domains: { localhost: 'allow' } }, () => 'http://not-listed.test/'],
  [
    'limited POST',
    { mode: 'limited', domains: { localhost: 'allow' } },
    () => `http://localhost:${P()}/`,
    'POST',
  ],
  ['limited GET', { mode: 'limited', domains: { localhost: 'allow' } }, () => `http://localhost:${P()}/`],
  [
    'limited https URL: CONNECT',
    { mode: 'limited', domains: { localhost: 'allow' } },
    () => 'https://localhost/',
  ],
  ['CONNECT host:443', { domains: { 'evil.test': 'deny' } }, () => 'evil.test:443'],
  ['CONNECT allowed', { domains: { localhost: 'allow' } }, () => `https://localhost:${P()}/`],
];

test('policy/checkUrl and the proxy give the same verdict for the same target', async () => {
  for (const [label, network, target, method] of CASES) {
    const fx = await startProxy(network);
    try {
      const t = target();
      assert.equal(await debuggerSays(network, t, method), await proxySays(fx, t, method), `${label}: ${t}`);
    } finally {
      await fx.close();
    }
  }
});
