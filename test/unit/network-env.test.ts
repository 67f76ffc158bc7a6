import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  applyProxyEnv,
  buildProxyEnv,
  DEFAULT_NO_PROXY,
  MANAGED_PROXY_ENV_KEYS,
  PROXY_URL_ENV_KEYS,
} from '../../src/network/env.js';

const EXPECTED_KEYS =
  `CODEX_NETWORK_ALLOW_LOCAL_BINDING HTTP_PROXY HTTPS_PROXY http_proxy https_proxy YARN_HTTP_PROXY
YARN_HTTPS_PROXY npm_config_http_proxy npm_config_https_proxy npm_config_proxy NPM_CONFIG_HTTP_PROXY
NPM_CONFIG_HTTPS_PROXY NPM_CONFIG_PROXY BUNDLE_HTTP_PROXY BUNDLE_HTTPS_PROXY PIP_PROXY DOCKER_HTTP_PROXY
DOCKER_HTTPS_PROXY WS_PROXY WSS_PROXY ws_proxy wss_proxy NO_PROXY no_proxy npm_config_noproxy NPM_CONFIG_NOPROXY
YARN_NO_PROXY BUNDLE_NO_PROXY ELECTRON_GET_USE_PROXY ALL_PROXY all_proxy FTP_PROXY ftp_proxy`.split(/\s+/);

test('T1: exactly the 33 keys; ALL_PROXY is socks5h; the seed NO_PROXY list', () => {
  const env = buildProxyEnv({ httpPort: 1111, socksPort: 2222, allowLocalBinding: false });
  assert.equal(Object.keys(env).length, 33);
  assert.deepEqual(Object.keys(env).sort(), [...EXPECTED_KEYS].sort());
  assert.deepEqual([...MANAGED_PROXY_ENV_KEYS].sort(), [...EXPECTED_KEYS].sort());
  assert.equal(env.HTTP_PROXY, 'http://127.0.0.1:1111');
  assert.equal(env.wss_proxy, 'http://127.0.0.1:1111');
  assert.equal(env.ALL_PROXY, 'socks5h://127.0.0.1:2222');
  assert.equal(env.ftp_proxy, 'socks5h://127.0.0.1:2222');
  assert.equal(
    env.NO_PROXY,
    'localhost,127.0.0.1,::1,*.local,.local,169.254.0.0/16,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16',
  );
  assert.equal(env.YARN_NO_PROXY, DEFAULT_NO_PROXY);
  assert.equal(env.ELECTRON_GET_USE_PROXY, 'true');
  assert.equal(env.CODEX_NETWORK_ALLOW_LOCAL_BINDING, '0');
});

test('T2: without SOCKS, ALL_PROXY and FTP_PROXY point at the HTTP proxy; ALB=1', () => {
  const env = buildProxyEnv({ httpPort: 1111, allowLocalBinding: true });
  assert.equal(env.ALL_PROXY, 'http://127.0.0.1:1111');
  assert.equal(env.FTP_PROXY, 'http://127.0.0.1:1111');
  assert.equal(env.CODEX_NETWORK_ALLOW_LOCAL_BINDING, '1');
});

test('applyProxyEnv overwrites stale proxy variables, drops other-case spellings, keeps the rest', () => {
  const proxy = { env: buildProxyEnv({ httpPort: 1111, socksPort: 2222, allowLocalBinding: false }) };
  const out = applyProxyEnv(
    { PATH: '/usr/bin', HTTP_PROXY: 'http://stale:1', Http_Proxy: 'http://stale:2' },
    proxy,
  );
  assert.equal(out.HTTP_PROXY, 'http://127.0.0.1:1111');
  assert.equal(out.Http_Proxy, undefined);
  assert.equal(out.PATH, '/usr/bin');
  assert.equal(Object.keys(out).length, 34);
});

test('the proxy URL variables the sandbox routes by are exactly the URL-valued keys the proxy sets, upper-cased', () => {
  const env = buildProxyEnv({ httpPort: 1111, socksPort: 2222, allowLocalBinding: false });
  const urlKeys = new Set(
    Object.entries(env)
      .filter(([, v]) => /^[a-z0-9]+:\/\/127\.0\.0\.1:/.test(v))
      .map(([k]) => k.toUpperCase()),
  );
  assert.deepEqual([...PROXY_URL_ENV_KEYS].sort(), [...urlKeys].sort());
});
