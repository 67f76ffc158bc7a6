// issue 33, item 3: the seed's central combination under the Landlock backend (useLegacyLandlock: true: containers and
// CI without user namespaces). The server's own `managedNetwork` proxy with `enforceManagedNetwork: true`, pipes and
// PTY: an allowed loopback origin gets 200 through the proxy, a loopback literal not on the list 403
// `not_allowed_local` from the proxy, a direct connect to the origin (another port than the proxy's) is refused and
// the origin sees nothing. On cca01b7 the start was refused (Landlock's port rules would have opened the proxy's
// port on every host); now every connect() goes to the server's connect supervisor (src/platform/native/netnotify.c).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { netNotifyAbsence, netNotifyCounts } from '../../src/platform/netNotify.js';
import { landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import type { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { startTestServer, type TestServer, until } from '../helpers/server.js';
import { centralStart, type Fixture, fixture } from './sandbox-util.js';

const CURL = '/usr/bin/curl';
const skip =
  needsSandbox ||
  (!existsSync(CURL) && 'no curl') ||
  (landlockSupport().abi < 4 && 'Landlock ABI 4 (TCP rules) is needed') ||
  netNotifyAbsence() ||
  false;

let f: Fixture;
let s: TestServer;
let agent: RpcClient;
const lookups: string[] = [];

before(async () => {
  if (skip) return;
  f = await fixture();
  s = await startTestServer({
    launcher: {
      sandbox: { tmpdir: f.T },
      resolver: (host) => {
        lookups.push(host);
        return Promise.reject(new Error(`no DNS in tests: ${host}`));
      },
    },
  });
  agent = await s.client();
});
after(async () => {
  await s?.close();
  await f?.close();
  assert.deepEqual(lookups, []);
});

describe('managedNetwork + enforceManagedNetwork under Landlock (useLegacyLandlock)', { skip }, () => {
  for (const tty of [false, true]) {
    const processId = tty ? 'll-central-pty' : 'll-central-pipes';
    test(`${tty ? 'PTY' : 'pipes'}: allowed 200, loopback literal 403 not_allowed_local, direct refused`, async () => {
      const hits = f.hits.tcp;
      const proxied = netNotifyCounts().proxied;
      await agent.request(
        'process/start',
        centralStart(processId, { port: f.port, cwd: f.W, tty, useLegacyLandlock: true }),
      );
      const events = await agent.collect(processId, 30_000);
      const exited = events.find((e) => e.method === 'process/exited');
      const out = agent.output(processId, tty ? 'pty' : 'stdout').replace(/\r/g, '');
      assert.equal(exited?.params.exitCode, 0, out);
      assert.match(out, /^allowed=200$/m, out);
      assert.match(out, /"reason":"not_allowed_local"/, out);
      assert.match(out, /^local=403$/m, out);
      assert.match(out, /^direct=7$/m, out);
      assert.equal(f.hits.tcp - hits, 1, 'only the allowed request reached the origin');
      assert.ok(
        netNotifyCounts().proxied - proxied >= 2,
        'both proxied requests went through the supervisor',
      );
      await until(() => netNotifyCounts().watched === 0, 5000);
    });
  }
});
