/**
 * The one loader of the native addon (src/platform/addon.ts): a build whose `abi` is not the one the JavaScript was
 * written against is not used at all, and the reason says which versions met and what to do; the same build with the
 * expected `abi` loads. The builds are tiny N-API modules compiled here, in a package tree of their own with the
 * loader bundled into it (as dist/ is).
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { build } from 'esbuild';
import { NATIVE_ABI } from '../../src/platform/addon.js';

const ROOT = join(import.meta.dirname, '..', '..');
const headers = [join(dirname(process.execPath), '..', 'include', 'node'), '/usr/include/node'].find((d) =>
  existsSync(join(d, 'node_api.h')),
);
const cc = ['/usr/bin/cc', '/usr/bin/gcc'].find(existsSync);
const noCompiler =
  process.platform !== 'linux'
    ? 'the addon is Linux-only'
    : !headers || !cc
      ? 'no C compiler or Node headers to build a test addon'
      : false;

describe('the addon loader', { skip: noCompiler }, () => {
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'corral-abi-'));
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'corral', type: 'module' }));
    mkdirSync(join(dir, 'build', 'Release'), { recursive: true });
    mkdirSync(join(dir, 'dist'));
    await build({
      entryPoints: [join(ROOT, 'src', 'platform', 'addon.ts')],
      outfile: join(dir, 'dist', 'addon.mjs'),
      bundle: true,
      platform: 'node',
      format: 'esm',
      logLevel: 'error',
    });
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** Builds an addon exporting only `abi`, and reports what the loader made of it. */
  function loadWithAbi(abi: number): { loaded: boolean; absence: string | null } {
    const src = join(dir, 'fake.c');
    writeFileSync(
      src,
      `#include <node_api.h>
NAPI_MODULE_INIT() {
  napi_value v;
  napi_create_int32(env, ${abi}, &v);
  napi_set_named_property(env, exports, "abi", v);
  return exports;
}
`,
    );
    execFileSync(cc!, [
      '-shared',
      '-fPIC',
      `-I${headers}`,
      '-o',
      join(dir, 'build', 'Release', 'corral_spawn.node'),
      src,
    ]);
    const r = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const m = await import(${JSON.stringify(join(dir, 'dist', 'addon.mjs'))});
         console.log(JSON.stringify({ loaded: m.addon !== null, absence: m.addonAbsence }));`,
      ],
      { encoding: 'utf8', env: { ...process.env, CORRAL_NATIVE: '' } },
    );
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout);
  }

  it('a build of another interface version is not loaded, and the reason names both versions and the fix', () => {
    const r = loadWithAbi(NATIVE_ABI + 1);
    assert.equal(r.loaded, false);
    assert.ok(
      r.absence?.includes(`abi ${NATIVE_ABI + 1}, this build needs ${NATIVE_ABI}`),
      String(r.absence),
    );
    assert.ok(r.absence?.includes('npx node-gyp rebuild'), String(r.absence));
  });

  it('the same build with the expected version loads', () => {
    assert.deepEqual(loadWithAbi(NATIVE_ABI), { loaded: true, absence: null });
  });
});
