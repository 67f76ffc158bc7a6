/**
 * What happens to a request inside an intercepted tunnel before it goes upstream: the host's hooks first (a refusal,
 * or their header actions), then the credential broker on the headers the hooks left (a header a hook stripped
 * cannot be brokered).
 */
import type { CredentialBroker } from './broker.js';
import { applyActions, type MitmHooks } from './hooks.js';
import type { RequestRewriter } from './interceptor.js';

export function requestRewriter(
  hooks: MitmHooks | undefined,
  broker: CredentialBroker | undefined,
): RequestRewriter | undefined {
  if (!hooks && !broker) return undefined;
  return (req) => {
    const h = hooks?.apply(req);
    if (h !== undefined && 'refusal' in h) return { refusal: h.refusal };
    const headers = h !== undefined ? applyActions(req.rawHeaders, h) : req.rawHeaders;
    const b = broker?.rewrite(req.host, headers, 'tls');
    if (b !== undefined) return { headers: b.headers, credential: b.credential };
    if (h === undefined) return undefined;
    return { headers, ...(h.credential !== undefined ? { credential: h.credential } : {}) };
  };
}

/** Whether a host's TLS tunnels are intercepted even outside limited mode: it has hooks or a brokered credential. */
export function wantsInterception(
  hooks: MitmHooks | undefined,
  broker: CredentialBroker | undefined,
  host: string,
): boolean {
  return (hooks?.has(host) ?? false) || (broker?.has(host) ?? false);
}
