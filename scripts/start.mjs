#!/usr/bin/env node
// `npm start`: the Electron app when the Electron binary is installed, otherwise (one line says so) the headless
// host with the panel served to a browser. `--desktop` insists on Electron; `--serve` insists on the headless host.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const want = args.includes('--desktop') ? 'desktop' : args.includes('--serve') ? 'serve' : 'auto';
const passThrough = args.filter((a) => a !== '--desktop' && a !== '--serve');

/** The Electron binary's path, or why there is none. */
function electronBinary() {
  try {
    const p = createRequire(import.meta.url)('electron');
    if (typeof p !== 'string') return { error: 'the electron package did not return a binary path' };
    if (!existsSync(p)) return { error: `the Electron binary is not installed (${p} does not exist)` };
    return { path: p };
  } catch (e) {
    return { error: `the Electron binary is not installed (${String(e?.message ?? e).split('\n')[0]})` };
  }
}

if (!existsSync(join(root, 'dist', 'cli.js')) || !existsSync(join(root, 'dist', 'renderer', 'app.js'))) {
  const r = spawnSync(process.execPath, [join(root, 'scripts', 'build.mjs')], { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

function run(cmd, argv) {
  const child = spawn(cmd, argv, { stdio: 'inherit', cwd: root });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => child.kill(sig));
  child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
}

const electron = want === 'serve' ? null : electronBinary();
if (electron?.path) {
  run(electron.path, [root, ...passThrough]);
} else if (want === 'desktop') {
  console.error(`corral: cannot start the desktop app: ${electron?.error}`);
  process.exit(1);
} else {
  if (electron)
    console.error(
      `corral: ${electron.error}; starting the headless host, open the panel URL below in a browser`,
    );
  run(process.execPath, [join(root, 'bin', 'corral.js'), 'serve', ...passThrough]);
}
