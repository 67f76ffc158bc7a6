/**
 * Issue 31, item 5: every switch that turns native code off is read in src/platform/addon.ts and nowhere else, and
 * the C reads no environment at all (the switches reach it through setSwitches).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';

const ROOT = join(import.meta.dirname, '..', '..');
const SWITCHES = ['CORRAL_NATIVE', 'CORRAL_NO_BATCH', 'CORRAL_NO_SIMD', 'CORRAL_PROXY_SPLICE'];

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? walk(p) : [p];
  });
}

test('the native switches are read in src/platform/addon.ts only; the C calls no getenv', () => {
  const readers: string[] = [];
  for (const file of walk(join(ROOT, 'src'))) {
    const rel = relative(ROOT, file);
    const text = readFileSync(file, 'utf8');
    if (/\.[ch]$/.test(file) && /\bgetenv\s*\(/.test(text)) readers.push(`${rel}: getenv`);
    if (!/\.ts$/.test(file) || rel === join('src', 'platform', 'addon.ts')) continue;
    for (const name of SWITCHES)
      if (new RegExp(`env(\\.|\\[['"])${name}\\b`).test(text)) readers.push(`${rel}: ${name}`);
  }
  assert.deepEqual(readers, []);
});
