import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NetworkConfigError } from '../../src/network/config.js';
import {
  managedNetworkSandboxFact,
  parseManagedNetwork,
  parseNetworkProxy,
  parseProcessNetwork,
} from '../../src/network/managedNetwork.js';
import {
  ManagedNetworkParamSchema,
  type NetworkProxyParam,
  NetworkProxyParamSchema,
  networkProxyParamMessage,
} from '../../src/protocol/network.js';
import { proxy169 as proxy169Wire } from '../helpers/startParams.js';

const rejects = (fn: () => unknown, message: string) =>
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof NetworkConfigError, `expected NetworkConfigError, got ${String(e)}`);
    assert.equal(e.message, message);
    return true;
  });

test('the realistic seed process/start managedNetwork of §2.6 parses', () => {
  const spec = parseManagedNetwork({
    config: {
      network: {
        enabled: true,
        mode: 'full',
        enable_socks5: true,
        enable_socks5_udp: true,
        allow_upstream_proxy: false,
        allow_local_binding: false,
        dangerously_allow_non_loopback_proxy: false,
        dangerously_allow_all_unix_sockets: false,
        proxy_url: 'http://127.0.0.1:3128',
        socks_url: 'http://127.0.0.1:8081',
        domains: { '**.npmjs.org': 'allow', 'github.com': 'allow', 'evil.example': 'deny' },
        unix_sockets: null,
        mitm: false,
      },
    },
    constraints: {
      allowed_domains: ['**.npmjs.org', 'github.com'],
      allowlist_expansion_enabled: true,
      denied_domains: ['evil.example'],
      denylist_expansion_enabled: true,
      allow_local_binding: false,
      mode: 'full',
    },
    auditMetadata: {
      conversationId: '0199',
      appVersion: '0.121.0',
      originator: 'codex_cli_rs',
      model: 'gpt-5.5',
    },
  });
  assert.ok(spec);
  assert.deepEqual(spec.settings.allowed_domains, ['**.npmjs.org', 'github.com']);
  assert.deepEqual(spec.settings.denied_domains, ['evil.example']);
  assert.equal(spec.settings.enable_socks5, true);
  assert.equal(spec.auditMetadata.conversation_id, '0199');
  assert.equal(spec.auditMetadata.app_version, '0.121.0');
  assert.equal(spec.origin, 'managedNetwork');
});

test('config shapes: flat, legacy arrays, defaults, none entries, deny beats allow', () => {
  const flat = parseManagedNetwork({
    config: { enabled: true, domains: { 'a.test': 'allow', 'b.test': 'none' } },
  });
  assert.deepEqual(flat?.settings.allowed_domains, ['a.test']);
  assert.equal(flat?.settings.enable_socks5, true, 'enable_socks5 defaults to true');
  assert.equal(flat?.settings.enable_socks5_udp, true);
  assert.equal(flat?.settings.mode, 'full');
  const legacy = parseManagedNetwork({
    config: {
      network: {
        enabled: true,
        allowed_domains: ['a.test', 'x.test'],
        denied_domains: ['x.test'],
        allow_unix_sockets: ['/s'],
      },
    },
  });
  assert.deepEqual(legacy?.settings.allowed_domains, ['a.test']);
  assert.deepEqual(legacy?.settings.denied_domains, ['x.test']);
  assert.deepEqual(legacy?.settings.allow_unix_sockets, ['/s']);
  const snake = parseManagedNetwork({
    config: { network: { enabled: true } },
    constraints: { allowLocalBinding: false },
    auditMetadata: { conversation_id: 'c', user_email: 'e' },
  });
  assert.equal(snake?.auditMetadata.user_email, 'e');
  assert.equal(snake?.constraints.allow_local_binding, false);
  const unknownKeys = parseManagedNetwork({
    config: { network: { enabled: true, credential_broker: true, whatever: 1 } },
  });
  assert.ok(unknownKeys);
});

test('disabled or absent: no proxy; the 0.169 sandbox fact starts nothing', () => {
  assert.equal(parseManagedNetwork(null), null);
  assert.equal(parseManagedNetwork(undefined), null);
  assert.equal(
    parseManagedNetwork({ config: { network: { enabled: false, domains: { 'a.test': 'allow' } } } }),
    null,
  );
  assert.equal(parseManagedNetwork({ config: {} }), null);
  assert.equal(parseManagedNetwork({ loopbackPorts: [3128], allowLocalBinding: false }), null);
  assert.deepEqual(managedNetworkSandboxFact({ loopbackPorts: [3128], allowLocalBinding: true }), {
    loopbackPorts: [3128],
    allowLocalBinding: true,
  });
  assert.ok(ManagedNetworkParamSchema.safeParse({ loopbackPorts: [1], allowLocalBinding: false }).success);
  assert.ok(ManagedNetworkParamSchema.safeParse({ config: {}, constraints: {}, auditMetadata: {} }).success);
  assert.ok(!ManagedNetworkParamSchema.safeParse({ loopbackPorts: 'x' }).success);
});

test('config errors: denylist *, bad glob, relative unix socket, wrong types', () => {
  rejects(
    () => parseManagedNetwork({ config: { network: { enabled: true, domains: { '*': 'deny' } } } }),
    'invalid network proxy config: invalid value for network.denied_domains: * (allowed exact hosts or scoped wildcards like *.example.com or **.example.com)',
  );
  rejects(
    () => parseManagedNetwork({ config: { network: { enabled: true, domains: { 'a[b.test': 'allow' } } } }),
    'invalid network proxy config: invalid glob pattern: a[b.test',
  );
  rejects(
    () =>
      parseManagedNetwork({ config: { network: { enabled: true, unix_sockets: { 'rel.sock': 'allow' } } } }),
    'invalid network proxy config: invalid network.allow_unix_sockets[0]: expected an absolute path, got "rel.sock"',
  );
  assert.throws(
    () => parseManagedNetwork({ config: { network: { enabled: 'yes' } } }),
    /^NetworkConfigError: invalid network proxy config: invalid type: string "yes", expected a boolean/,
  );
  assert.throws(
    () => parseManagedNetwork({ config: { network: { enabled: true, mode: 'open' } } }),
    /^NetworkConfigError: invalid network proxy config: /,
  );
});

const T25 = [
  {
    constraints: { mode: 'limited' },
    network: { mode: 'full' },
    message: 'invalid value for network.mode: Full (allowed Limited or more restrictive)',
  },
  {
    constraints: { allowed_domains: ['*.example.com'] },
    network: { domains: { '**.example.com': 'allow' } },
    message:
      'invalid value for network.allowed_domains: ["**.example.com"] (allowed subset of managed allowed_domains)',
  },
  {
    constraints: { deniedDomains: ['evil.com'] },
    network: {},
    message:
      'invalid value for network.denied_domains: missing managed denied_domains entries (allowed ["evil.com"])',
  },
  {
    constraints: { allow_local_binding: false },
    network: { allow_local_binding: true },
    message:
      'invalid value for network.allow_local_binding: true (allowed false (disabled by managed config))',
  },
  {
    constraints: { allow_unix_sockets: ['/a'] },
    network: { dangerously_allow_all_unix_sockets: true },
    message:
      'invalid value for network.dangerously_allow_all_unix_sockets: true (allowed false (disabled by managed config))',
  },
];

test('T25: constraint violations are rejected in the §2.7 format', () => {
  for (const c of T25) {
    rejects(
      () =>
        parseManagedNetwork({
          config: { network: { enabled: true, ...c.network } },
          constraints: c.constraints,
        }),
      `invalid network proxy config: ${c.message}`,
    );
  }
});

test('constraints: the remaining rules of §3.7', () => {
  const run = (network: Record<string, unknown>, constraints: Record<string, unknown>) =>
    parseManagedNetwork({ config: { network: { enabled: true, ...network } }, constraints });
  rejects(
    () => run({}, { enabled: false }),
    'invalid network proxy config: invalid value for network.enabled: true (allowed false (disabled by managed config))',
  );
  rejects(
    () => run({}, { allowUpstreamProxy: false }),
    'invalid network proxy config: invalid value for network.allow_upstream_proxy: true (allowed false (disabled by managed config))',
  );
  assert.ok(run({ allow_upstream_proxy: false }, { allow_upstream_proxy: false }));
  assert.ok(run({ mode: 'limited' }, { mode: 'full' }), 'more restrictive mode is fine');
  // expansion enabled: every managed entry must be in the allowlist or the denylist
  assert.ok(
    run(
      { domains: { 'a.test': 'allow', 'extra.test': 'allow' } },
      { allowed_domains: ['a.test'], allowlist_expansion_enabled: true },
    ),
  );
  assert.ok(
    run(
      { domains: { 'a.test': 'deny' } },
      { allowed_domains: ['a.test'], allowlist_expansion_enabled: true },
    ),
  );
  rejects(
    () =>
      run(
        { domains: { 'x.test': 'allow' } },
        { allowed_domains: ['A.test'], allowlist_expansion_enabled: true },
      ),
    'invalid network proxy config: invalid value for network.allowed_domains: missing managed allowed_domains entries (allowed ["a.test"])',
  );
  // expansion disabled: exact match minus the config's denials
  assert.ok(
    run(
      { domains: { 'a.test': 'allow', 'b.test': 'deny' } },
      { allowed_domains: ['a.test', 'b.test'], allowlist_expansion_enabled: false },
    ),
  );
  rejects(
    () =>
      run(
        { domains: { 'a.test': 'allow', 'c.test': 'allow' } },
        { allowed_domains: ['a.test'], allowlist_expansion_enabled: false },
      ),
    'invalid network proxy config: invalid value for network.allowed_domains: ["a.test", "c.test"] (allowed must match managed allowed_domains)',
  );
  // expansion absent: coverage rules
  assert.ok(
    run(
      { domains: { 'a.example.com': 'allow', '*.x.example.com': 'allow' } },
      { allowed_domains: ['*.example.com'] },
    ),
  );
  assert.ok(
    run(
      { domains: { 'example.com': 'allow', '**.a.example.com': 'allow' } },
      { allowed_domains: ['**.example.com'] },
    ),
  );
  rejects(
    () => run({ domains: { 'example.com': 'allow' } }, { allowed_domains: ['*.example.com'] }),
    'invalid network proxy config: invalid value for network.allowed_domains: ["example.com"] (allowed subset of managed allowed_domains)',
  );
  rejects(
    () => run({}, { allowed_domains: ['*'] }),
    'invalid network proxy config: invalid value for network.allowed_domains: * (allowed exact hosts or scoped wildcards like *.example.com or **.example.com)',
  );
  rejects(
    () =>
      run(
        { domains: { 'a.test': 'deny', 'b.test': 'deny' } },
        { denied_domains: ['a.test'], denylist_expansion_enabled: false },
      ),
    'invalid network proxy config: invalid value for network.denied_domains: ["a.test", "b.test"] (allowed must match managed denied_domains)',
  );
  rejects(
    () => run({ unix_sockets: { '/b': 'allow' } }, { allow_unix_sockets: ['/a'] }),
    'invalid network proxy config: invalid value for network.allow_unix_sockets: ["/b"] (allowed subset of managed allow_unix_sockets)',
  );
  // the denylist wildcard check comes first
  rejects(
    () => run({ domains: { '*': 'deny' } }, { mode: 'limited' }),
    'invalid network proxy config: invalid value for network.denied_domains: * (allowed exact hosts or scoped wildcards like *.example.com or **.example.com)',
  );
});

/** A 0.169 networkProxy as sent (raw169) and as the method table hands it on (proxy169). */
const raw169 = (over: Record<string, unknown> = {}) => ({
  ...proxy169Wire({
    mode: 'limited',
    domains: { 'a.test': 'allow', 'b.test': 'deny' },
    unixSockets: null,
    allowLocalBinding: true,
    ...over,
  }),
  auditMetadata: { conversationId: 'conv-1', appVersion: '9.9.9' },
  executionId: 'exec-1',
});

const proxy169 = (over: Record<string, unknown> = {}): NetworkProxyParam =>
  NetworkProxyParamSchema.parse(raw169(over));

test('0.169 networkProxy maps onto §2.1, with its exact errors', () => {
  assert.ok(NetworkProxyParamSchema.safeParse(raw169()).success);
  const spec = parseNetworkProxy(proxy169());
  assert.ok(spec);
  assert.equal(spec.origin, 'networkProxy');
  assert.equal(spec.settings.enable_socks5, false);
  assert.equal(spec.settings.allow_local_binding, true);
  assert.equal(spec.settings.mode, 'limited');
  assert.deepEqual(spec.settings.allowed_domains, ['a.test']);
  assert.deepEqual(spec.settings.denied_domains, ['b.test']);
  assert.equal(spec.auditMetadata.app_version, '9.9.9');
  assert.equal(spec.executionId, 'exec-1');
  // A shape error is the method table's (one text, in src/protocol); src/network sees only typed values.
  const missing = raw169();
  delete (missing.proxy as Record<string, unknown>).enableSocks5;
  assert.ok(!NetworkProxyParamSchema.safeParse(missing).success);
  assert.equal(networkProxyParamMessage(missing), 'missing field `enableSocks5`');
  rejects(
    () => parseNetworkProxy(proxy169({ enabled: false })),
    'invalid network proxy config: executor-local network proxy launch requires an enabled proxy',
  );
  rejects(
    () => parseNetworkProxy(proxy169({ domains: { '*': 'deny' } })),
    'invalid network proxy config: invalid value for network.denied_domains: * (allowed exact hosts or scoped wildcards like *.example.com or **.example.com)',
  );
  assert.equal(parseNetworkProxy(null), null);
});

test('parseProcessNetwork: networkProxy next to the sandbox fact; never both proxy shapes', () => {
  const spec = parseProcessNetwork({
    networkProxy: proxy169(),
    managedNetwork: { loopbackPorts: [], allowLocalBinding: true },
  });
  assert.equal(spec?.origin, 'networkProxy');
  assert.throws(() =>
    parseProcessNetwork({
      networkProxy: proxy169(),
      managedNetwork: { config: { network: { enabled: true } } },
    }),
  );
  assert.equal(parseProcessNetwork({}), null);
});
