#!/usr/bin/env node
// Builds Corral: Node entry points (CLI, Electron main), the sandboxed preload (CommonJS) and the renderer bundle.
// `node scripts/build.mjs` builds into dist/; scripts/test.mjs builds the same into a directory of its own run.
import { cpSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Builds everything into `out` (emptied first): cli.js, audit/worker.js, main/, preload/, renderer/. */
export async function buildApp(out) {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(join(out, 'renderer'), { recursive: true });
  await Promise.all(builds(out));
  cpSync(join(root, 'renderer', 'index.html'), join(out, 'renderer', 'index.html'));
}

if (process.argv[1] && pathToFileURL(resolve(process.argv[1])).href === import.meta.url) {
  await buildApp(join(root, 'dist'));
}

function builds(out) {
  const common = {
    absWorkingDir: root,
    bundle: true,
    sourcemap: true,
    logLevel: 'warning',
    target: 'node20',
  };
  return [
    build({
      ...common,
      // The audit worker thread is a script of its own next to the CLI (src/audit/trail.ts finds it).
      entryPoints: { cli: 'src/cli.ts', 'audit/worker': 'src/audit/worker.ts' },
      outdir: out,
      platform: 'node',
      format: 'esm',
      packages: 'external',
    }),
    build({
      ...common,
      entryPoints: { 'main/main': 'main/main.ts' },
      outdir: out,
      platform: 'node',
      format: 'esm',
      packages: 'external',
      external: ['electron'],
    }),
    build({
      ...common,
      entryPoints: { 'preload/preload': 'preload/preload.ts' },
      outdir: out,
      outExtension: { '.js': '.cjs' },
      platform: 'node',
      format: 'cjs',
      external: ['electron'],
    }),
    // The panel is a classic (IIFE) script: it loads the same from file:// in Electron and over http in a browser.
    build({
      ...common,
      entryPoints: { 'renderer/app': 'renderer/app.ts' },
      outdir: out,
      platform: 'browser',
      format: 'iife',
      target: 'chrome120',
      loader: { '.css': 'css' },
    }),
  ];
}
