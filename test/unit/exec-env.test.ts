import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildChildEnv, sanitizedServerEnv, withoutSecrets } from '../../src/process/env.js';
import { SecretScrub } from '../../src/process/secretScrub.js';
import { EnvPolicy } from '../../src/protocol/exec.js';

const server = {
  PATH: '/usr/bin:/bin',
  HOME: '/home/u',
  LANG: 'C.UTF-8',
  USER: 'u',
  EDITOR: 'vi',
  OPENAI_API_KEY: 'k',
  GITHUB_TOKEN: 't',
  my_secret_thing: 's',
  Keyboard: 'k2',
  PLAIN: 'p',
};
const policy = (p: Partial<EnvPolicy>) => EnvPolicy.parse(p);

describe('child environment (protocol.md §5.10)', () => {
  it('without envPolicy the child gets exactly env', () => {
    assert.deepEqual(buildChildEnv({ FOO: 'bar' }, null, server).env, { FOO: 'bar' });
    assert.deepEqual(buildChildEnv({}, undefined, server).env, {});
  });

  it('inherit none + set + env → exactly those', () => {
    const r = buildChildEnv({ B: '2' }, policy({ inherit: 'none', set: { A: '1' } }), server);
    assert.deepEqual(r.env, { A: '1', B: '2' });
    assert.deepEqual(r.inherited, []);
  });

  it('inherit all drops *KEY*, *SECRET*, *TOKEN* case-insensitively unless ignoreDefaultExcludes', () => {
    const r = buildChildEnv({}, policy({ inherit: 'all' }), server);
    assert.deepEqual(Object.keys(r.env).sort(), ['EDITOR', 'HOME', 'LANG', 'PATH', 'PLAIN', 'USER']);
    const all = buildChildEnv({}, policy({ inherit: 'all', ignoreDefaultExcludes: true }), server);
    assert.deepEqual(all.env, server);
  });

  it('inherit core keeps only the core names', () => {
    const r = buildChildEnv({}, policy({ inherit: 'core' }), { ...server, SHELL: '/bin/sh', TMPDIR: '/t' });
    assert.deepEqual(Object.keys(r.env).sort(), ['HOME', 'LANG', 'PATH', 'SHELL', 'TMPDIR', 'USER']);
  });

  it('order: inherit, default excludes, exclude, set, includeOnly, then env overlays', () => {
    const r = buildChildEnv(
      { OVER: 'env', PLAIN: 'env-wins' },
      policy({
        inherit: 'all',
        exclude: ['ed*', 'pl?in'],
        set: { EDITOR: 'nano', NEW: 'n', OPENAI_API_KEY: 'set-wins' },
        includeOnly: ['EDITOR', 'NEW', 'open*', 'HOME'],
      }),
      server,
    );
    // exclude drops EDITOR (ed*), set re-adds it; `?` is literal, so pl?in excludes nothing; includeOnly then
    // keeps EDITOR/NEW/OPENAI_API_KEY/HOME; env is overlaid last, whatever includeOnly said.
    assert.deepEqual(r.env, {
      HOME: '/home/u',
      EDITOR: 'nano',
      NEW: 'n',
      OPENAI_API_KEY: 'set-wins',
      OVER: 'env',
      PLAIN: 'env-wins',
    });
  });

  it('patterns are whole-name wildcards with regex characters taken literally', () => {
    const env = { 'A.B': '1', AXB: '2', 'X+Y': '3', XXY: '4' };
    const r = buildChildEnv({}, policy({ inherit: 'all', exclude: ['A.B', 'X+Y'] }), env);
    assert.deepEqual(r.env, { AXB: '2', XXY: '4' });
  });

  it('sanitizedServerEnv strips ELECTRON_*, NODE_OPTIONS, CORRAL_*, NODE_CHANNEL_FD and npm_* names', () => {
    const src = {
      ELECTRON_RUN_AS_NODE: '1',
      electron_x: '1',
      NODE_OPTIONS: '--x',
      CORRAL_TOKEN: 't',
      NODE_CHANNEL_FD: '3',
      npm_config_cache: '/c',
      PATH: '/bin',
      NODE_ENV: 'production',
      HOME: '/h',
      UNDEF: undefined,
    };
    assert.deepEqual(sanitizedServerEnv(src), { PATH: '/bin', NODE_ENV: 'production', HOME: '/h' });
    const r = buildChildEnv(
      {},
      policy({ inherit: 'all', ignoreDefaultExcludes: true }),
      sanitizedServerEnv(src),
    );
    assert.ok(!Object.keys(r.env).some((k) => /^(electron_|corral_|node_options$)/i.test(k)));
  });

  it('EnvPolicy defaults: inherit all, default excludes on', () => {
    assert.deepEqual(policy({}), {
      inherit: 'all',
      ignoreDefaultExcludes: false,
      exclude: [],
      set: {},
      includeOnly: [],
    });
  });
});

describe('the server credentials never reach a child (issue 13)', () => {
  it('drops every variable whose value or name contains a secret; keeps the rest untouched', () => {
    const env = {
      CODEX_EXEC_SERVER_URL: 'ws://127.0.0.1:1/?token=sekrit-123',
      ELSEWHERE: 'x sekrit-123 y',
      sekrit_123: 'no', // a name is not the secret: kept
      named: 'ok',
      PATH: '/bin',
    };
    const r = withoutSecrets(env, ['sekrit-123', '']);
    assert.deepEqual(r.env, { sekrit_123: 'no', named: 'ok', PATH: '/bin' });
    assert.deepEqual(r.removed.sort(), ['CODEX_EXEC_SERVER_URL', 'ELSEWHERE']);
    assert.deepEqual(withoutSecrets({ a: 'b' }, []).env, { a: 'b' });
    assert.deepEqual(withoutSecrets({ 'k-sekrit-123': 'v' }, ['sekrit-123']).removed, ['k-sekrit-123']);
  });
});

describe('a credential in any encoding never reaches a child (issue 30 item 1)', () => {
  // A base64 token, as `openssl rand -base64 32` makes: `+`, `/` and `=` must be encoded in a URL.
  const TOKEN = 'q+Ab/9cD+eF0gH1/iJ2kL3mN4oP5qR6sT7uV8wX9yZ0=';
  const pctLower = (s: string) => encodeURIComponent(s).replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase());
  const fully = (s: string, upper: boolean) =>
    [...Buffer.from(s)]
      .map((b) => `%${b.toString(16).padStart(2, '0')[upper ? 'toUpperCase' : 'toLowerCase']()}`)
      .join('');
  const jsonEscapedAll = (s: string) =>
    [...s].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
  const variants: Record<string, string> = {
    raw: TOKEN,
    pctUpper: `ws://127.0.0.1:9/?token=${encodeURIComponent(TOKEN)}`,
    pctLower: `ws://127.0.0.1:9/?token=${pctLower(TOKEN)}`,
    pctMixed: `?token=${encodeURIComponent(TOKEN).replace('%2B', '%2b')}`,
    fullyUpper: `?token=${fully(TOKEN, true)}`,
    fullyLower: `?token=${fully(TOKEN, false)}`,
    form: new URLSearchParams({ token: TOKEN, x: 'a b' }).toString(),
    doubly: encodeURIComponent(`ws://h/?token=${encodeURIComponent(TOKEN)}`),
    json: JSON.stringify({ url: `ws://127.0.0.1:9/?token=${TOKEN}` }).replace(/\//g, '\\/'),
    jsonUnicode: `{"t":"${TOKEN.replace(/\+/g, '\\u002b').replace(/\//g, '\\u002F')}"}`,
    jsonAll: `{"t":"${jsonEscapedAll(TOKEN)}"}`,
    jsonInUrl: `http://x/?cfg=${encodeURIComponent(JSON.stringify({ token: TOKEN }).replace(/\+/g, '\\u002b'))}`,
    urlInJson: JSON.stringify({ u: `ws://h/?token=${encodeURIComponent(TOKEN)}` }),
    longer: `ws://127.0.0.1:9/some/path?a=1&token=${encodeURIComponent(TOKEN)}&b=2#frag`,
    entities: TOKEN.replace(/\+/g, '&#43;').replace(/\//g, '&#x2F;').replace(/=/g, '&equals;'),
    base64: Buffer.from(`user:${TOKEN}`).toString('base64'),
    base64Shift1: Buffer.from(`u:${TOKEN}:x`).toString('base64'),
    base64Shift2: Buffer.from(`us:${TOKEN}!`).toString('base64url'),
    hex: Buffer.from(`>${TOKEN}<`).toString('hex'),
    plusAsSpace: `token=${TOKEN.replace(/\+/g, ' ')}`,
  };

  for (const [name, value] of Object.entries(variants)) {
    it(`drops ${name}`, () => {
      const r = withoutSecrets({ CODEX_EXEC_SERVER_URL: value, KEEP: 'kept' }, [TOKEN]);
      assert.deepEqual(r.removed, ['CODEX_EXEC_SERVER_URL'], `${name} survived: ${value}`);
      assert.deepEqual(r.env, { KEEP: 'kept' });
    });
  }

  it('a name holding an encoded secret is dropped too', () => {
    const r = withoutSecrets({ [`X_${encodeURIComponent(TOKEN)}`]: '1', Y: '2' }, [TOKEN]);
    assert.deepEqual(r.env, { Y: '2' });
  });

  it('other values, encoded or not, are kept untouched', () => {
    const env = {
      PATH: '/usr/local/bin:/usr/bin:/bin',
      URL: 'ws://127.0.0.1:9/?token=q%2BAb%2F9cD%2BeF0gH1%2FiJ2kL3mN4oP5qR6sT7uV8wX9yZ1%3D', // one character off
      JSON: '{"a":"\\u002b\\/","b":"%2B%2F"}',
      DEEP: '%25'.repeat(5000),
      ESC: '\\'.repeat(5000),
      AMP: '&#'.repeat(5000),
    };
    const r = withoutSecrets(env, [TOKEN]);
    assert.deepEqual(r.removed, []);
    assert.equal(r.env, env);
  });

  it('a secret that expires is forgotten', () => {
    let now = 1000;
    const scrub = new SecretScrub([], () => now);
    scrub.add('presented-jwt-value-1', 2000);
    assert.deepEqual(scrub.scrub({ A: 'presented-jwt-value-1' }).removed, ['A']);
    now = 2000;
    assert.deepEqual(scrub.scrub({ A: 'presented-jwt-value-1' }).removed, []);
    assert.equal(scrub.size, 0);
  });

  it('scrubbing a 50-variable environment costs microseconds', () => {
    const scrub = new SecretScrub([TOKEN, 'panel-token-panel-token-panel-token', 'x'.repeat(43)]);
    const env: Record<string, string> = {};
    for (let i = 0; i < 50; i++)
      env[`VAR_${i}`] = i % 2 ? `/usr/lib/thing-${i}/bin:/opt/x/${i}:/usr/share/${i}` : `v${i}`;
    env.SOME_URL = 'https://example.test/a%20b?c=d&e=f';
    for (let i = 0; i < 2000; i++) scrub.scrub(env);
    const n = 20_000;
    const t = process.hrtime.bigint();
    for (let i = 0; i < n; i++) scrub.scrub(env);
    const us = Number(process.hrtime.bigint() - t) / n / 1000;
    assert.ok(us < 50, `${us.toFixed(1)} µs per scrub`);
  });
});
