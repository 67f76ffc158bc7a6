import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defaultSettings, type NetworkSettings } from '../../src/network/config.js';
import { normalizeHost } from '../../src/network/host.js';
import { type Decider, PolicyEngine, type Resolver } from '../../src/network/policy.js';
import { FakeClock } from '../helpers/clock.js';

const calls: string[] = [];
const stubResolver: Resolver = (host) => {
  calls.push(host);
  switch (host) {
    case 'rebind.test':
      return Promise.resolve(['127.0.0.1']);
    case 'public.test':
      return Promise.resolve(['192.0.2.10']);
    case 'mapped.test':
      return Promise.resolve(['::ffff:7f00:1']);
    case 'hang.test':
      return new Promise(() => {});
    default:
      return Promise.reject(new Error(`ENOTFOUND ${host}`));
  }
};

function engine(over: Partial<NetworkSettings>, decider?: Decider, resolveTimeoutMs = 2000) {
  return new PolicyEngine(
    { ...defaultSettings(), enabled: true, ...over },
    { resolver: stubResolver, resolveTimeoutMs, ...(decider ? { decider } : {}) },
  );
}
const ctx = { protocol: 'http' as const, client: '127.0.0.1:1', method: 'GET' };
const reason = async (e: PolicyEngine, host: string, port = 80) => {
  const d = await e.evaluate(host, port, ctx);
  return d.allowed ? `allow:${d.addresses.join(',')}` : d.reason;
};

test('deny wins over allow; empty host is not_allowed', async () => {
  const e = engine({ allowed_domains: ['**.example.com'], denied_domains: ['evil.example.com'] });
  assert.equal(await reason(e, 'evil.example.com'), 'denied');
  assert.equal(await reason(e, ''), 'not_allowed');
});

test('local guard: literals and localhost need an explicit entry; wildcards never count (§3.3)', async () => {
  const e = engine({ allowed_domains: ['localhost', '*'] });
  assert.equal(await reason(e, 'localhost'), 'allow:127.0.0.1');
  assert.equal(await reason(e, '127.0.0.1'), 'not_allowed_local');
  assert.equal(await reason(e, '10.0.0.1'), 'not_allowed_local');
  assert.equal(await reason(e, '::1'), 'not_allowed_local');
  const literal = engine({ allowed_domains: ['127.0.0.1'] });
  assert.equal(await reason(literal, '127.0.0.1'), 'allow:127.0.0.1');
});

test('T5/T6: allowlisted names are resolved once; local answers, errors and timeouts fail closed', async () => {
  const e = engine(
    { allowed_domains: ['rebind.test', 'hang.test', 'err.test', 'mapped.test'] },
    undefined,
    100,
  );
  assert.equal(await reason(e, 'rebind.test'), 'not_allowed_local');
  assert.equal(await reason(e, 'mapped.test'), 'not_allowed_local');
  assert.equal(await reason(e, 'err.test'), 'not_allowed_local');
  const t0 = Date.now();
  assert.equal(await reason(e, 'hang.test'), 'not_allowed_local');
  assert.ok(Date.now() - t0 >= 90, 'the timeout applies outside the resolver');
});

test('the default resolve timeout is 2 s: a hanging name is refused then, not a moment before', async () => {
  const clock = new FakeClock();
  const e = new PolicyEngine(
    { ...defaultSettings(), enabled: true, allowed_domains: ['hang.test'] },
    { resolver: stubResolver, clock },
  );
  let decided: string | null = null;
  const deciding = reason(e, 'hang.test').then((r) => {
    decided = r;
  });
  await clock.whenPending();
  await clock.advance(1999);
  assert.equal(decided, null, 'still resolving at 1999 ms');
  await clock.advance(1);
  await deciding;
  assert.equal(decided, 'not_allowed_local');
});

test('T11: names not on the allowlist are blocked without a DNS lookup', async () => {
  calls.length = 0;
  const e = engine({});
  assert.equal(await reason(e, 'localhost'), 'not_allowed_local');
  assert.equal(await reason(e, 'public.test'), 'not_allowed');
  assert.deepEqual(calls, []);
});

test('allow_local_binding skips the guard: the allowlist alone decides (T7, T12)', async () => {
  const e = engine({ allow_local_binding: true, allowed_domains: ['127.0.0.1', 'rebind.test'] });
  assert.equal(await reason(e, '127.0.0.1'), 'allow:127.0.0.1');
  assert.equal(await reason(e, 'localhost'), 'not_allowed');
  assert.equal(await reason(e, '127.0.0.2'), 'not_allowed');
  assert.equal(await reason(e, 'rebind.test'), 'allow:127.0.0.1');
});

test('T9: IP-literal deny entries catch every spelling, and resolved answers', async () => {
  const e = engine({ allow_local_binding: true, allowed_domains: ['*'], denied_domains: ['127.0.0.1'] });
  for (const h of ['2130706433', '127.1', '[::ffff:7f00:1]', '0x7f.0.0.1']) {
    const n = normalizeHost(h);
    assert.ok(n.ok);
    assert.equal(await reason(e, n.host), 'denied', h);
  }
  assert.equal(await reason(e, 'rebind.test'), 'denied', 'a name resolving to a denied literal');
  assert.equal(await reason(e, 'public.test'), 'allow:192.0.2.10');
});

test('decider: only for not_allowed; allow overrides, deny/ask carry reasons', async () => {
  const seen: string[] = [];
  const decider: Decider = async (r) => {
    seen.push(`${r.protocol}:${r.host}:${r.port}:${r.method}`);
    if (r.host === 'public.test' || r.host === 'rebind.test') return 'allow';
    if (r.host === 'ask.test') return { ask: 'needs approval' };
    return { deny: '' };
  };
  const e = engine({ allowed_domains: [], denied_domains: ['denied.test'] }, decider);
  const alb = engine({ allow_local_binding: true }, decider);
  const allowed = await alb.evaluate('public.test', 443, ctx);
  assert.ok(allowed.allowed && allowed.source === 'decider' && allowed.override);
  const rebind = await e.evaluate('rebind.test', 80, ctx);
  assert.ok(
    !rebind.allowed && rebind.reason === 'not_allowed_local',
    'decider allow never bypasses the DNS guard',
  );
  const ask = await e.evaluate('ask.test', 80, ctx);
  assert.ok(
    !ask.allowed && ask.decision === 'ask' && ask.reason === 'needs approval' && ask.source === 'decider',
  );
  const deny = await e.evaluate('other.test', 80, ctx);
  assert.ok(!deny.allowed && deny.reason === 'policy_denied' && deny.source === 'decider');
  assert.equal(await reason(e, 'denied.test'), 'denied');
  assert.equal(await reason(e, '127.0.0.1'), 'not_allowed_local');
  assert.deepEqual(seen, [
    'http:public.test:443:GET',
    'http:rebind.test:80:GET',
    'http:ask.test:80:GET',
    'http:other.test:80:GET',
  ]);
});
