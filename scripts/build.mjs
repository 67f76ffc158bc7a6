#!/usr/bin/env node
// Builds Corral: Node entry points (CLI, Electron main), the sandboxed preload (CommonJS) and the renderer bundle.
// `node scripts/build.mjs` builds into dist/; scripts/test.mjs builds the same into a directory of its own run.
import { cpSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * The pure-JavaScript packages bundled into the Node bundles (the CLI, the audit worker, the Electron main, the test
 * files); every other package stays an import resolved from node_modules at run time (the native ones: node-pty,
 * better-sqlite3; electron; the OpenTelemetry SDK, loaded only when an OTLP endpoint is set; playwright-core and the
 * test tools). Loading these from node_modules cost every process ~0.15–0.2 CPU-s of module resolution, file reads
 * and per-module compilation (a `corral` start 0.47 → 0.31 CPU-s), paid by each server start and each test file.
 */
const INLINE = [
  'zod',
  'ws',
  'jose',
  'aws4',
  'electron-log',
  '@noble/ciphers',
  '@noble/curves',
  '@noble/hashes',
  '@noble/post-quantum',
];

/** The esbuild options of a Node bundle that inlines INLINE and leaves the other packages external. */
export const nodeBundle = {
  plugins: [
    {
      name: 'inline-packages',
      setup(b) {
        b.onResolve({ filter: /^[^./]/ }, (args) => {
          const parts = args.path.split('/');
          const name = args.path.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
          // electron-log's main-process entry finds its renderer preload beside itself (__dirname): it stays in
          // node_modules, for the Electron main only.
          return INLINE.includes(name) && args.path !== 'electron-log/main' ? undefined : { external: true };
        });
      },
    },
  ],
  // The bundled CommonJS packages call require() for their optional companions (ws: bufferutil): an ES module has
  // none of its own.
  banner: {
    js: "import { createRequire as __corralRequire } from 'node:module';\nconst require = __corralRequire(import.meta.url);",
  },
};

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
      // The audit worker thread is a script of its own next to the CLI (src/audit/trail.ts finds it); the Electron
      // main process is the third Node entry (electron itself stays external, as every package not inlined).
      entryPoints: { cli: 'src/cli.ts', 'audit/worker': 'src/audit/worker.ts', 'main/main': 'main/main.ts' },
      outdir: out,
      platform: 'node',
      format: 'esm',
      ...nodeBundle,
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
