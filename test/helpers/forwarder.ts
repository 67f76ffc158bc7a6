// `exec-server forward` in process: a fake registry (bearer auth) and a forwarder that relays its links to `connect`.
import { bearerAuth } from '../../src/remote/auth.js';
import type { DirectExecutor } from '../../src/remote/direct.js';
import { parseConnectUrl, startForwarder, startNoiseForwarder } from '../../src/remote/forward.js';
import { generateIdentity, publicKeyJson } from '../../src/remote/noiseChannel.js';
import { RegistryClient } from '../../src/remote/registry.js';
import { silentLogger } from '../../src/server/core/log.js';
import { type NoiseRegistry, startNoiseRegistry } from './noiseRegistry.js';
import { type FakeRegistry, startFakeRegistry } from './registry.js';

export const FORWARD_BEARER = 'registry-bearer-0123456789abcdef';

/** A fake registry for environment `env` and a forwarder registered there that relays to `connect`. */
export async function startForwardRig(
  env: string,
  connect: string,
  initialRetryMs: number,
): Promise<{ registry: FakeRegistry; fwd: DirectExecutor }> {
  const registry = await startFakeRegistry({ executorAuth: { kind: 'bearer', token: FORWARD_BEARER } });
  const auth = bearerAuth(FORWARD_BEARER);
  const fwd = startForwarder({
    registry: new RegistryClient(registry.url, env, auth),
    auth,
    log: silentLogger,
    connect: parseConnectUrl(connect),
    initialRetryMs,
  });
  return { registry, fwd };
}

/** The Noise stand-in (noiseRegistry.ts) and `forward --remote-transport noise` registered there, relaying to `connect`. */
export async function startNoiseForwardRig(
  env: string,
  connect: string,
  initialRetryMs: number,
): Promise<{ registry: NoiseRegistry; fwd: DirectExecutor }> {
  const registry = await startNoiseRegistry({ bearer: FORWARD_BEARER });
  const auth = bearerAuth(FORWARD_BEARER);
  const identity = generateIdentity();
  const fwd = startNoiseForwarder({
    registry: new RegistryClient(registry.url, env, auth, {
      noiseKey: publicKeyJson({ dh: identity.dh.publicKey, kem: identity.kem.publicKey }),
    }),
    auth,
    log: silentLogger,
    connect: parseConnectUrl(connect),
    identity,
    initialRetryMs,
  });
  return { registry, fwd };
}
