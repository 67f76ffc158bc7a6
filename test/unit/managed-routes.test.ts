// The routes a managed-network sandbox gets to its command's proxy (src/sandbox/linux/managedNet.ts
// planManagedRoutes): the server's own proxy handed over as a structured value (ProxyRoute) gives exactly the
// variables and endpoints that reading them back from the environment gave, and its endpoints carry `accept`, so an
// in-namespace connection is handed to the proxy instead of dialled.
import assert from 'node:assert/strict';
import type net from 'node:net';
import { test } from 'node:test';
import { applyProxyEnv, buildProxyEnv } from '../../src/network/env.js';
import type { ProxyRoute } from '../../src/network/proxy.js';
import { planManagedRoutes } from '../../src/sandbox/linux/managedNet.js';

function route(http: number, socks: number | undefined, handed: string[]): ProxyRoute {
  const listener = (port: number, name: string) => ({
    port,
    accept: (_s: net.Socket) => {
      handed.push(name);
    },
  });
  return {
    http: listener(http, 'http'),
    ...(socks !== undefined ? { socks: listener(socks, 'socks') } : {}),
    env: (p) => buildProxyEnv({ httpPort: p.http, socksPort: p.socks, allowLocalBinding: true }),
  };
}

test('the structured route gives the variables and endpoints the environment gave, with accept on each', () => {
  for (const socks of [undefined, 40002]) {
    for (const forward of [true, false]) {
      const proxyEnv = buildProxyEnv({ httpPort: 40001, socksPort: socks, allowLocalBinding: true });
      const env = applyProxyEnv({ PATH: '/bin', Http_Proxy: 'http://127.0.0.1:9' }, { env: proxyEnv });
      const handed: string[] = [];
      const structured = planManagedRoutes(env, forward, route(40001, socks, handed));
      const fromEnv = planManagedRoutes(env, forward);
      assert.deepEqual(structured.env, fromEnv.env, `socks ${socks}, forward ${forward}`);
      assert.deepEqual(
        structured.endpoints.map((e) => [e.host, e.port]),
        fromEnv.endpoints.map((e) => [e.host, e.port]),
      );
      assert.ok(
        fromEnv.endpoints.every((e) => e.accept === undefined),
        'a proxy found in the variables is dialled',
      );
      for (const e of structured.endpoints) e.accept!({} as net.Socket);
      assert.deepEqual(handed, socks === undefined ? ['http'] : ['socks', 'http']);
    }
  }
});

test('with the structured route, a proxy variable the command brought cannot point the child elsewhere', () => {
  const env = { PATH: '/bin', HTTP_PROXY: 'http://127.0.0.1:9', ALL_PROXY: 'socks5h://127.0.0.1:8' };
  const r = planManagedRoutes(env, true, route(40001, undefined, []));
  assert.equal(r.env.HTTP_PROXY, 'http://127.0.0.1:3128');
  assert.equal(r.env.ALL_PROXY, 'http://127.0.0.1:3128');
  assert.deepEqual(
    r.endpoints.map((e) => e.port),
    [40001],
  );
});
