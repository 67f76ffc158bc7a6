import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildChildEnv, sanitizedServerEnv, withoutSecrets } from '../../src/process/env.js';
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
