// Issue 12 item 1: fs/* with a sandbox context against a sandboxed process that swaps a directory and a symlink to
// an unreadable folder outside the workspace with renameat2(RENAME_EXCHANGE) in a loop. Every method, every attempt
// checked on the host: nothing written, created, deleted or read outside. CORRAL_RACE_ATTEMPTS overrides 3000.
import assert from 'node:assert/strict';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { b64, RpcCallError, type RpcClient } from '../helpers/client.js';
import { needsConfinedFs } from '../helpers/native.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { type HostileFixture, hostileFixture, type Racer, sandboxContext, startRacer } from './fs-util.js';

const ATTEMPTS = Number(process.env.CORRAL_RACE_ATTEMPTS ?? 3000);
/** Requests in flight at once (the fs lane of a connection runs them in order; pipelining keeps it busy). */
const WINDOW = 16;
const SECRET = `SECRET-${'s'.repeat(4300)}`;
const INSIDE = 'inside';

interface Case {
  /** The folder under the workspace (and under $OUT) this case races in. */
  name: string;
  /** The pair the racer swaps, relative to the workspace. */
  pair: [string, string];
  /** Where the symlink of the pair points (absolute, outside). */
  target: string;
  setup(ws: string, out: string): void;
  request(i: number, ws: string): [string, Record<string, unknown>];
  /** Whether attempt i escaped (checked on the host after the run), given its result (or null on error). */
  escaped(i: number, result: unknown, ws: string, out: string): boolean;
}

function dirCase(name: string, c: Omit<Case, 'name' | 'pair' | 'target'>): Case {
  return { name, pair: [`${name}/d`, `${name}/l`], target: '', ...c };
}

const CASES: Case[] = [
  dirCase('writeFile', {
    setup() {},
    request: (i, ws) => ['fs/writeFile', { path: `${ws}/d/w${i}`, dataBase64: b64('pwned') }],
    escaped: (i, _r, _ws, out) => existsSync(`${out}/w${i}`),
  }),
  dirCase('createDirectory', {
    setup() {},
    request: (i, ws) => ['fs/createDirectory', { path: `${ws}/d/m${i}`, recursive: i % 2 === 0 }],
    escaped: (i, _r, _ws, out) => existsSync(`${out}/m${i}`),
  }),
  dirCase('remove', {
    setup(ws, out) {
      for (let i = 0; i < ATTEMPTS; i++) {
        writeFileSync(`${out}/r${i}`, 'keep');
        writeFileSync(`${ws}/d/r${i}`, INSIDE);
      }
    },
    request: (i, ws) => ['fs/remove', { path: `${ws}/d/r${i}`, recursive: i % 2 === 0, force: true }],
    escaped: (i, _r, _ws, out) => !existsSync(`${out}/r${i}`),
  }),
  dirCase('copyDestination', {
    setup(ws) {
      writeFileSync(`${ws}/src.txt`, 'pwned');
    },
    request: (i, ws) => [
      'fs/copy',
      { sourcePath: `${ws}/src.txt`, destinationPath: `${ws}/d/c${i}`, recursive: false },
    ],
    escaped: (i, _r, _ws, out) => existsSync(`${out}/c${i}`),
  }),
  dirCase('copySource', {
    setup(ws) {
      mkdirSync(`${ws}/copies`);
    },
    request: (i, ws) => [
      'fs/copy',
      { sourcePath: `${ws}/d/secret`, destinationPath: `${ws}/copies/c${i}`, recursive: false },
    ],
    escaped: (i, _r, ws) =>
      existsSync(`${ws}/copies/c${i}`) && readFileSync(`${ws}/copies/c${i}`, 'utf8') !== INSIDE,
  }),
  dirCase('copyTree', {
    setup(ws) {
      mkdirSync(`${ws}/copies`);
    },
    request: (i, ws) => [
      'fs/copy',
      { sourcePath: `${ws}/d`, destinationPath: `${ws}/copies/t${i}`, recursive: true },
    ],
    escaped: (i, _r, ws) =>
      existsSync(`${ws}/copies/t${i}/outside-marker`) ||
      (existsSync(`${ws}/copies/t${i}/secret`) &&
        readFileSync(`${ws}/copies/t${i}/secret`, 'utf8') !== INSIDE),
  }),
  dirCase('readFile', {
    setup() {},
    request: (_i, ws) => ['fs/readFile', { path: `${ws}/d/secret` }],
    escaped: (_i, r) =>
      r !== null && Buffer.from((r as { dataBase64: string }).dataBase64, 'base64').toString() !== INSIDE,
  }),
  dirCase('getMetadata', {
    setup() {},
    request: (_i, ws) => ['fs/getMetadata', { path: `${ws}/d/secret` }],
    escaped: (_i, r) => r !== null && (r as { size: number }).size !== INSIDE.length,
  }),
  dirCase('readDirectory', {
    setup() {},
    request: (_i, ws) => ['fs/readDirectory', { path: `${ws}/d` }],
    escaped: (_i, r) =>
      r !== null &&
      (r as { entries: { fileName: string }[] }).entries.some((e) => e.fileName === 'outside-marker'),
  }),
  dirCase('canonicalize', {
    setup() {},
    request: (_i, ws) => ['fs/canonicalize', { path: `${ws}/d/secret` }],
    escaped: (_i, r, _ws, out) => r !== null && (r as { path: string }).path.startsWith(out),
  }),
  // The last component raced: a regular file and a symlink to an outside file.
  {
    name: 'writeFileLast',
    pair: ['writeFileLast/f', 'writeFileLast/l'],
    target: 'victim',
    setup(ws, out) {
      writeFileSync(`${ws}/f`, INSIDE);
      writeFileSync(`${out}/victim`, 'keep');
    },
    request: (i, ws) => ['fs/writeFile', { path: `${ws}/f`, dataBase64: b64(`pwned${i}`) }],
    // One victim for all attempts: counted once (attempt 0) when it was overwritten at all.
    escaped: (i, _r, _ws, out) => i === 0 && readFileSync(`${out}/victim`, 'utf8') !== 'keep',
  },
  {
    name: 'readFileLast',
    pair: ['readFileLast/f', 'readFileLast/l'],
    target: 'secret',
    setup(ws) {
      writeFileSync(`${ws}/f`, INSIDE);
    },
    request: (_i, ws) => ['fs/readFile', { path: `${ws}/f` }],
    escaped: (_i, r) =>
      r !== null && Buffer.from((r as { dataBase64: string }).dataBase64, 'base64').toString() !== INSIDE,
  },
];

let f: HostileFixture;
let ts: TestServer;
let agent: RpcClient;
let racer: Racer;
const results = new Map<
  string,
  { ok: number; refused: number; errors: Map<string, number>; escapes: number[] }
>();

after(async () => {
  const swaps = racer ? await racer.stop() : 0;
  console.log(`racer made ${swaps} exchanges`);
  console.log('method            attempts  ok     refused  escapes');
  for (const [name, r] of results)
    console.log(
      `${name.padEnd(18)}${String(ATTEMPTS).padEnd(10)}${String(r.ok).padEnd(7)}${String(r.refused).padEnd(9)}${r.escapes.length}`,
    );
  for (const [name, r] of results)
    for (const [text, count] of [...r.errors].sort((a, b) => b[1] - a[1]).slice(0, 3))
      console.log(`  ${name}: ${count}× ${text}`);
  await ts?.close();
  f?.close();
});

describe(`fs/* with a sandbox context under a RENAME_EXCHANGE race (${ATTEMPTS} attempts per method)`, {
  skip: needsConfinedFs,
}, () => {
  before(async () => {
    f = hostileFixture('corral-fs-race-');
    for (const c of CASES) {
      const ws = join(f.W, c.name);
      const out = join(f.OUT, c.name);
      mkdirSync(ws);
      mkdirSync(out);
      writeFileSync(join(out, 'secret'), SECRET);
      writeFileSync(join(out, 'outside-marker'), 'x');
      if (c.target === '') {
        mkdirSync(join(ws, 'd'));
        writeFileSync(join(ws, 'd', 'secret'), INSIDE);
        symlinkSync(out, join(ws, 'l'));
        c.setup(ws, out);
      } else {
        c.setup(ws, out);
        symlinkSync(join(out, c.target), join(ws, 'l'));
      }
    }
    ts = await startTestServer({ launcher: { sandbox: { tmpdir: f.T } } });
    agent = await ts.client('agent');
    racer = await startRacer(
      agent,
      f,
      CASES.map((c) => c.pair),
    );
  });

  for (const c of CASES) {
    test(`${c.name}: 0 escapes`, async () => {
      const ws = join(f.W, c.name);
      const out = join(f.OUT, c.name);
      const ctx = sandboxContext(f);
      const r = { ok: 0, refused: 0, errors: new Map<string, number>(), escapes: [] as number[] };
      results.set(c.name, r);
      const outcomes: unknown[] = new Array(ATTEMPTS).fill(null);
      let next = 0;
      const worker = async () => {
        while (next < ATTEMPTS) {
          const i = next++;
          const [method, params] = c.request(i, ws);
          try {
            outcomes[i] = await agent.request(method, { ...params, sandbox: ctx });
            r.ok++;
          } catch (e) {
            if (!(e instanceof RpcCallError)) throw e;
            r.refused++;
            const key = e.message.replaceAll(f.root, '…').replace(/\d+/g, 'N').slice(0, 120);
            r.errors.set(key, (r.errors.get(key) ?? 0) + 1);
          }
        }
      };
      await Promise.all(Array.from({ length: WINDOW }, worker));
      for (let i = 0; i < ATTEMPTS; i++) if (c.escaped(i, outcomes[i], ws, out)) r.escapes.push(i);
      if (c.name === 'writeFile' || c.name === 'createDirectory' || c.name === 'copyDestination') {
        const stray = readdirSync(out).filter((n) => n !== 'secret' && n !== 'outside-marker');
        assert.deepEqual(stray.slice(0, 5), [], `${stray.length} entries written outside`);
      }
      assert.equal(statSync(join(out, 'secret')).size, SECRET.length);
      assert.deepEqual(
        r.escapes.slice(0, 10),
        [],
        `${r.escapes.length}/${ATTEMPTS} escaped; outcomes: ${r.ok} ok, ${r.refused} refused ${JSON.stringify([...r.errors])}`,
      );
      // The race really ran: some attempts met the symlink (refused) and some the directory (done).
      assert.ok(
        r.refused > 0 && r.ok > 0,
        `no race seen: ${r.ok} ok, ${r.refused} refused ${JSON.stringify([...r.errors])}`,
      );
    });
  }
});
