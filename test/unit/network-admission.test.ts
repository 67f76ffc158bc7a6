/**
 * The admission rule (src/network/admission.ts) on its own: a table of the policy cases of network-proxy.md §3 and
 * the §6 test list, each from the target text a client would send (read by the proxy's one target reader) to the
 * decision, its reason, source and scope. Names resolve through the §6 stub; nothing leaves the process.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  type Admission,
  type AdmissionPolicy,
  type AdmissionRequest,
  admit,
} from '../../src/network/admission.js';
import { parseNetworkConfig } from '../../src/network/config.js';
import { NetworkEvents } from '../../src/network/events.js';
import { normalizeHost } from '../../src/network/host.js';
import { type Decider, PolicyEngine, type PolicyProtocol, type Resolver } from '../../src/network/policy.js';
import { Recorder } from '../../src/network/recorder.js';
import { readConnectTarget, readRequestTarget } from '../../src/network/target.js';
import type { BlockedEvent, NetworkAuditEvent } from '../../src/protocol/network.js';
import { stubResolver } from '../integration/network-helpers.js';

const lookups: string[] = [];
const resolver: Resolver = (host, port) => {
  lookups.push(host);
  return stubResolver(host, port);
};

function policy(network: Record<string, unknown>, decider?: Decider): PolicyEngine {
  return new PolicyEngine(parseNetworkConfig({ network: { enabled: true, ...network } }), {
    resolver,
    resolveTimeoutMs: 100,
    ...(decider ? { decider } : {}),
  });
}

/** The request as an entry point builds it: HTTP from a URL, CONNECT from an authority, SOCKS from host + port. */
function request(protocol: PolicyProtocol, method: string | null, target: string): AdmissionRequest {
  let host: string;
  let port: number;
  if (protocol === 'http') {
    const t = readRequestTarget(target, undefined);
    assert.ok(t.ok, `${target}: ${t.ok ? '' : t.error}`);
    ({ host, port } = t);
  } else if (protocol === 'https_connect') {
    const t = readConnectTarget(target);
    assert.ok(t.ok, `${target}: ${t.ok ? '' : t.error}`);
    ({ host, port } = t);
  } else {
    const i = target.lastIndexOf(':');
    const n = normalizeHost(target.slice(0, i));
    assert.ok(n.ok, target);
    host = n.host;
    port = Number(target.slice(i + 1));
  }
  return { protocol, host, port, method, client: '127.0.0.1:50000' };
}

/** `allow <source>` or `deny <reason> <source> <scope>`, plus `after-allow` when the host policy passed first. */
function summary(a: Admission): string {
  if (a.allowed) return `allow ${a.source}${a.override ? ' override' : ''}`;
  const after = a.hostAllowed ? ' after-allow' : '';
  return `${a.decision} ${a.reason} ${a.source} ${a.scope}${after}`;
}

const LOCAL = { domains: { localhost: 'allow' } };
const LIMITED = { mode: 'limited', domains: { localhost: 'allow', 'evil.test': 'deny' } };

const TABLE: [string, Record<string, unknown>, PolicyProtocol, string | null, string, string][] = [
  ['T3 allowlisted localhost', LOCAL, 'http', 'GET', 'http://localhost:8080/a', 'allow baseline_policy'],
  [
    'T4 loopback literal',
    LOCAL,
    'http',
    'GET',
    'http://127.0.0.1:8080/',
    'deny not_allowed_local baseline_policy domain',
  ],
  [
    'T5 allowlisted name resolving to loopback',
    { domains: { 'rebind.test': 'allow' } },
    'http',
    'GET',
    'http://rebind.test/',
    'deny not_allowed_local baseline_policy domain',
  ],
  [
    'T6 hanging lookup fails closed',
    { domains: { 'hang.test': 'allow' } },
    'http',
    'GET',
    'http://hang.test/',
    'deny not_allowed_local baseline_policy domain',
  ],
  [
    'T6 failing lookup fails closed',
    { domains: { 'err.test': 'allow' } },
    'http',
    'GET',
    'http://err.test/',
    'deny not_allowed_local baseline_policy domain',
  ],
  [
    'T7 ALB, address not on the allowlist',
    { ...LOCAL, allow_local_binding: true },
    'http',
    'GET',
    'http://127.0.0.2:8080/',
    'deny not_allowed baseline_policy domain',
  ],
  [
    'T8 denied, case and trailing dot',
    { domains: { 'evil.test': 'deny', '**.example.test': 'allow' } },
    'http',
    'GET',
    'http://EVIL.TEST./',
    'deny denied baseline_policy domain',
  ],
  [
    'T8 denied CONNECT',
    { domains: { 'evil.test': 'deny', '**.example.test': 'allow' } },
    'https_connect',
    'CONNECT',
    'evil.test:443',
    'deny denied baseline_policy domain',
  ],
  [
    'T9 decimal shorthand of a denied 127.0.0.1',
    { allow_local_binding: true, domains: { '*': 'allow', '127.0.0.1': 'deny' } },
    'http',
    'GET',
    'http://2130706433/',
    'deny denied baseline_policy domain',
  ],
  [
    'T9 short form',
    { allow_local_binding: true, domains: { '*': 'allow', '127.0.0.1': 'deny' } },
    'http',
    'GET',
    'http://127.1/',
    'deny denied baseline_policy domain',
  ],
  [
    'T9 mapped IPv6',
    { allow_local_binding: true, domains: { '*': 'allow', '127.0.0.1': 'deny' } },
    'http',
    'GET',
    'http://[::ffff:7f00:1]/',
    'deny denied baseline_policy domain',
  ],
  [
    'T11 domains null: localhost',
    { domains: null },
    'http',
    'GET',
    'http://localhost/',
    'deny not_allowed_local baseline_policy domain',
  ],
  [
    'T11 domains null: a public name',
    { domains: null },
    'http',
    'GET',
    'http://public.test/',
    'deny not_allowed baseline_policy domain',
  ],
  [
    'allowlisted name resolving to TEST-NET (ALB false)',
    { domains: { 'public.test': 'allow' } },
    'http',
    'GET',
    'http://public.test/',
    'deny not_allowed_local baseline_policy domain',
  ],
  [
    'T12 ALB, allowlisted literal',
    { allow_local_binding: true, domains: { '127.0.0.1': 'allow' } },
    'http',
    'GET',
    'http://127.0.0.1:9/',
    'allow baseline_policy',
  ],
  [
    'T12 ALB, localhost not listed',
    { allow_local_binding: true, domains: { '127.0.0.1': 'allow' } },
    'http',
    'GET',
    'http://localhost:9/',
    'deny not_allowed baseline_policy domain',
  ],
  ['T13 limited GET', LIMITED, 'http', 'GET', 'http://localhost/', 'allow baseline_policy'],
  ['T13 limited HEAD', LIMITED, 'http', 'HEAD', 'http://localhost/', 'allow baseline_policy'],
  ['T13 limited OPTIONS', LIMITED, 'http', 'OPTIONS', 'http://localhost/', 'allow baseline_policy'],
  [
    'T13 limited POST',
    LIMITED,
    'http',
    'POST',
    'http://localhost/',
    'deny method_not_allowed mode_guard non_domain after-allow',
  ],
  [
    'T13 limited post (case-sensitive)',
    LIMITED,
    'http',
    'post',
    'http://localhost/',
    'deny method_not_allowed mode_guard non_domain after-allow',
  ],
  [
    'T13 limited POST to a denied host: the host first',
    LIMITED,
    'http',
    'POST',
    'http://evil.test/',
    'deny denied baseline_policy domain',
  ],
  [
    'limited POST to a host not listed: the host first',
    LIMITED,
    'http',
    'POST',
    'http://public.test/',
    'deny not_allowed baseline_policy domain',
  ],
  [
    'T14 limited CONNECT',
    LIMITED,
    'https_connect',
    'CONNECT',
    'localhost:443',
    'deny mitm_required mode_guard non_domain after-allow',
  ],
  [
    'T14 limited CONNECT with mitm:true: allowed, to be intercepted (issue 34)',
    { ...LIMITED, mitm: true },
    'https_connect',
    'CONNECT',
    'localhost:443',
    'allow baseline_policy',
  ],
  [
    'T14 limited CONNECT to a denied host',
    LIMITED,
    'https_connect',
    'CONNECT',
    'evil.test:443',
    'deny denied baseline_policy domain',
  ],
  [
    'T15 allowed CONNECT, no port: 443',
    LOCAL,
    'https_connect',
    'CONNECT',
    'localhost',
    'allow baseline_policy',
  ],
  ['T21 SOCKS CONNECT by name', LOCAL, 'socks5_tcp', null, 'localhost:80', 'allow baseline_policy'],
  [
    'T21 SOCKS CONNECT by IP',
    LOCAL,
    'socks5_tcp',
    null,
    '127.0.0.1:80',
    'deny not_allowed_local baseline_policy domain',
  ],
  [
    'T22 limited SOCKS CONNECT: before the host policy',
    LIMITED,
    'socks5_tcp',
    null,
    'localhost:80',
    'deny method_not_allowed mode_guard non_domain',
  ],
  [
    'T22 limited SOCKS CONNECT to a denied host: still the mode guard first',
    LIMITED,
    'socks5_tcp',
    null,
    'evil.test:80',
    'deny method_not_allowed mode_guard non_domain',
  ],
  [
    'limited SOCKS UDP: every datagram',
    LIMITED,
    'socks5_udp',
    null,
    'localhost:53',
    'deny method_not_allowed mode_guard non_domain',
  ],
  [
    'T23 UDP to an address not allowed',
    { allow_local_binding: true, domains: { '127.0.0.1': 'allow' } },
    'socks5_udp',
    null,
    '127.0.0.2:53',
    'deny not_allowed baseline_policy domain',
  ],
  [
    'T23 UDP to the allowed address',
    { allow_local_binding: true, domains: { '127.0.0.1': 'allow' } },
    'socks5_udp',
    null,
    '127.0.0.1:53',
    'allow baseline_policy',
  ],
  [
    'a Unicode deny entry blocks the punycode wire form',
    { allow_local_binding: true, domains: { '*': 'allow', 'b\u00fccher.test': 'deny' } },
    'http',
    'GET',
    'http://xn--bcher-kva.test/',
    'deny denied baseline_policy domain',
  ],
  [
    'a wildcard never counts as an explicit local entry',
    { domains: { '*': 'allow' } },
    'http',
    'GET',
    'http://localhost/',
    'deny not_allowed_local baseline_policy domain',
  ],
];

test('admission table (§3, §6): each target read as the proxy reads it, then decided', async () => {
  for (const [label, network, protocol, method, target, expected] of TABLE) {
    const a = await admit(policy(network), request(protocol, method, target));
    assert.equal(summary(a), expected, label);
  }
});

test('an empty host is not_allowed; an allowed name is resolved once and its checked answer is what to dial', async () => {
  const p = policy({ allow_local_binding: true, domains: { 'rebind.test': 'allow' } });
  const none = await admit(p, { protocol: 'http', host: '', port: 80, method: 'GET', client: null });
  assert.equal(summary(none), 'deny not_allowed baseline_policy domain');
  lookups.length = 0;
  const a = await admit(p, request('http', 'GET', 'http://rebind.test:81/'));
  assert.ok(a.allowed);
  assert.deepEqual(a.addresses, ['127.0.0.1']);
  assert.deepEqual(lookups, ['rebind.test']);
});

test('limited mode refuses SOCKS before the host policy runs: no lookup, no decider call', async () => {
  let evaluated = 0;
  const inner = policy({ ...LIMITED, domains: { 'rebind.test': 'allow' } });
  const counting: AdmissionPolicy = {
    mode: inner.mode,
    evaluate: (...args) => {
      evaluated++;
      return inner.evaluate(...args);
    },
  };
  for (const protocol of ['socks5_tcp', 'socks5_udp'] as const) {
    const a = await admit(counting, request(protocol, null, 'rebind.test:80'));
    assert.equal(summary(a), 'deny method_not_allowed mode_guard non_domain');
  }
  assert.equal(evaluated, 0);
  // HTTP and CONNECT ask the host policy first.
  await admit(counting, request('http', 'POST', 'http://rebind.test/'));
  await admit(counting, request('https_connect', 'CONNECT', 'rebind.test:443'));
  assert.equal(evaluated, 2);
});

test('the decider answers only not_allowed: allow overrides (then the mode guard still applies), deny and ask carry reasons', async () => {
  const asked: string[] = [];
  const decider: Decider = async (r) => {
    asked.push(`${r.protocol} ${r.host}:${r.port} ${r.method}`);
    if (r.host === 'ok.test') return 'allow';
    if (r.host === 'ask.test') return { ask: 'needs approval' };
    return { deny: '' };
  };
  const p = policy({ mode: 'limited', allow_local_binding: true, domains: { 'evil.test': 'deny' } }, decider);
  const allowed = await admit(p, request('http', 'GET', 'http://ok.test/'));
  assert.equal(summary(allowed), 'allow decider override');
  const post = await admit(p, request('http', 'POST', 'http://ok.test/'));
  assert.equal(summary(post), 'deny method_not_allowed mode_guard non_domain after-allow');
  assert.ok(!post.allowed && post.hostAllowed?.source === 'decider' && post.hostAllowed.override);
  assert.equal(
    summary(await admit(p, request('http', 'GET', 'http://ask.test/'))),
    'ask needs approval decider domain',
  );
  assert.equal(
    summary(await admit(p, request('http', 'GET', 'http://no.test/'))),
    'deny policy_denied decider domain',
  );
  assert.equal(
    summary(await admit(p, request('http', 'GET', 'http://evil.test/'))),
    'deny denied baseline_policy domain',
  );
  assert.deepEqual(asked, [
    'http ok.test:80 GET',
    'http ok.test:80 POST',
    'http ask.test:80 GET',
    'http no.test:80 GET',
  ]);
});

test('an intercepted tunnel (limited mode, mitm): the CONNECT of an allowlist miss defers the decider to each request inside, asked with method and path', async () => {
  const asked: string[] = [];
  const decider: Decider = async (r) => {
    asked.push(`${r.protocol} ${r.host}:${r.port} ${r.method} ${r.path ?? '-'} ${r.tunnel ?? '-'}`);
    return r.path?.startsWith('/api') ? 'allow' : { deny: 'not_allowed' };
  };
  const p = policy(
    { mode: 'limited', mitm: true, allow_local_binding: true, domains: { 'listed.test': 'allow' } },
    decider,
  );
  const tunnel = await admit(p, request('https_connect', 'CONNECT', 'ok.test:443'));
  assert.ok(tunnel.allowed && tunnel.deferred === true, 'admitted without asking');
  assert.deepEqual(tunnel.receipt, { ruleId: 'intercepted_per_request', origin: 'broker' });
  assert.deepEqual(asked, [], 'the CONNECT asked nothing');
  const inner = (method: string, path: string, t: Admission = tunnel): AdmissionRequest => ({
    protocol: 'https',
    host: 'ok.test',
    port: 443,
    method,
    path,
    client: null,
    tunnel: t as Extract<Admission, { allowed: true }>,
  });
  const api = await admit(p, inner('GET', '/api/x?q=1'));
  assert.ok(api.allowed && api.source === 'decider');
  assert.deepEqual(api.addresses, tunnel.addresses, "the tunnel's checked addresses, nothing resolved again");
  assert.equal(summary(await admit(p, inner('GET', '/admin'))), 'deny not_allowed decider domain');
  // Limited mode refuses a POST before the decider is asked (no prompt for a request refused anyway).
  assert.equal(
    summary(await admit(p, inner('POST', '/api'))),
    'deny method_not_allowed mode_guard non_domain after-allow',
  );
  assert.deepEqual(asked, [
    'https ok.test:443 GET /api/x?q=1 deferred',
    'https ok.test:443 GET /admin deferred',
  ]);
  // An allowlisted tunnel stands for its requests: the decider is not asked.
  const listed = await admit(p, request('https_connect', 'CONNECT', 'listed.test:443'));
  assert.ok(listed.allowed && listed.deferred === undefined);
  assert.ok((await admit(p, { ...inner('GET', '/admin', listed), host: 'listed.test' })).allowed);
  assert.equal(asked.length, 2);
  // No tunnel: refused.
  const { tunnel: _, ...bare } = inner('GET', '/api');
  assert.equal(summary(await admit(p, bare)), 'deny not_allowed mode_guard non_domain');
});

test('Recorder.record: an allow is one audit event; a mode-guard block is the allow, then the block (§4.8, §4.9)', async () => {
  const events = new NetworkEvents();
  const audits: NetworkAuditEvent[] = [];
  const blocked: BlockedEvent[] = [];
  events.on('audit', (e) => audits.push(e));
  events.on('blocked', (e) => blocked.push(e));
  const recorder = new Recorder({
    processId: 'p',
    auditMetadata: {},
    events,
    log: () => {},
    mode: 'limited',
  });
  const p = policy(LIMITED);
  for (const [protocol, method, target] of [
    ['http', 'GET', 'http://localhost:81/'],
    ['http', 'POST', 'http://localhost:81/'],
    ['http', 'GET', 'http://evil.test/'],
    ['socks5_tcp', null, 'localhost:81'],
  ] as const) {
    const r = request(protocol, method, target);
    recorder.record(r, await admit(p, r));
  }
  assert.deepEqual(
    audits.map(
      (a) => `${a['network.policy.decision']} ${a['network.policy.reason']} ${a['network.policy.scope']}`,
    ),
    [
      'allow allow domain',
      'allow allow domain',
      'deny method_not_allowed non_domain',
      'deny denied domain',
      'deny method_not_allowed non_domain',
    ],
  );
  assert.deepEqual(
    blocked.map((b) => [b.record.reason, b.record.protocol, b.record.method, b.record.mode, b.record.source]),
    [
      ['method_not_allowed', 'http', 'POST', 'limited', 'mode_guard'],
      ['denied', 'http', 'GET', null, 'baseline_policy'],
      ['method_not_allowed', 'socks5', null, 'limited', 'mode_guard'],
    ],
  );
});
