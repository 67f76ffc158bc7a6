// `exec-server forward` in process: a fake registry (bearer auth) and a forwarder that relays its links to `connect`.
import { bearerAuth } from '../../src/remote/auth.js';
import type { DirectExecutor } from '../../src/remote/direct.js';
import { parseConnectUrl, startForwarder } from '../../src/remote/forward.js';
import { RegistryClient } from '../../src/remote/registry.js';
import { silentLogger } from '../../src/server/core/log.js';
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
