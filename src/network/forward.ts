/**
 * Plain forwarding of an admitted HTTP request (network-proxy.md §4.2 steps 6–10): origin form to a checked address
 * over the pooled agents (TLS by the proxy itself for `https://`), or absolute form / CONNECT through the upstream
 * proxy for public targets; hop-by-hop headers dropped both ways; any failure before the response is a 502.
 */
import http from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import type { Admitted } from './admission.js';
import { type Dialer, type ForwardAgents, openTunnel, tlsOver } from './dial.js';
import { endToEndHeaders, forwardedRequestHeaders } from './headers.js';
import { send, textResponse } from './responses.js';
import type { AbsoluteTarget } from './target.js';
import { mayUseUpstream, type UpstreamProxies, upstreamFor } from './upstream.js';

export interface ForwardDeps {
  agents: ForwardAgents;
  dial: Dialer;
  upstream: UpstreamProxies;
}

const upstreamFailure = () => textResponse(502, 'upstream failure');

/**
 * Sends `req` on to its target and streams the answer back through `res`; `rawHeaders` are its headers as they go
 * (the credential broker may have put a real token in place of a dummy).
 */
export function forward(
  deps: ForwardDeps,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  target: AbsoluteTarget,
  a: Admitted,
  rawHeaders: readonly string[] = req.rawHeaders,
): void {
  const secure = target.scheme === 'https' || target.scheme === 'wss';
  const proxy = upstreamFor(secure ? 'tunnel' : 'http', deps.upstream);
  const viaUpstream = proxy !== undefined && mayUseUpstream(a.host, a.addresses, deps.upstream, target.port);
  const address = a.addresses[0];
  if (address === undefined && !viaUpstream) {
    send(res, upstreamFailure());
    return;
  }
  const headers = forwardedRequestHeaders(rawHeaders, target.authority);
  const common = { method: req.method, setHost: false };
  let upstream: http.ClientRequest;
  if (!viaUpstream) {
    upstream = (secure ? https : http).request({
      ...common,
      agent: secure ? deps.agents.https : deps.agents.http,
      host: address,
      port: target.port,
      ...({ servername: a.host } as http.RequestOptions),
      path: target.path,
      headers: headers as unknown as http.OutgoingHttpHeaders,
    });
  } else if (!secure) {
    // Plain HTTP through the upstream proxy: absolute-form, as a client would send it.
    const url = `http://${target.authority}${target.path}`;
    const { module, options } = deps.agents.upstream.requestOptions(proxy, url);
    const auth = (options.headers as Record<string, string> | undefined)?.['proxy-authorization'];
    if (auth) headers.push('proxy-authorization', auth);
    upstream = module.request({
      ...options,
      ...common,
      headers: headers as unknown as http.OutgoingHttpHeaders,
    });
  } else {
    // https:// through the upstream proxy: CONNECT, then TLS to the target inside the tunnel.
    const tunnelOut = { dial: deps.dial, upstream: { ...deps.upstream, https: proxy } };
    const createConnection = (_o: unknown, cb: (err: Error | null, s?: Duplex) => void) => {
      openTunnel(tunnelOut, { host: a.host, addresses: a.addresses, port: target.port })
        .then((raw) => tlsOver(raw, a.host))
        .then((s) => cb(null, s), cb);
      return undefined;
    };
    upstream = https.request({
      ...common,
      agent: false,
      createConnection: createConnection as unknown as http.RequestOptions['createConnection'],
      host: a.host,
      port: target.port,
      path: target.path,
      headers: headers as unknown as http.OutgoingHttpHeaders,
    });
  }
  relay(req, res, upstream);
}

/** Pipes the request body up and the response down; a failure before the response head is a 502. */
export function relay(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  upstream: http.ClientRequest,
): void {
  let responded = false;
  upstream.on('response', (up) => {
    responded = true;
    const out = endToEndHeaders(up.rawHeaders, 'response');
    res.sendDate = false;
    try {
      res.writeHead(up.statusCode ?? 502, up.statusMessage, out as unknown as http.OutgoingHttpHeaders);
    } catch {
      up.destroy();
      send(res, upstreamFailure());
      return;
    }
    up.pipe(res);
    up.on('error', () => res.destroy());
  });
  upstream.on('error', () => {
    if (!responded && !res.headersSent) send(res, upstreamFailure());
    else res.destroy();
  });
  res.on('close', () => {
    if (!res.writableFinished) upstream.destroy();
  });
  const te = req.headers['transfer-encoding'];
  const cl = req.headers['content-length'];
  if (te === undefined && (cl === undefined || cl === '0')) {
    // No body: skip the pipe machinery on the hot path.
    upstream.end();
    req.resume();
  } else {
    req.pipe(upstream);
  }
}
