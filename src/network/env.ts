/**
 * Every proxy environment variable the server knows, in one place: the 33 the managed proxy writes over a child's
 * environment (network-proxy.md §4.6), the URL-valued ones a sandbox reads from a command's environment to route it,
 * the ones an upstream proxy is read from, and the CA-bundle ones of TLS interception. Nothing else in src names
 * them.
 */

export const DEFAULT_NO_PROXY =
  'localhost,127.0.0.1,::1,*.local,.local,169.254.0.0/16,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16';

const HTTP_KEYS = [
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'http_proxy',
  'https_proxy',
  'YARN_HTTP_PROXY',
  'YARN_HTTPS_PROXY',
  'npm_config_http_proxy',
  'npm_config_https_proxy',
  'npm_config_proxy',
  'NPM_CONFIG_HTTP_PROXY',
  'NPM_CONFIG_HTTPS_PROXY',
  'NPM_CONFIG_PROXY',
  'BUNDLE_HTTP_PROXY',
  'BUNDLE_HTTPS_PROXY',
  'PIP_PROXY',
  'DOCKER_HTTP_PROXY',
  'DOCKER_HTTPS_PROXY',
  'WS_PROXY',
  'WSS_PROXY',
  'ws_proxy',
  'wss_proxy',
] as const;
const NO_PROXY_KEYS = [
  'NO_PROXY',
  'no_proxy',
  'npm_config_noproxy',
  'NPM_CONFIG_NOPROXY',
  'YARN_NO_PROXY',
  'BUNDLE_NO_PROXY',
] as const;
const ALL_KEYS = ['ALL_PROXY', 'all_proxy', 'FTP_PROXY', 'ftp_proxy'] as const;

/** The 33 variables the managed proxy writes over a child's environment (§4.6). */
export const MANAGED_PROXY_ENV_KEYS: readonly string[] = [
  'CODEX_NETWORK_ALLOW_LOCAL_BINDING',
  ...HTTP_KEYS,
  ...NO_PROXY_KEYS,
  'ELECTRON_GET_USE_PROXY',
  ...ALL_KEYS,
];

/**
 * The proxy URL variables a sandbox reads from a command's environment, case-insensitively (as Codex's proxy
 * routing): the upper-case names of the URL-valued keys above.
 */
export const PROXY_URL_ENV_KEYS: readonly string[] = [
  ...new Set([...HTTP_KEYS, ...ALL_KEYS].map((k) => k.toUpperCase())),
];

/** URL variables that tools read in either case: a rewritten one is set in both (curl ignores HTTP_PROXY for http://). */
export const BOTH_CASE_PROXY_URL_KEYS: readonly string[] = [
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'ALL_PROXY',
  'FTP_PROXY',
  'WS_PROXY',
  'WSS_PROXY',
];

/** Where `allow_upstream_proxy` finds the proxies to chain to (upper case first, then lower case). */
export const UPSTREAM_PROXY_ENV_KEYS = {
  http: 'HTTP_PROXY',
  https: 'HTTPS_PROXY',
  all: 'ALL_PROXY',
} as const;

/**
 * The CA-bundle variables a child gets when its proxy may intercept TLS (issue 34, item 2): every one Codex sets,
 * plus Deno's, the AWS SDKs' and gRPC's. Each names the one bundle (system roots + the server's startup CA files +
 * the Corral CA).
 */
export const CA_BUNDLE_ENV_KEYS: readonly string[] = [
  'CODEX_CA_CERTIFICATE',
  'SSL_CERT_FILE',
  'REQUESTS_CA_BUNDLE',
  'CURL_CA_BUNDLE',
  'NODE_EXTRA_CA_CERTS',
  'GIT_SSL_CAINFO',
  'CARGO_HTTP_CAINFO',
  'PIP_CERT',
  'BUNDLE_SSL_CA_CERT',
  'npm_config_cafile',
  'NPM_CONFIG_CAFILE',
  'DENO_CERT',
  'AWS_CA_BUNDLE',
  'GRPC_DEFAULT_SSL_ROOTS_FILE_PATH',
];

export function buildProxyEnv(opts: {
  httpPort: number;
  socksPort?: number | undefined;
  allowLocalBinding: boolean;
  /** The CA bundle to point CA_BUNDLE_ENV_KEYS at, when the proxy may intercept TLS. */
  caBundle?: string | undefined;
}): Record<string, string> {
  const http = `http://127.0.0.1:${opts.httpPort}`;
  const all = opts.socksPort !== undefined ? `socks5h://127.0.0.1:${opts.socksPort}` : http;
  const env: Record<string, string> = {
    CODEX_NETWORK_ALLOW_LOCAL_BINDING: opts.allowLocalBinding ? '1' : '0',
  };
  for (const k of HTTP_KEYS) env[k] = http;
  for (const k of NO_PROXY_KEYS) env[k] = DEFAULT_NO_PROXY;
  env.ELECTRON_GET_USE_PROXY = 'true';
  for (const k of ALL_KEYS) env[k] = all;
  if (opts.caBundle !== undefined) for (const k of CA_BUNDLE_ENV_KEYS) env[k] = opts.caBundle;
  return env;
}

/**
 * Returns the child's environment with the proxy variables overwritten (and brokered credentials replaced by dummies
 * when the proxy brokers them). Stale spellings of the same keys in another
 * case (`Http_Proxy`) are removed too, so no variant that a tool might read points elsewhere.
 */
export function applyProxyEnv(
  childEnv: Record<string, string>,
  proxy: { env: Record<string, string>; brokerEnv?: ((env: Record<string, string>) => void) | undefined },
): Record<string, string> {
  const upper = new Set(Object.keys(proxy.env).map((k) => k.toUpperCase()));
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(childEnv)) {
    if (upper.has(k.toUpperCase()) && !(k in proxy.env)) continue;
    out[k] = v;
  }
  // The credential broker (issue 34) keeps the real tokens and leaves the child shaped dummies.
  proxy.brokerEnv?.(out);
  return Object.assign(out, proxy.env);
}
