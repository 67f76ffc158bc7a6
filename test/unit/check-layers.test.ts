// scripts/check-layers.mjs, the layer rules of `npm test`: this tree passes, and a tree with one forbidden import (or
// one cycle) fails with a message that names the file, the import and the rule.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const checker = join(root, 'scripts', 'check-layers.mjs');
const base = mkdtempSync(join(tmpdir(), 'corral-layers-'));
after(() => rmSync(base, { recursive: true, force: true }));

function check(dir: string): { status: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [checker, '--root', dir], { encoding: 'utf8' });
  return { status: r.status, stderr: r.stderr };
}

/** A small tree that keeps every rule; `extra` adds or replaces files. */
let trees = 0;
function tree(extra: Record<string, string> = {}): string {
  const dir = join(base, `t${trees++}`);
  const files: Record<string, string> = {
    'src/protocol/exec.ts': "import { z } from 'zod';\nexport const X = z.string();\n",
    'src/protocol/client.ts': "import { X } from './exec.js';\nexport const Y = X;\n",
    'src/rpc/connection.ts': "import { X } from '../protocol/exec.js';\nexport const C = X;\n",
    'src/server/server.ts':
      "import { createServer } from 'node:http';\nimport { C } from '../rpc/connection.js';\nexport const S = [C, createServer];\n",
    'renderer/app.ts':
      "import { Y } from '../src/protocol/client.js';\nimport './styles.css';\nexport const A = Y;\n",
    'renderer/styles.css': 'body {}\n',
    'preload/preload.ts':
      "import { contextBridge } from 'electron';\nimport { Y } from '../src/protocol/client.js';\nexport const P = [contextBridge, Y];\n",
    'main/main.ts':
      "import { app } from 'electron';\nimport { S } from '../src/server/server.js';\nexport const M = [app, S];\n",
    ...extra,
  };
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

describe('check-layers', () => {
  /** The tree with `files` added fails the check (exit 1); its report, which must match each of `lines`. */
  const fails = (files: Record<string, string>, ...lines: RegExp[]): string => {
    const r = check(tree(files));
    assert.equal(r.status, 1, r.stderr);
    for (const line of lines) assert.match(r.stderr, line);
    return r.stderr;
  };

  test('this repository keeps the layer rules', () => {
    const r = check(root);
    assert.equal(r.stderr, '');
    assert.equal(r.status, 0);
  });

  test('a tree that keeps every rule passes', () => {
    assert.deepEqual(check(tree()), { status: 0, stderr: '' });
  });

  test('the renderer importing src/rpc fails, naming the file, the import and the rule', () => {
    fails(
      {
        'renderer/views/list.ts':
          "import type { A } from '../app.js';\n\nimport { C } from '../../src/rpc/connection.js';\nexport const L = [C];\n",
      },
      /^renderer\/views\/list\.ts:3: imports '\.\.\/\.\.\/src\/rpc\/connection\.js' \(src\/rpc\/connection\.ts\): the renderer may import only its own files and src\/protocol/m,
      /1 forbidden import/,
    );
  });

  test('the renderer importing a Node builtin fails', () => {
    fails(
      { 'renderer/fs.ts': "import { readFileSync } from 'node:fs';\nexport const F = readFileSync;\n" },
      /^renderer\/fs\.ts:1: imports 'node:fs' \(a package\): the renderer may import only/m,
    );
  });

  test('src/protocol importing anything of ours but itself, or a package but zod, fails', () => {
    fails(
      {
        'src/protocol/bad.ts':
          "import { C } from '../rpc/connection.js';\nimport { WebSocket } from 'ws';\nexport const B = [C, WebSocket];\n",
      },
      /^src\/protocol\/bad\.ts:1: imports '\.\.\/rpc\/connection\.js' \(src\/rpc\/connection\.ts\): src\/protocol imports nothing of ours but itself/m,
      /^src\/protocol\/bad\.ts:2: imports 'ws' \(a package\): src\/protocol imports nothing/m,
    );
  });

  test('main importing the renderer, src importing electron or main, preload importing src/server: each fails', () => {
    fails(
      {
        'main/window.ts': "import { A } from '../renderer/app.js';\nexport const W = A;\n",
        'src/server/gui.ts':
          "import { app } from 'electron';\nimport { M } from '../../main/main.js';\nexport const G = [app, M];\n",
        'preload/bridge.ts': "import { S } from '../src/server/server.js';\nexport const B = S;\n",
      },
      /^main\/window\.ts:1: imports '\.\.\/renderer\/app\.js' \(renderer\/app\.ts\): main\/ may import src\/ and its own files, never renderer\//m,
      /^src\/server\/gui\.ts:1: imports 'electron' \(a package\): src\/ runs under plain Node/m,
      /^src\/server\/gui\.ts:2: imports '\.\.\/\.\.\/main\/main\.js' \(main\/main\.ts\): src\/ runs under plain Node/m,
      /^preload\/bridge\.ts:1: imports '\.\.\/src\/server\/server\.js' \(src\/server\/server\.ts\): the preload may import only/m,
      /4 forbidden import/,
    );
  });

  test('the native addon belongs to src/platform: importing its loader from elsewhere, or src/ from src/platform, fails', () => {
    fails(
      {
        'src/platform/addon.ts': 'export const addon = null;\n',
        'src/platform/relay.ts': "import { addon } from './addon.js';\nexport const relay = addon;\n",
        'src/platform/up.ts': "import { S } from '../server/ok.js';\nexport const U = S;\n",
        'src/server/ok.ts': "import { relay } from '../platform/relay.js';\nexport const S = relay;\n",
        'src/network/tunnel.ts': "import { addon } from '../platform/addon.js';\nexport const T = addon;\n",
      },
      /^src\/network\/tunnel\.ts:1: imports '\.\.\/platform\/addon\.js' \(src\/platform\/addon\.ts\): only src\/platform touches the native addon/m,
      /^src\/platform\/up\.ts:1: imports '\.\.\/server\/ok\.js' \(src\/server\/ok\.ts\): src\/platform/m,
      /2 forbidden import/,
    );
  });

  test('an import cycle fails, even a type-only one through a third file, naming each import of the loop', () => {
    fails(
      {
        'src/server/a.ts': "import { B } from './b.js';\nexport const A = B;\n",
        'src/server/b.ts': "import type { T } from './c.js';\nexport const B: T = 1;\n",
        'src/server/c.ts':
          "\nimport type { A } from './a.js';\nexport type T = typeof A extends number ? number : never;\n",
      },
      /^import cycle src\/server\/a\.ts → src\/server\/b\.ts → src\/server\/c\.ts → src\/server\/a\.ts: src\/server\/a\.ts:1 imports '\.\/b\.js', src\/server\/b\.ts:1 imports '\.\/c\.js', src\/server\/c\.ts:2 imports '\.\/a\.js': no file may import itself/m,
    );
  });

  test('an import of a file that does not exist fails', () => {
    fails(
      { 'src/server/gone.ts': "export { X } from './missing.js';\n" },
      /^src\/server\/gone\.ts:1: imports '\.\/missing\.js', which names no file of this tree/m,
    );
  });

  test("the server's folders stack by concern, and only the CLI and main/ assemble (src/app): each crossing fails", () => {
    // The server's folders, each standing on the one below, and the composition root on top.
    const stack = {
      'src/server/core/log.ts': 'export const L = 1;\n',
      'src/server/fs/fsOps.ts': "import { L } from '../core/log.js';\nexport const F = L;\n",
      'src/server/process/launcher.ts': "import { F } from '../fs/fsOps.js';\nexport const P = F;\n",
      'src/server/execServer.ts': "import { P } from './process/launcher.js';\nexport const E = P;\n",
      'src/server/connection/ws.ts': "import { E } from '../execServer.js';\nexport const W = E;\n",
      'src/app/compose.ts': "import { W } from '../server/connection/ws.js';\nexport const A = W;\n",
    };
    const ok = check(
      tree({ ...stack, 'src/cli.ts': "import { A } from './app/compose.js';\nexport const CLI = A;\n" }),
    );
    assert.equal(ok.status, 0, ok.stderr);
    const crossings: [string, string, RegExp][] = [
      [
        'src/server/core/bad.ts',
        "import { F } from '../fs/fsOps.js';",
        /server\/core .* imports no other part/,
      ],
      [
        'src/server/fs/bad.ts',
        "import { P } from '../process/launcher.js';",
        /server\/fs .* stands on server\/core only/,
      ],
      ['src/server/monitor/bad.ts', "import { E } from '../execServer.js';", /not on the server itself/],
      [
        'src/server/bad.ts',
        "import { W } from './connection/ws.js';",
        /the monitor and the connections stand on it/,
      ],
      [
        'src/fleet/bad.ts',
        "import { A } from '../app/compose.js';",
        /only the CLI \(src\/cli\*\.ts\) and main\/ import it/,
      ],
      [
        'src/server/process/bad.ts',
        "import { A } from '../../app/compose.js';",
        /stands on server\/core and server\/fs only/,
      ],
    ];
    for (const [file, line, rule] of crossings) {
      const r = check(tree({ ...stack, [file]: `${line}\nexport const BAD = 1;\n` }));
      assert.equal(r.status, 1, `${file} should fail`);
      assert.match(
        r.stderr,
        new RegExp(`^${file.replace(/\//g, '\\/').replace(/\./g, '\\.')}:1: imports`, 'm'),
      );
      assert.match(r.stderr, rule, file);
    }
  });
});
