// process/start's params of the shape agents send at every start are read by execParamsFast (src/protocol/exec.ts,
// issue 32), not by the schema: a second reader on the agent's input, so it gets the deep, wide, huge and malformed
// input every parser gets. For each: the fast path gives exactly the schema's output or leaves the input to the schema
// (never a value the schema would refuse), in bounded time; over a real server, a child gets exactly the environment the
// schema gives (names that are Object.prototype's own included), and the server still serves afterwards.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ExecParams, execParamsFast } from '../../src/protocol/exec.js';
import { specialEntry } from '../../src/protocol/sandbox.js';
import { stillServes } from '../helpers/hostileJson.js';
import { serverSuite } from '../helpers/server.js';
import { workspaceWriteSandbox } from '../helpers/startParams.js';

const base = {
  processId: 'p',
  argv: ['/bin/true'],
  cwd: '/tmp',
  env: { PATH: '/usr/bin:/bin' },
  tty: false,
  arg0: null,
};
/** What a client's JSON becomes on the server (JSON.parse makes `__proto__` an own member). */
const wire = (text: string): unknown => JSON.parse(text);
const json = (v: unknown): string => JSON.stringify(v);

/** The fast path agrees with the schema on `input`; returns whether it took it. */
function agrees(input: unknown, name: string): boolean {
  const t0 = performance.now();
  const fast = execParamsFast(input);
  const ms = performance.now() - t0;
  const r = ExecParams.safeParse(input);
  assert.ok(ms < 2000, `${name}: the fast path took ${ms} ms`);
  if (!r.success) {
    assert.equal(fast, undefined, `${name}: the schema refuses it, the fast path must not take it`);
    return false;
  }
  if (fast !== undefined) assert.deepStrictEqual(fast, r.data, name);
  return fast !== undefined;
}

const deepArray = (n: number): string => `${'['.repeat(n)}${']'.repeat(n)}`;
const deepObject = (n: number): string => `${'{"a":'.repeat(n)}{}${'}'.repeat(n)}`;
const MIB = 1 << 20;

describe('execParamsFast against hostile process/start params', () => {
  test('deep: 5000 levels in each member are left to the schema, which refuses them', () => {
    /** The base start with `member`'s value (or one inside it) replaced by `deep`. */
    const with_ = (extra: Record<string, unknown>, deep: string) =>
      wire(json({ ...base, ...extra }).replace('"__DEEP__"', deep));
    for (const member of [
      'processId',
      'argv',
      'cwd',
      'env',
      'tty',
      'arg0',
      'pipeStdin',
      'sandbox',
      'envPolicy',
    ])
      for (const deep of [deepArray(5000), deepObject(5000)])
        assert.equal(agrees(with_({ [member]: '__DEEP__' }, deep), `${member} deep`), false);
    const policy = { inherit: 'all', ignoreDefaultExcludes: true, exclude: [], set: {}, includeOnly: [] };
    for (const inner of ['exclude', 'set', 'includeOnly'])
      assert.equal(
        agrees(
          with_({ envPolicy: { ...policy, [inner]: '__DEEP__' } }, deepObject(5000)),
          `envPolicy.${inner} deep`,
        ),
        false,
      );
    // metadata is any JSON (the schema's record of unknown): a deep value is the schema's too, taken as it is.
    assert.equal(
      agrees(with_({ metadata: { a: '__DEEP__' } }, deepObject(5000)), 'metadata value deep'),
      true,
    );
    assert.equal(agrees(with_({ metadata: '__DEEP__' }, deepArray(5000)), 'metadata deep array'), false);
    assert.equal(agrees(with_({ argv: ['a', '__DEEP__'] }, deepArray(5000)), 'argv element deep'), false);
    assert.equal(agrees(with_({ env: { A: '__DEEP__' } }, deepObject(5000)), 'env value deep'), false);
  });

  test('wide: 100k argv elements and 100k env entries are taken whole; one bad entry at the end is left to the schema', () => {
    const argv = Array.from({ length: 100_000 }, (_, i) => `a${i}`);
    const env = Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`K${i}`, `v${i}`]));
    assert.equal(agrees(wire(json({ ...base, argv, env })), 'wide'), true);
    assert.equal(agrees(wire(json({ ...base, argv: [...argv, 1] })), 'wide argv, bad last'), false);
    assert.equal(agrees(wire(json({ ...base, env: { ...env, LAST: 1 } })), 'wide env, bad last'), false);
    const policy = {
      inherit: 'all',
      ignoreDefaultExcludes: true,
      exclude: argv,
      set: env,
      includeOnly: argv,
    };
    assert.equal(
      agrees(wire(json({ ...base, envPolicy: policy, metadata: env })), 'wide envPolicy and metadata'),
      true,
    );
    assert.equal(
      agrees(
        wire(json({ ...base, envPolicy: { ...policy, set: { ...env, LAST: 1 } } })),
        'wide set, bad last',
      ),
      false,
    );
    // 100k members the table does not know: the schema decides (and strips them).
    const unknown = Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`u${i}`, i]));
    assert.equal(agrees(wire(json({ ...base, ...unknown })), 'wide unknown members'), false);
  });

  test('huge: a 1 MiB process id, argv element, env name and value, and cwd give the schema output', () => {
    const big = 'x'.repeat(MIB);
    for (const [name, extra] of [
      ['processId', { processId: big }],
      ['argv', { argv: [big] }],
      ['env name', { env: { [big]: 'v' } }],
      ['env value', { env: { V: big } }],
      ['cwd', { cwd: `/${big}` }],
      ['cwd URI', { cwd: `file:///${'%41'.repeat(MIB / 3)}` }],
      ['arg0', { arg0: big }],
      ['metadata', { metadata: { [big]: big } }],
      [
        'envPolicy',
        {
          envPolicy: {
            inherit: 'all',
            ignoreDefaultExcludes: true,
            exclude: [big],
            set: { [big]: big },
            includeOnly: [big],
          },
        },
      ],
    ] as const)
      agrees(wire(json({ ...base, ...extra })), `huge ${name}`);
  });

  test("malformed: Object.prototype's names, __proto__, odd strings and encodings give the schema output or go to it", () => {
    const cases: [string, string][] = [
      ['__proto__ member', `${json(base).slice(0, -1)},"__proto__":{"tty":true}}`],
      ['__proto__ env name', `${json(base).slice(0, -1)},"env":{"__proto__":"x","A":"b"}}`],
      ['__proto__ env object', `${json(base).slice(0, -1)},"env":{"__proto__":{"A":"b"}}}`],
      [
        'prototype names in env',
        json({ ...base, env: { constructor: 'c', toString: 't', hasOwnProperty: 'h' } }),
      ],
      [
        'lone surrogates',
        json({ ...base, processId: '\ud800', argv: ['\udfff'], env: { '\ud800': '\udc00' } }),
      ],
      ['NUL', json({ ...base, processId: 'a\u0000b', argv: ['a\u0000'], env: { 'A\u0000': 'b\u0000' } })],
      ['cwd %00', json({ ...base, cwd: 'file:///tmp/%00' })],
      ['cwd bad escape', json({ ...base, cwd: 'file:///%zz' })],
      ['cwd encoded slash', json({ ...base, cwd: 'file:///tmp%2F..%2Fetc' })],
      ['cwd relative', json({ ...base, cwd: 'tmp' })],
      ['cwd host', json({ ...base, cwd: 'file://evil/tmp' })],
      ['duplicate keys', `${json(base).slice(0, -1)},"tty":"yes","tty":false}`],
      ['number keys in env', json({ ...base, env: { 1: 'a', 0: 'b', Z: 'c' } })],
      ['not an object', '[{"processId":"p"}]'],
      ['empty', '{}'],
      ['null', 'null'],
    ];
    for (const [name, text] of cases) agrees(wire(text), name);
  });

  test('a kept sandbox policy: the fast path takes only its exact text; deep, wide, huge and malformed policies around it go to the schema', () => {
    const policy = workspaceWriteSandbox();
    /** The base start with this text as its sandbox member. */
    const start = (text: string) => wire(`${json(base).slice(0, -1)},"sandbox":${text}}`);
    const kept = json(policy);
    // The schema parses it once; from then on the fast path gives the schema's output for exactly that text.
    assert.equal(agrees(start(kept), 'kept policy, first'), false);
    assert.equal(agrees(start(kept), 'kept policy, again'), true);
    const wide = Array.from({ length: 50_000 }, () => specialEntry('root', 'read'));
    const near: [string, string][] = [
      ['a member more', json({ ...policy, extra: 1 })],
      ['a member less', json({ ...policy, sandbox: undefined })],
      ['members reordered', json(Object.fromEntries(Object.entries(policy).reverse()))],
      ['another value', json({ ...policy, useLegacyLandlock: 'yes' })],
      [
        'deep entries',
        json({ ...policy, fileSystemPolicy: '__DEEP__' }).replace('"__DEEP__"', deepObject(5000)),
      ],
      ['wide entries', json({ ...policy, fileSystemPolicy: { kind: 'restricted', entries: wide } })],
      ['a huge cwd', json({ ...policy, sandboxPolicyCwd: `/${'x'.repeat(MIB)}` })],
      ['__proto__', `${kept.slice(0, -1)},"__proto__":{"sandbox":"none"}}`],
      ['not an object', `[${kept}]`],
      ['the kept text twice over', `${kept.slice(0, -1)},"again":${kept}}`],
    ];
    for (const [name, text] of near) {
      const input = start(text);
      // Never the kept parse for another text: whatever it takes is the schema's output for this one.
      agrees(input, name);
    }
    // None of them disturbed the kept parse.
    assert.equal(agrees(start(kept), 'kept policy, after'), true);
  });

  describe('over a real server', () => {
    const srv = serverSuite();
    test("a child gets exactly the environment the schema gives, Object.prototype's names included", async () => {
      const env = {
        PATH: '/usr/bin:/bin',
        constructor: 'c1',
        toString: 't2',
        hasOwnProperty: 'h3',
        valueOf: 'v4',
        ...Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`W${i}`, `w${i}`])),
      };
      const start = (processId: string, proto: boolean) =>
        wire(
          json({ processId, argv: ['/usr/bin/env'], cwd: '/tmp', env, tty: false, arg0: null }).replace(
            '"PATH":',
            proto ? '"__proto__":"p5","PATH":' : '"PATH":',
          ),
        );
      // Without __proto__ in env the fast path reads it; with it, the schema (which drops that name).
      assert.notEqual(execParamsFast(start('fast-env', false)), undefined);
      assert.equal(execParamsFast(start('schema-env', true)), undefined);
      for (const [id, proto] of [
        ['fast-env', false],
        ['schema-env', true],
      ] as const) {
        const params = start(id, proto);
        const want = ExecParams.parse(params).env;
        await srv.c.request('process/start', params);
        await srv.c.collect(id);
        const got = new Map(
          srv.c
            .output(id, 'stdout')
            .split('\n')
            .filter(Boolean)
            .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
        );
        for (const [k, v] of Object.entries(want)) assert.equal(got.get(k), v, `${id}: ${k}`);
        assert.equal(got.has('__proto__'), false, `${id}: no __proto__ in the child's environment`);
        assert.equal(got.get('constructor'), 'c1', id);
      }
      await stillServes(srv.c, 'fast-after');
    });
  });
});
