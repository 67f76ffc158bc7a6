// The method table (src/protocol/methods.ts) is what the host serves, and its `caller` is what the dispatch
// enforces: every method is served, nothing else is; every panel method refuses an agent, whatever its params; every
// method but the handshake refuses a connection that has not finished it; the panel may call every method.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import { METHODS, type MethodName } from '../../src/protocol/methods.js';
import { RpcClient } from '../helpers/client.js';

let host: Host;
before(async () => {
  host = await startHost({ resumeGraceMs: 0 });
});
after(() => host.shutdown());

const names = Object.keys(METHODS) as MethodName[];
const ws = (token: string) => `${host.listener.url}/?token=${token}`;

describe('method table', () => {
  test('the host serves exactly the methods of the table', () => {
    assert.deepEqual([...host.server.served()].sort(), [...names].sort());
  });

  test('every panel method refuses an agent with -32600 before it reads its params', async () => {
    const agent = await RpcClient.open(ws(host.tokens.agent), 'agent');
    try {
      for (const name of names.filter((n) => METHODS[n].caller === 'panel')) {
        const e = await agent.requestError(name, { not: 'valid params' });
        assert.equal(e.code, -32600, name);
        assert.match(e.message, /need a panel connection/, name);
      }
    } finally {
      agent.close();
    }
  });

  test('every method but the handshake needs initialize (and initialized) first', async () => {
    const c = await RpcClient.connect(ws(host.tokens.panel));
    try {
      for (const name of names.filter((n) => METHODS[n].caller !== 'handshake')) {
        const e = await c.requestError(name, {});
        assert.equal(e.code, -32600, name);
        assert.match(e.message, /^client must call initialize before using (exec|filesystem) methods$/, name);
      }
      await c.request('initialize', { clientName: 'half' });
      for (const name of names.filter((n) => METHODS[n].caller !== 'handshake')) {
        const e = await c.requestError(name, {});
        assert.match(e.message, /^client must send initialized before using/, name);
      }
      const again = await c.requestError('initialize', { clientName: 'twice' });
      assert.equal(again.message, 'initialize may only be sent once per connection');
    } finally {
      c.close();
    }
  });

  test('the panel passes every gate: what it gets wrong is its params, named by their struct', async () => {
    const panel = await RpcClient.open(ws(host.tokens.panel), 'panel');
    try {
      for (const name of names.filter((n) => METHODS[n].caller !== 'handshake')) {
        const spec = METHODS[name];
        if (spec.params.safeParse('not an object').success) continue; // reads no params
        const e = await panel.requestError(name, 'not an object');
        assert.equal(e.code, -32602, name);
        assert.equal(
          e.message,
          `invalid type: string "not an object", expected struct ${spec.paramsName}`,
          name,
        );
      }
    } finally {
      panel.close();
    }
  });
});
