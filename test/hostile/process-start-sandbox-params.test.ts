// process/start's `sandbox`, `networkProxy` and `managedNetwork` are parsed by the method table (issue 31 item 1):
// that parser fed deep, wide, huge and malformed values over a real WebSocket to a real exec server. Each is answered
// -32602 naming the field (in the texts the launcher used to give), nothing is started for it, and the server still
// starts and reads a process afterwards.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { RpcCallError } from '../helpers/client.js';
import { stillServes } from '../helpers/hostileJson.js';
import { serverSuite } from '../helpers/server.js';
import { proxy169, refusedStart, seedSandbox } from '../helpers/startParams.js';

const base = { argv: ['/bin/true'], cwd: '/tmp', env: { PATH: '/usr/bin:/bin' }, tty: false };
const sp = (kind: string, access: string) => ({ path: { type: 'special', value: { kind } }, access });
const seed = seedSandbox({ fileSystemPolicy: { kind: 'restricted', entries: [sp('root', 'read')] } });
const ctx = {
  permissions: {
    type: 'managed',
    file_system: { type: 'restricted', entries: [sp('root', 'read')] },
    network: 'restricted',
  },
  cwd: '/tmp',
};
const proxy = proxy169();
const WRONG: unknown[] = [true, -1, 1.5, 1e308, '', 'x', [], {}, [[[{}]]], 'x'.repeat(1 << 20)];
const deep = (n: number): unknown => (n === 0 ? {} : { a: deep(n - 1) });
const deepArray = (n: number): unknown => (n === 0 ? [] : [deepArray(n - 1)]);

const srv = serverSuite();
let n = 0;

/** Starts with `extra` over the base start; the error it gets (it must get one), and that nothing was started. */
const refused = (extra: Record<string, unknown>) =>
  refusedStart(srv.c, { processId: `hostile-${++n}`, ...base, ...extra });

describe('process/start sandbox params against hostile values', () => {
  test('malformed: every wrong type in each member and in each field inside them is -32602', async () => {
    const shapes: [string, Record<string, unknown>][] = [
      ['sandbox', seed],
      ['sandbox', ctx],
      ['networkProxy', proxy],
      ['networkProxy', proxy.proxy],
      ['managedNetwork', { loopbackPorts: [3128], allowLocalBinding: false }],
    ];
    for (const field of ['sandbox', 'networkProxy', 'managedNetwork'])
      for (const v of WRONG) {
        const e = await refused({ [field]: v });
        assert.equal(e.code, -32602, `${field}=${JSON.stringify(v).slice(0, 40)}: ${e.message}`);
      }
    for (const [field, shape] of shapes) {
      for (const key of Object.keys(shape)) {
        for (const v of WRONG) {
          if (v === 'x'.repeat(1 << 20) && key !== Object.keys(shape)[0]) continue;
          const value = shape === proxy.proxy ? { proxy: { ...shape, [key]: v } } : { ...shape, [key]: v };
          let e: RpcCallError;
          try {
            e = await refused({ [field]: value });
          } catch {
            continue; // a value that is valid there (an optional `{}`, say): started and ran, as it should
          }
          assert.ok(
            [-32602, -32603].includes(e.code),
            `${field}.${key}=${JSON.stringify(v).slice(0, 40)}: ${e.code}`,
          );
        }
      }
    }
    await stillServes(srv.c, 'malformed');
  });

  test('deep: nested 50 levels inside each member is -32602 naming the member', async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ sandbox: { ...seed, policy: deep(50) } }, /sandbox\.policy\.type/],
      [
        { sandbox: { ...ctx, permissions: { ...ctx.permissions, file_system: deepArray(50) } } },
        /sandbox\.permissions\.file_system/,
      ],
      [
        { sandbox: { ...seed, fileSystemPolicy: { kind: 'restricted', entries: [deep(50)] } } },
        /missing field `path`/,
      ],
      [{ networkProxy: { proxy: deep(50) } }, /missing field `enableSocks5`|missing field `enabled`/],
      [{ managedNetwork: { loopbackPorts: deepArray(50), allowLocalBinding: false } }, /loopbackPorts/],
    ];
    for (const [extra, named] of cases) {
      const e = await refused(extra);
      assert.equal(e.code, -32602);
      assert.match(e.message, named);
    }
    await stillServes(srv.c, 'deep');
  });

  test('wide: 100k entries with the last one bad, and 100k unknown keys, are parsed and answered naming the entry', async () => {
    const entries: unknown[] = Array.from({ length: 100_000 }, () => sp('root', 'read'));
    entries.push({ path: { type: 'path', path: '/x' }, access: 'everything' });
    const started = Date.now();
    const e = await refused({
      sandbox: { ...ctx, permissions: { ...ctx.permissions, file_system: { type: 'restricted', entries } } },
    });
    assert.equal(e.code, -32602);
    assert.match(
      e.message,
      /unknown variant `everything`.* at `sandbox\.permissions\.file_system\.entries\.100000\.access`/,
    );
    const wideKeys = Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`k${i}`, i]));
    const e2 = await refused({ sandbox: { ...wideKeys, sandbox: 'bogus' } });
    assert.match(e2.message, /unknown variant `bogus`.* at `sandbox\.sandbox`/);
    const e3 = await refused({
      managedNetwork: { ...wideKeys, loopbackPorts: [70000], allowLocalBinding: false },
    });
    assert.match(e3.message, /loopbackPorts\.0/);
    assert.ok(Date.now() - started < 15_000, 'a wide value is parsed in linear time');
    await stillServes(srv.c, 'wide');
  });

  test('huge: a 1 MiB path, 10k loopback ports and a 1 MiB domain key are refused naming the field', async () => {
    const big = `/${'a'.repeat(1 << 20)}`;
    const e = await refused({ sandbox: { ...seed, sandboxPolicyCwd: big.slice(1) } });
    assert.equal(e.code, -32602);
    assert.match(e.message, /sandbox\.sandboxPolicyCwd/);
    const ports = Array.from({ length: 10_000 }, (_, i) => i);
    ports.push(-5);
    const e2 = await refused({ managedNetwork: { loopbackPorts: ports, allowLocalBinding: false } });
    assert.match(e2.message, /loopbackPorts\.10000/);
    const e3 = await refused({ networkProxy: { proxy: { ...proxy.proxy, mode: big } } });
    assert.match(e3.message, /proxy\.mode/);
    await stillServes(srv.c, 'huge');
  });
});
