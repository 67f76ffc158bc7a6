// The approval switch of a seed managedNetwork (src/network/managedNetwork.ts parseApprovalSettings): the keys accepted,
// their spellings, Codex's managed-only override, and the -32602 texts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NetworkConfigError } from '../../src/network/config.js';
import { parseManagedNetwork } from '../../src/network/managedNetwork.js';

const mn = (network: Record<string, unknown>, constraints?: Record<string, unknown>, flat = false) => ({
  config: flat ? { enabled: true, ...network } : { network: { enabled: true, ...network } },
  ...(constraints ? { constraints } : {}),
});

test('hard_deny_allowlist_misses:false asks for approvals; absent or true keeps misses final', () => {
  assert.deepEqual(parseManagedNetwork(mn({ hard_deny_allowlist_misses: false }))?.approvals, {
    timeoutMs: null,
  });
  assert.deepEqual(parseManagedNetwork(mn({ hardDenyAllowlistMisses: false }, undefined, true))?.approvals, {
    timeoutMs: null,
  });
  assert.equal(parseManagedNetwork(mn({}))?.approvals, undefined);
  assert.equal(parseManagedNetwork(mn({ hard_deny_allowlist_misses: true }))?.approvals, undefined);
  assert.equal(parseManagedNetwork(mn({ hard_deny_allowlist_misses: null }))?.approvals, undefined);
});

test('approval_timeout_ms sets the prompt timeout; managed_allowed_domains_only forces the hard deny', () => {
  assert.deepEqual(
    parseManagedNetwork(mn({ hard_deny_allowlist_misses: false, approval_timeout_ms: 1234 }))?.approvals,
    { timeoutMs: 1234 },
  );
  assert.deepEqual(
    parseManagedNetwork(mn({ hard_deny_allowlist_misses: false, approvalTimeoutMs: 5 }, undefined, true))
      ?.approvals,
    { timeoutMs: 5 },
  );
  for (const c of [{ managed_allowed_domains_only: true }, { managedAllowedDomainsOnly: true }]) {
    assert.equal(parseManagedNetwork(mn({ hard_deny_allowlist_misses: false }, c))?.approvals, undefined);
  }
  assert.ok(
    parseManagedNetwork(mn({ hard_deny_allowlist_misses: false }, { managed_allowed_domains_only: false }))
      ?.approvals,
  );
});

test('bad values are -32602 texts naming the field', () => {
  const err = (network: Record<string, unknown>) => {
    try {
      parseManagedNetwork(mn(network));
    } catch (e) {
      assert.ok(e instanceof NetworkConfigError);
      return e.message;
    }
    assert.fail('expected a NetworkConfigError');
  };
  assert.equal(
    err({ hard_deny_allowlist_misses: 'no' }),
    'invalid network proxy config: invalid type: string, expected a boolean at `network.hard_deny_allowlist_misses`',
  );
  for (const v of [0, -1, 1.5, 600_001, 'soon']) {
    assert.match(
      err({ hard_deny_allowlist_misses: false, approval_timeout_ms: v }),
      /^invalid network proxy config: invalid value: .*, expected an integer from 1 to 600000 at `network\.approval_timeout_ms`$/,
    );
  }
  // A disabled proxy starts nothing, but its switch is still checked.
  assert.throws(
    () => parseManagedNetwork({ config: { network: { enabled: false, hard_deny_allowlist_misses: 1 } } }),
    NetworkConfigError,
  );
});
