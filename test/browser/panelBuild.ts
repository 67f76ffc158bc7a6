// A private build of the panel (and, for the bench, of the CLI that serves it), made from the working tree with the
// options of scripts/build.mjs: a test or bench measures the renderer as it is now, and a concurrent `npm run build`
// (which empties dist/) cannot pull files from under it.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';
import { ROOT } from './harness.js';

const made: string[] = [];
process.on('exit', () => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

const cliBuild = (absWorkingDir: string, out: string) =>
  build({
    absWorkingDir,
    bundle: true,
    logLevel: 'silent',
    entryPoints: { cli: 'src/cli.ts', 'audit/worker': 'src/audit/worker.ts' },
    outdir: out,
    platform: 'node',
    format: 'esm',
    packages: 'external',
    target: 'node20',
  });

/**
 * The CLI from the working tree, or, while someone else's half-made change keeps it from building, from the last
 * commit (`git archive HEAD src`): what is measured is the panel; the server only has to run.
 */
async function buildCli(out: string): Promise<void> {
  try {
    await cliBuild(ROOT, out);
  } catch {
    process.stderr.write(`panelBuild: the working tree's CLI does not build; using HEAD's\n`);
    await cliBuild(archive('HEAD', out, ['src', 'package.json']), out);
  }
}

/** `paths` of a commit, extracted into a fresh directory under `out`. */
function archive(commit: string, out: string, paths: string[]): string {
  const dir = mkdtempSync(join(out, 'tree-'));
  const tar = spawnSync('sh', [
    '-c',
    `git -C "${ROOT}" archive "$0" "$@" | tar -x -C "${dir}"`,
    commit,
    ...paths,
  ]);
  if (tar.status !== 0) throw new Error(`git archive ${commit} failed: ${tar.stderr}`);
  return dir;
}

/**
 * Builds into a fresh directory under node_modules/ (so the CLI's external packages resolve from it, and the addon's
 * package root is found above it) and returns it: `renderer/` (index.html, app.js, app.css) and, with `cli`, `cli.js`
 * and the audit worker. Removed when the process exits.
 */
export async function privateBuild(opts: { cli?: boolean } = {}): Promise<string> {
  const base = join(ROOT, 'node_modules', '.corral-private-builds');
  mkdirSync(base, { recursive: true });
  const out = mkdtempSync(join(base, 'b-'));
  made.push(out);
  const common = { absWorkingDir: ROOT, bundle: true, sourcemap: false, logLevel: 'error' as const };
  const server = opts.cli ? buildCli(out) : null;
  // CORRAL_PANEL_FROM=<commit>: the panel as it was then (a bench's baseline; a test shown to fail on the old code).
  const from = process.env.CORRAL_PANEL_FROM;
  const tree = from ? archive(from, out, ['renderer', 'src/protocol', 'package.json']) : ROOT;
  await Promise.all([
    build({
      ...common,
      absWorkingDir: tree,
      entryPoints: { 'renderer/app': 'renderer/app.ts' },
      outdir: out,
      platform: 'browser',
      format: 'iife',
      target: 'chrome120',
      loader: { '.css': 'css' },
    }),
    server,
  ]);
  cpSync(join(tree, 'renderer', 'index.html'), join(out, 'renderer', 'index.html'));
  return out;
}
