// issue 33, item 1: a seed `managedNetwork` that breaks its constraints is -32603 `invalid managed network config:
// <err>`, one whose proxy state cannot be built (a bad glob, a relative unix-socket path, `*` in the denylist once the
// constraints pass) -32603 `failed to build managed network proxy state: <err>`, as the seed answers; 0.169's
// `networkProxy` keeps -32602 `invalid network proxy config: <err>`; shape errors stay -32602 for both. Fed over a
// real WebSocket, malformed, wide (100k entries with the bad one last, 100k against 100k managed) and huge (1 MiB
// patterns), each answered in seconds (a domains map of 100k took minutes before): nothing is started,
// no proxy is left, and the server still serves.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { stillServes } from '../helpers/hostileJson.js';
import { serverSuite } from '../helpers/server.js';
import { proxy169, refusedStart } from '../helpers/startParams.js';

const base = { argv: ['/bin/true'], cwd: '/tmp', env: { PATH: '/usr/bin:/bin' }, tty: false, arg0: null };
const WILDCARD_TEXT =
  'invalid value for network.denied_domains: * (allowed exact hosts or scoped wildcards like *.example.com or **.example.com)';

const srv = serverSuite();
let n = 0;

/** The error a start with `extra` gets; nothing was started for it and no proxy is left. */
async function refused(extra: Record<string, unknown>): Promise<{ code: number; message: string }> {
  const error = await refusedStart(srv.c, { processId: `mn-${++n}`, ...base, ...extra });
  assert.equal(srv.ts.server.launcher.proxies.size, 0, 'no proxy is left running');
  return { code: error.code, message: error.message };
}

const mn = (network: Record<string, unknown>, constraints?: Record<string, unknown>) => ({
  managedNetwork: {
    config: { network: { enabled: true, ...network } },
    ...(constraints ? { constraints } : {}),
  },
});
const np = (proxy: Record<string, unknown>) => ({ networkProxy: proxy169(proxy) });

describe('managedNetwork config errors: the seed codes and texts; networkProxy keeps 0.169', () => {
  test('every constraint violation of §3.7 is -32603 invalid managed network config', async () => {
    const cases: [Record<string, unknown>, Record<string, unknown>, string][] = [
      [
        { mode: 'full' },
        { mode: 'limited' },
        'invalid value for network.mode: Full (allowed Limited or more restrictive)',
      ],
      [
        {},
        { enabled: false },
        'invalid value for network.enabled: true (allowed false (disabled by managed config))',
      ],
      [
        { domains: { '**.example.com': 'allow' } },
        { allowed_domains: ['*.example.com'] },
        'invalid value for network.allowed_domains: ["**.example.com"] (allowed subset of managed allowed_domains)',
      ],
      [
        {},
        { deniedDomains: ['evil.com'] },
        'invalid value for network.denied_domains: missing managed denied_domains entries (allowed ["evil.com"])',
      ],
      [
        { allow_local_binding: true },
        { allow_local_binding: false },
        'invalid value for network.allow_local_binding: true (allowed false (disabled by managed config))',
      ],
      [
        { dangerously_allow_all_unix_sockets: true },
        { allow_unix_sockets: ['/a'] },
        'invalid value for network.dangerously_allow_all_unix_sockets: true (allowed false (disabled by managed config))',
      ],
      [
        { unix_sockets: { '/b': 'allow' } },
        { allow_unix_sockets: ['/a'] },
        'invalid value for network.allow_unix_sockets: ["/b"] (allowed subset of managed allow_unix_sockets)',
      ],
      [{ domains: { '*': 'deny' } }, {}, WILDCARD_TEXT],
    ];
    for (const [network, constraints, text] of cases) {
      const e = await refused(mn(network, constraints));
      assert.deepEqual(e, { code: -32603, message: `invalid managed network config: ${text}` });
    }
  });

  test('a state that cannot be built is -32603 failed to build managed network proxy state; networkProxy -32602', async () => {
    const cases: [Record<string, unknown>, Record<string, unknown>, string][] = [
      [
        { domains: { 'a[b.test': 'allow' } },
        { domains: { 'a[b.test': 'allow' } },
        'invalid glob pattern: a[b.test',
      ],
      [{ domains: { '{a,': 'deny' } }, { domains: { '{a,': 'deny' } }, 'invalid glob pattern: {a,'],
      [
        { unix_sockets: { 'rel.sock': 'allow' } },
        { unixSockets: { 'rel.sock': 'allow' } },
        'invalid network.allow_unix_sockets[0]: expected an absolute path, got "rel.sock"',
      ],
    ];
    for (const [seedNetwork, proxy, text] of cases) {
      assert.deepEqual(await refused(mn(seedNetwork)), {
        code: -32603,
        message: `failed to build managed network proxy state: ${text}`,
      });
      assert.deepEqual(await refused(np(proxy)), {
        code: -32602,
        message: `invalid network proxy config: ${text}`,
      });
    }
    // 0.169's own refusals keep their -32602 texts.
    assert.deepEqual(await refused(np({ domains: { '*': 'deny' } })), {
      code: -32602,
      message: `invalid network proxy config: ${WILDCARD_TEXT}`,
    });
    assert.deepEqual(await refused(np({ enabled: false })), {
      code: -32602,
      message: 'invalid network proxy config: executor-local network proxy launch requires an enabled proxy',
    });
  });

  test('shape errors stay -32602 for both members (serde, naming the field)', async () => {
    for (const extra of [
      mn({ enabled: 'yes' }),
      mn({ mode: 'open' }),
      mn({ hard_deny_allowlist_misses: 'no' }),
      { managedNetwork: { config: 5 } },
      { managedNetwork: { config: { network: { enabled: true } }, constraints: 5 } },
      { managedNetwork: { config: { network: { enabled: true } }, auditMetadata: [] } },
      { ...mn({}), ...np({}) },
    ]) {
      const e = await refused(extra);
      assert.equal(e.code, -32602, JSON.stringify(extra));
      assert.match(e.message, /^invalid network proxy config: /);
    }
  });

  test('wide, huge and odd inputs: the bad entry is found and named, with the right code', async () => {
    const wide: Record<string, string> = {};
    for (let i = 0; i < 100_000; i++) wide[`h${i}.test`] = i % 2 ? 'allow' : 'deny';
    wide['z[.test'] = 'allow';
    assert.deepEqual(await refused(mn({ domains: wide })), {
      code: -32603,
      message: 'failed to build managed network proxy state: invalid glob pattern: z[.test',
    });
    assert.deepEqual(await refused(np({ domains: wide })), {
      code: -32602,
      message: 'invalid network proxy config: invalid glob pattern: z[.test',
    });
    const huge = `${'a'.repeat(1 << 20)}[`;
    const e = await refused(mn({ domains: { [huge]: 'allow' } }));
    assert.equal(e.code, -32603);
    assert.ok(e.message.startsWith('failed to build managed network proxy state: invalid glob pattern: aaa'));
    const sockets: Record<string, string> = {};
    for (let i = 0; i < 10_000; i++) sockets[`/run/s${i}.sock`] = 'allow';
    sockets['\u0000rel'] = 'allow';
    assert.deepEqual(await refused(mn({ unix_sockets: sockets })), {
      code: -32603,
      message:
        'failed to build managed network proxy state: invalid network.allow_unix_sockets[10000]: expected an absolute path, got "\\u0000rel"',
    });
    // A managed allowlist of 100k entries the config breaks at its last entry.
    const managed = Array.from({ length: 100_000 }, (_, i) => `m${i}.test`);
    const r = await refused(mn({ domains: { 'other.test': 'allow' } }, { allowed_domains: managed }));
    assert.deepEqual(r, {
      code: -32603,
      message:
        'invalid managed network config: invalid value for network.allowed_domains: ["other.test"] (allowed subset of managed allowed_domains)',
    });
    // 100k config entries against 100k managed ones (a scan of the managed list per entry was 10^10 comparisons).
    const candidates: Record<string, string> = {};
    for (let i = 0; i < 100_000; i++) candidates[`x${i}.m${i}.test`] = 'allow';
    candidates['last.test'] = 'allow';
    const t0 = performance.now();
    assert.deepEqual(
      await refused(mn({ domains: candidates }, { allowed_domains: managed.map((m) => `*.${m}`) })),
      {
        code: -32603,
        message:
          'invalid managed network config: invalid value for network.allowed_domains: ["last.test"] (allowed subset of managed allowed_domains)',
      },
    );
    assert.ok(performance.now() - t0 < 30_000, 'answered in seconds, not hours');
    await stillServes(srv.c, 'after-config-errors');
  });
});
