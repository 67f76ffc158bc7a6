/**
 * TLS interception's config through process/start (issue 34): a malformed hook is -32602 naming the member; a hook
 * whose secret the server's operator did not list is -32603 naming the hook.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RpcClient } from '../helpers/client.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

let ts: TestServer;
let c: RpcClient & { sessionId: string };
before(async () => {
  ts = await startTestServer();
  c = await ts.client('mitm-config');
});
after(() => ts.close());

const start = (processId: string, network: Record<string, unknown>) =>
  c.requestError('process/start', {
    processId,
    argv: ['/bin/true'],
    cwd: '/',
    env: {},
    tty: false,
    managedNetwork: { config: { network: { enabled: true, ...network } } },
  });

test('a hook with CR/LF in its prefix: -32602 naming mitm_hooks and the field', async () => {
  const e = await start('bad-hook', {
    mitm: true,
    mitm_hooks: [
      {
        host: 'a.test',
        actions: { inject_request_headers: [{ name: 'x', secret_env_var: 'S', prefix: 'a\r\nb' }] },
      },
    ],
  });
  assert.equal(e.code, -32602);
  assert.match(e.message, /mitm_hooks\.0\.actions\.inject_request_headers\.0\.prefix/);
});

test('a hook naming a server variable the operator did not list: -32603 naming the hook', async () => {
  const e = await start('unlisted', {
    mitm: true,
    mitm_hooks: [
      { host: 'a.test', actions: { inject_request_headers: [{ name: 'x', secret_env_var: 'HOME' }] } },
    ],
  });
  assert.equal(e.code, -32603);
  assert.match(
    e.message,
    /mitm_hooks\[0\]\.actions\.inject_request_headers\[0\]: secret_env_var HOME is not listed/,
  );
});
