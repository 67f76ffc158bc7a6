/**
 * `--remote-transport noise` (Codex 0.171's default remote transport, docs/remote-noise.md): the stand-in
 * registry/relay/harness (test/helpers/noiseRegistry.ts) is first proven against the REAL `codex exec-server` 0.171
 * executor (skipped when it is not cached: scripts/install-codex.mjs 0.171.0), then the same rig drives Corral's.
 * Both run in a network namespace with only loopback (test/helpers/noise-rig.ts), so the real binary cannot reach any
 * other host. Each: registration with the hybrid key, an encrypted `initialize` + `process/start` of echo whose
 * output comes back, and a harness key the registry did not vouch for reset before any stream opens. The real
 * `codex exec-server forward` 0.171 (Noise is its only forward transport) is run the same way, relaying to a codex
 * exec-server; Corral's `forward --remote-transport noise` is tested in remote-forward.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { codexBinary } from '../e2e/codex/rig.js';
import { netnsPrefix } from '../helpers/netns.js';
import {
  codexNoiseExecutor,
  corralNoiseExecutor,
  type RigResult,
  runNoiseRig as runRig,
} from '../helpers/noiseRigRun.js';

const codex171 = codexBinary('0.171.0');
const ns = netnsPrefix();

function checkExecutor(r: RigResult): void {
  assert.equal(r.error, undefined, `${r.error}\n${r.stderrTail}`);
  assert.equal(r.registerPath, '/cloud/environment/env-noise/register');
  assert.deepEqual(r.registerKeys, ['executor_public_key', 'security_profile']);
  assert.equal(r.securityProfile, 'noise_hybrid_ik_v1');
  assert.equal(r.keySuite, 'Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256');
  // The rendezvous link carries no credential; the registry calls do.
  assert.equal(r.rendezvousAuthorization, null);
  assert.equal(r.output, 'through-noise\n');
  // Both directions carry messages of several records (split at 60 KiB, reassembled).
  assert.equal(r.bigArgBytes, '100000');
  assert.equal(r.bigFileBytes, 150_000);
  assert.deepEqual(r.unvouched, { reset: 'noise_relay_protocol_error', transport: false });
  assert.equal(r.validations.length, 2);
  for (const v of r.validations) {
    assert.equal(v.authorization, 'Bearer noise-rig-bearer');
    assert.deepEqual(v.keys, ['executor_registration_id', 'harness_key_authorization', 'harness_public_key']);
  }
  assert.ok(r.framesFromExecutor > 0);
  assert.equal(r.undecodable, 0);
}

describe('--remote-transport noise: Codex 0.171’s hybrid IK relay', {
  skip: ns ? false : 'needs unshare -n',
}, () => {
  it('the stand-in against the real codex exec-server 0.171 executor (skipped when not cached)', {
    skip: !codex171,
  }, async () => {
    const r = await runRig('codex', codexNoiseExecutor(codex171!), 'file:///');
    checkExecutor(r);
  });

  it('Corral’s executor against the same stand-in', async () => {
    checkExecutor(await runRig('corral', corralNoiseExecutor(), '/'));
  });

  it('the stand-in against the real `codex exec-server forward` 0.171 (Noise, its default) relaying to a codex exec-server', {
    skip: !codex171,
  }, async () => {
    const r = await runRig(
      'codex-forward',
      [
        codex171!,
        'exec-server',
        'forward',
        '--remote',
        '{base}',
        '--environment-id',
        '{id}',
        '--connect',
        '{connect}',
        '--registration-bearer-stdin',
      ],
      'file:///',
      [codex171!, 'exec-server', '--listen', 'ws://127.0.0.1:0'],
    );
    checkExecutor(r);
  });
});
