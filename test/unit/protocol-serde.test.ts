import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { z } from 'zod';
import { RpcError } from '../../src/protocol/errors.js';
import {
  ExecParams,
  InitializeParams,
  ReadParams,
  SignalParams,
  WriteParams,
} from '../../src/protocol/exec.js';
import { ReadFileParams } from '../../src/protocol/fs.js';
import { parseParams } from '../../src/server/core/params.js';

function msg(schema: z.ZodType, value: unknown, name: string): string {
  try {
    parseParams(schema, value, name);
  } catch (e) {
    assert.ok(e instanceof RpcError);
    assert.equal(e.code, -32602);
    return e.message;
  }
  throw new Error('parsed');
}

const base = { processId: 'p', argv: ['x'], cwd: '/tmp', env: {}, tty: false };

describe('serde-style -32602 texts (protocol.md §3.1)', () => {
  it('params null, absent or not an object: invalid type: …, expected struct X', () => {
    assert.equal(msg(ExecParams, null, 'ExecParams'), 'invalid type: null, expected struct ExecParams');
    assert.equal(msg(ExecParams, undefined, 'ExecParams'), 'invalid type: null, expected struct ExecParams');
    assert.equal(msg(ExecParams, [], 'ExecParams'), 'invalid type: sequence, expected struct ExecParams');
    assert.equal(msg(ExecParams, 'x', 'ExecParams'), 'invalid type: string "x", expected struct ExecParams');
    assert.equal(msg(ExecParams, 5, 'ExecParams'), 'invalid type: integer `5`, expected struct ExecParams');
    assert.equal(
      msg(ReadParams, true, 'ReadParams'),
      'invalid type: boolean `true`, expected struct ReadParams',
    );
  });

  it('missing field `x`', () => {
    const { processId: _p, ...noId } = base;
    assert.equal(msg(ExecParams, noId, 'ExecParams'), 'missing field `processId`');
    assert.equal(msg(InitializeParams, {}, 'InitializeParams'), 'missing field `clientName`');
    assert.equal(msg(WriteParams, { processId: 'p' }, 'WriteParams'), 'missing field `chunk`');
  });

  it('invalid type: <what>, expected <what> (starts with serde text, then names the field)', () => {
    const cases: [unknown, string][] = [
      [{ ...base, processId: 7 }, 'invalid type: integer `7`, expected a string'],
      [{ ...base, argv: 'true' }, 'invalid type: string "true", expected a sequence'],
      [{ ...base, argv: [1] }, 'invalid type: integer `1`, expected a string'],
      [{ ...base, tty: 'yes' }, 'invalid type: string "yes", expected a boolean'],
      [{ ...base, tty: null }, 'invalid type: null, expected a boolean'],
      [{ ...base, env: { A: 1 } }, 'invalid type: integer `1`, expected a string'],
      [{ ...base, env: [] }, 'invalid type: sequence, expected a map'],
      [{ ...base, env: { A: 1.5 } }, 'invalid type: floating point `1.5`, expected a string'],
    ];
    for (const [v, text] of cases) assert.ok(msg(ExecParams, v, 'ExecParams').startsWith(text), text);
    assert.ok(msg(ExecParams, { ...base, env: { A: 1 } }, 'ExecParams').endsWith('at `env.A`'));
    assert.ok(
      msg(ReadParams, { processId: 'p', afterSeq: '1' }, 'ReadParams').startsWith(
        'invalid type: string "1", expected an integer',
      ),
    );
  });

  it('u64 fields: a negative value → invalid value: integer `-1`, expected u64', () => {
    assert.equal(
      msg(ReadParams, { processId: 'p', afterSeq: -1 }, 'ReadParams'),
      'invalid value: integer `-1`, expected u64 at `afterSeq`',
    );
    assert.equal(
      msg(ReadParams, { processId: 'p', waitMs: -5 }, 'ReadParams'),
      'invalid value: integer `-5`, expected u64 at `waitMs`',
    );
  });

  it('enums: unknown variant `x`, expected one of …', () => {
    assert.equal(
      msg(ExecParams, { ...base, envPolicy: { inherit: 'some' } }, 'ExecParams'),
      'unknown variant `some`, expected one of `all`, `core`, `none` at `envPolicy.inherit`',
    );
    assert.equal(
      msg(SignalParams, { processId: 'p', signal: 'hup' }, 'SignalParams'),
      'unknown variant `hup`, expected one of `interrupt`, `terminate`, `kill` at `signal`',
    );
  });

  it('paths: relative → AbsolutePathBuf text; other schemes are refused', () => {
    assert.match(
      msg(ReadFileParams, { path: 'rel/x' }, 'FsReadFileParams'),
      /^AbsolutePathBuf deserialized without a base path/,
    );
    assert.match(msg(ReadFileParams, { path: 'http://127.0.0.1/x' }, 'FsReadFileParams'), /file:\/\//);
  });

  it('unknown fields are ignored and optional fields may be null', () => {
    const p = parseParams(
      ExecParams,
      { ...base, arg0: null, envPolicy: null, pipeStdin: null, extra: 1, sandbox: null },
      'ExecParams',
    );
    assert.equal(p.processId, 'p');
    const r = parseParams(
      ReadParams,
      { processId: 'p', afterSeq: null, maxBytes: null, waitMs: null },
      'ReadParams',
    );
    assert.equal(r.afterSeq, null);
  });
});
