// End to end: process/start with a seed managedNetwork; the child curls through its proxy; blocks reach the bus.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import type { Dialer } from '../../src/network/dial.js';
import { NetworkEvents } from '../../src/network/events.js';
import { defaultDialer } from '../../src/network/proxy.js';
import type { BlockedEvent, NetworkAuditEvent } from '../../src/protocol/network.js';
import { startTestServer } from '../helpers/server.js';
import { startOrigin, stubResolver } from './network-helpers.js';

const CURL = '/usr/bin/curl';

test('process/start with managedNetwork: curl through the proxy, allowed and denied; the env is overwritten', {
  skip: existsSync(CURL) ? false : 'curl is not installed',
}, async () => {
  const origin = await startOrigin();
  const events = new NetworkEvents();
  const blocked: BlockedEvent[] = [];
  const audits: NetworkAuditEvent[] = [];
  events.on('blocked', (e) => blocked.push(e));
  events.on('audit', (e) => audits.push(e));
  const offMachine: string[] = [];
  const dialer: Dialer = (t) => {
    if (!/^127\./.test(t.host)) {
      offMachine.push(t.host);
      return Promise.reject(new Error('non-loopback dial refused by the test'));
    }
    return defaultDialer(t);
  };
  const ts = await startTestServer({ launcher: { networkEvents: events, resolver: stubResolver, dialer } });
  const c = await ts.client();
  try {
    const P = origin.port;
    // The seed NO_PROXY list exempts localhost and 127.0.0.1, so curl is told to ignore it and use HTTP_PROXY.
    const script = [
      `curl --noproxy '' -s -o /dev/null -w 'allowed=%{http_code}\\n' http://localhost:${P}/ok`,
      `curl --noproxy '' -s -w '\\ndenied=%{http_code}\\n' http://127.0.0.1:${P}/no`,
      'echo "proxy=$HTTP_PROXY"',
    ].join('; ');
    await c.request('process/start', {
      processId: 'net-e2e',
      argv: ['/bin/sh', '-c', script],
      cwd: '/tmp',
      env: { PATH: '/usr/bin:/bin', HTTP_PROXY: 'http://stale:1', http_proxy: 'http://stale:1' },
      tty: false,
      arg0: null,
      managedNetwork: {
        config: { network: { enabled: true, domains: { localhost: 'allow' } } },
        constraints: { allowLocalBinding: false },
        auditMetadata: { conversationId: 'conv-e2e' },
      },
    });
    await c.collect('net-e2e', 20_000);
    const out = c.output('net-e2e', 'stdout');
    assert.match(out, /allowed=200/);
    assert.match(out, /denied=403/);
    assert.match(out, /"reason":"not_allowed_local"/);
    const proxyUrl = /proxy=(\S+)/.exec(out)?.[1];
    assert.match(proxyUrl ?? '', /^http:\/\/127\.0\.0\.1:\d+$/, 'the stale HTTP_PROXY was overwritten');
    assert.ok(origin.requests.some((r) => r.url === '/ok'));
    assert.ok(!origin.requests.some((r) => r.url === '/no'));
    assert.equal(blocked.length, 1);
    assert.equal(blocked[0]!.processId, 'net-e2e');
    assert.equal(blocked[0]!.record.host, '127.0.0.1');
    assert.equal(blocked[0]!.record.reason, 'not_allowed_local');
    assert.ok(
      audits.some((a) => a['network.policy.decision'] === 'allow' && a['conversation.id'] === 'conv-e2e'),
    );
    assert.deepEqual(offMachine, []);
    // The proxy goes away with the process.
    const port = Number(proxyUrl!.split(':').at(-1));
    const net = await import('node:net');
    await new Promise<void>((resolve, reject) => {
      const tryOnce = () => {
        const s = net.connect(port, '127.0.0.1');
        s.on('connect', () => {
          s.destroy();
          setTimeout(tryOnce, 20);
        });
        s.on('error', (e: NodeJS.ErrnoException) => (e.code === 'ECONNREFUSED' ? resolve() : reject(e)));
      };
      tryOnce();
    });
  } finally {
    c.close();
    await ts.close();
    await origin.close();
  }
});

test("process/start with a managed network config the seed cannot build → -32603 in the seed's words (issue 33)", async () => {
  const ts = await startTestServer({ launcher: { resolver: stubResolver } });
  const c = await ts.client();
  try {
    const e = await c.requestError('process/start', {
      processId: 'bad-net',
      argv: ['/bin/true'],
      cwd: '/tmp',
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      arg0: null,
      managedNetwork: { config: { network: { enabled: true, domains: { '*': 'deny' } } } },
    });
    assert.equal(e.code, -32603);
    assert.equal(
      e.message,
      'invalid managed network config: invalid value for network.denied_domains: * (allowed exact hosts or scoped wildcards like *.example.com or **.example.com)',
    );
  } finally {
    c.close();
    await ts.close();
  }
});
