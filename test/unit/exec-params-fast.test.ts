// process/start's params are read without zod when they have the shape agents send at every start
// (protocol/exec.ts execParamsFast, issue 32): the same output as the schema, member for member and in the same
// order; any other shape goes to the schema, so every error text stays the schema's.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ExecParams, execParamsFast } from '../../src/protocol/exec.js';
import { METHODS } from '../../src/protocol/methods.js';
import { parseParams } from '../../src/server/core/params.js';
import { codex169Start, workspaceWriteSandbox } from '../helpers/startParams.js';

const spec = METHODS['process/start'];
/** What a client's JSON becomes on the server. */
const wire = (v: unknown): unknown => JSON.parse(JSON.stringify(v));
const common = {
  processId: 'p1',
  argv: ['/bin/sh', '-c', 'echo hi'],
  cwd: '/tmp',
  env: { PATH: '/usr/bin:/bin', 2: 'two', HOME: '/root', 1: 'one' },
  tty: false,
  arg0: null,
};

function sameAsSchema(input: unknown, name: string): void {
  const fast = execParamsFast(input);
  const r = ExecParams.safeParse(input);
  if (!r.success) {
    assert.equal(
      fast,
      undefined,
      `${name}: the schema refuses it, the fast path must leave it to the schema`,
    );
    return;
  }
  if (fast === undefined) return;
  assert.deepStrictEqual(fast, r.data, name);
  assert.deepEqual(Object.keys(fast), Object.keys(r.data), `${name}: members in the schema's order`);
  assert.deepEqual(Object.keys(fast.env), Object.keys(r.data.env), `${name}: env in the schema's order`);
  const raw = input as {
    argv: unknown;
    env: unknown;
    metadata?: unknown;
    envPolicy?: Record<string, unknown>;
  };
  assert.notEqual(fast.argv, raw.argv, `${name}: a fresh argv, as the schema's`);
  assert.notEqual(fast.env, raw.env, `${name}: a fresh env, as the schema's`);
  if (fast.metadata) {
    assert.notEqual(fast.metadata, raw.metadata, `${name}: a fresh metadata record, as the schema's`);
    assert.deepEqual(Object.keys(fast.metadata), Object.keys(r.data.metadata!), `${name}: metadata in order`);
  }
  if (fast.envPolicy) {
    for (const k of ['exclude', 'set', 'includeOnly'] as const)
      assert.notEqual(
        fast.envPolicy[k],
        raw.envPolicy?.[k],
        `${name}: a fresh envPolicy.${k}, as the schema's`,
      );
    assert.deepEqual(
      Object.keys(fast.envPolicy),
      Object.keys(r.data.envPolicy!),
      `${name}: envPolicy in order`,
    );
    assert.deepEqual(
      Object.keys(fast.envPolicy.set),
      Object.keys(r.data.envPolicy!.set),
      `${name}: set in order`,
    );
  }
}

test('the shapes agents send take the fast path, with the schema output', () => {
  const shapes: Record<string, object> = {
    bench: {
      processId: 't1',
      argv: ['/bin/true'],
      cwd: '/tmp',
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      arg0: null,
    },
    minimal: { processId: 'p', argv: [], cwd: '/', env: {}, tty: true },
    common,
    reordered: { tty: false, env: {}, arg0: 'sh', cwd: '/tmp', argv: ['/bin/true'], processId: 'p' },
    uri: { ...common, cwd: 'file:///tmp/a%20b' },
    localhost: { ...common, cwd: 'file://localhost/tmp' },
    flags: { ...common, pipeStdin: true, enforceManagedNetwork: false },
    // codex-clients.md §5: 0.125/0.130 and 0.169 as they send it.
    codex125: {
      ...common,
      envPolicy: { inherit: 'all', ignoreDefaultExcludes: true, exclude: [], set: {}, includeOnly: [] },
      pipeStdin: false,
    },
    codex169: codex169Start(),
    codex169set: codex169Start({
      envPolicy: { ...codex169Start().envPolicy, set: { B: 'b', 2: 'two', A: 'a' } },
    }),
    nulls: {
      ...common,
      pipeStdin: null,
      enforceManagedNetwork: null,
      envPolicy: null,
      metadata: null,
      limits: null,
      sandbox: null,
      networkProxy: null,
      managedNetwork: null,
    },
  };
  for (const [name, shape] of Object.entries(shapes)) {
    const input = wire(shape);
    assert.notEqual(execParamsFast(input), undefined, `${name} takes the fast path`);
    sameAsSchema(input, name);
  }
  assert.equal(execParamsFast(wire({ ...common, cwd: 'file:///tmp/a%20b' }))?.cwd, '/tmp/a b');
});

test('a sandbox policy takes the fast path once the schema has parsed its text: the schema output, frozen and shared', () => {
  const policy = workspaceWriteSandbox();
  const input = () => wire({ ...common, sandbox: policy });
  // Not yet parsed (a text of its own): the schema decides.
  const unseen = wire({ ...common, sandbox: { ...policy, sandboxPolicyCwd: `/tmp/fast-${process.pid}` } });
  assert.equal(execParamsFast(unseen), undefined, 'a policy text never parsed goes to the schema');
  const r = ExecParams.safeParse(input());
  assert.ok(r.success, JSON.stringify(!r.success && r.error.issues));
  const a = execParamsFast(input());
  assert.notEqual(a, undefined, 'the same text again takes the fast path');
  sameAsSchema(input(), 'sandbox');
  const b = execParamsFast(input())!;
  assert.equal(a!.sandbox, b.sandbox, 'one parse, shared');
  assert.throws(
    () => {
      (a!.sandbox as { sandboxPolicyCwd: string }).sandboxPolicyCwd = '/changed';
    },
    TypeError,
    'frozen: a reader that tries to change it throws',
  );
  assert.deepStrictEqual(execParamsFast(input())!.sandbox, r.data.sandbox, 'unchanged for the next start');
  // A refused policy is never kept: the schema answers it every time.
  const bad = wire({ ...common, sandbox: { ...policy, sandbox: 'no-such-sandbox' } });
  assert.equal(ExecParams.safeParse(bad).success, false);
  assert.equal(execParamsFast(bad), undefined);
});

test("envPolicy and metadata: every shape near the clients' gives the schema output or goes to the schema", () => {
  const policy = {
    inherit: 'all',
    ignoreDefaultExcludes: true,
    exclude: ['A*'],
    set: { X: 'x' },
    includeOnly: [],
  };
  const policies: unknown[] = [
    policy,
    { ...policy, inherit: 'core' },
    { ...policy, inherit: 'none' },
    { ...policy, inherit: 'some' },
    { ...policy, ignoreDefaultExcludes: 'yes' },
    { ...policy, exclude: ['a', 1] },
    { ...policy, exclude: 'A*' },
    { ...policy, set: { X: 1 } },
    { ...policy, set: [] },
    { ...policy, includeOnly: null },
    { ...policy, extra: true },
    { inherit: 'all' },
    {},
  ];
  let fast = 0;
  for (const [i, envPolicy] of policies.entries()) {
    const input = wire({ ...common, envPolicy });
    if (execParamsFast(input) !== undefined) fast++;
    sameAsSchema(input, `envPolicy ${i}: ${JSON.stringify(envPolicy)}`);
  }
  sameAsSchema(
    JSON.parse(
      `{"processId":"p","argv":[],"cwd":"/","env":{},"tty":false,"envPolicy":{"inherit":"all","ignoreDefaultExcludes":false,"exclude":[],"set":{"__proto__":"x"},"includeOnly":[]}}`,
    ),
    'set __proto__',
  );
  const metadata: unknown[] = [{}, { threadId: 't', n: 1, deep: { a: [1, { b: null }] } }, [], 'x', 1];
  for (const [i, m] of metadata.entries()) {
    const input = wire({ ...common, metadata: m });
    if (execParamsFast(input) !== undefined) fast++;
    sameAsSchema(input, `metadata ${i}: ${JSON.stringify(m)}`);
  }
  sameAsSchema(
    JSON.parse(`{"processId":"p","argv":[],"cwd":"/","env":{},"tty":false,"metadata":{"__proto__":{"a":1}}}`),
    'metadata __proto__',
  );
  assert.equal(
    fast,
    5,
    'the three inherit values of a whole policy and two records of metadata take the fast path',
  );
});

test('any other value of any member: the schema decides (its output or its error, never the fast path on a refusal)', () => {
  const values: unknown[] = [
    null,
    0,
    1.5,
    '',
    'x',
    'rel/path',
    '/abs',
    'file://host/x',
    'http://x/y',
    'file:///%zz',
    true,
    [],
    ['a'],
    ['a', 1],
    {},
    { A: 'b' },
    { A: 1 },
    { type: 'managed' },
  ];
  const members = [...Object.keys(ExecParams.shape), 'unknownMember'];
  let n = 0;
  for (const key of members) {
    sameAsSchema(wire(Object.fromEntries(Object.entries(common).filter(([k]) => k !== key))), `no ${key}`);
    for (const v of values) {
      sameAsSchema(wire({ ...common, [key]: v }), `${key}: ${JSON.stringify(v)}`);
      n++;
    }
  }
  // A record member the schema drops, values of other types, not objects at all.
  sameAsSchema(
    JSON.parse('{"processId":"p","argv":[],"cwd":"/","env":{"__proto__":"x","A":"b"},"tty":false}'),
    'proto',
  );
  for (const v of [null, 'x', 1, [], [common]]) sameAsSchema(v, JSON.stringify(v));
  sameAsSchema(Object.assign(Object.create(null), common), 'no prototype');
  assert.ok(n > 200);
});

test('every refusal answers the schema text, fast path or not', () => {
  const bad: object[] = [
    { ...common, processId: 1 },
    { ...common, argv: 'x' },
    { ...common, argv: ['a', 1] },
    { ...common, cwd: 'rel' },
    { ...common, cwd: 'file://host/x' },
    { ...common, env: { A: 1 } },
    { ...common, env: [] },
    { ...common, tty: 'yes' },
    { ...common, arg0: 1 },
    { ...common, pipeStdin: 'x' },
    { ...common, enforceManagedNetwork: 'x' },
    { ...common, sandbox: 'x' },
    { ...common, managedNetwork: 'x' },
    { ...common, limits: { pidsMax: 'x' } },
    { processId: 'p' },
  ];
  const error = (fast: boolean, input: unknown) => {
    try {
      parseParams(spec.params, input, spec.paramsName, spec.fieldErrors, fast ? spec.fastParams : undefined);
    } catch (e) {
      return { code: (e as { code?: number }).code, message: (e as Error).message };
    }
    return null;
  };
  for (const b of bad) {
    const input = wire(b);
    const want = error(false, input);
    assert.ok(want, JSON.stringify(b));
    assert.deepEqual(error(true, input), want, JSON.stringify(b));
  }
  assert.equal(spec.fastParams, execParamsFast);
});
