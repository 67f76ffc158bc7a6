#!/usr/bin/env node
// Installs the released Codex CLIs that the end-to-end rig drives (test/e2e/codex-clients.test.ts) into
// .cache/codex/<version>/ with npm. Idempotent: a version whose native binary is already there is left alone.
// When the npm registry cannot be reached it says so and exits 0; the tests then skip with that message.
// Writes .cache/codex/status.json: { [version]: { status, binary?, message? } } for the tests to read.
//
//   node scripts/install-codex.mjs                 # the four versions of the acceptance matrix
//   node scripts/install-codex.mjs 0.169.0         # only the versions named
import { spawnSync } from 'node:child_process';
import {
  accessSync,
  constants,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const CODEX_VERSIONS = ['0.120.0', '0.125.0', '0.130.0', '0.169.0', '0.171.0'];

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const cacheDir = join(root, '.cache', 'codex');
const statusFile = join(cacheDir, 'status.json');

/** Where the native binary of a version lives inside its install prefix (spec codex-clients.md §2). */
export function binaryPath(version) {
  const vendor = join(
    cacheDir,
    version,
    'node_modules',
    '@openai',
    'codex-linux-x64',
    'vendor',
    'x86_64-unknown-linux-musl',
  );
  const candidates = [join(vendor, 'bin', 'codex'), join(vendor, 'codex', 'codex')];
  return candidates.find((p) => isExecutable(p)) ?? null;
}

function isExecutable(p) {
  try {
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

const UNREACHABLE =
  /ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|network request to .* failed|request to .* failed|socket hang up|getaddrinfo/i;

function npm(args, cwd) {
  return spawnSync('npm', args, {
    cwd,
    encoding: 'utf8',
    timeout: 600_000,
    env: {
      ...process.env,
      npm_config_update_notifier: 'false',
      npm_config_fund: 'false',
      npm_config_audit: 'false',
    },
  });
}

function install(version) {
  const existing = binaryPath(version);
  if (existing) return { status: 'cached', binary: existing };
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    return {
      status: 'unsupported',
      message: `only linux x64 is supported (this is ${process.platform} ${process.arch})`,
    };
  }
  const dir = join(cacheDir, version);
  const staging = `${dir}.partial`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  // A package.json of its own keeps npm from walking up into the project's.
  writeFileSync(
    join(staging, 'package.json'),
    `${JSON.stringify({ name: `codex-${version}`, private: true })}\n`,
  );
  const started = Date.now();
  const r = npm(
    [
      'install',
      '--prefix',
      staging,
      `@openai/codex@${version}`,
      '--no-save',
      '--ignore-scripts',
      '--no-package-lock',
    ],
    staging,
  );
  const output = `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}`;
  if (r.status !== 0) {
    rmSync(staging, { recursive: true, force: true });
    if (UNREACHABLE.test(output)) {
      return { status: 'unreachable', message: `npm registry unreachable: ${firstErrorLine(output)}` };
    }
    return {
      status: 'failed',
      message: `npm install @openai/codex@${version} failed: ${firstErrorLine(output)}`,
    };
  }
  rmSync(dir, { recursive: true, force: true });
  renameSync(staging, dir);
  const binary = binaryPath(version);
  if (!binary)
    return { status: 'failed', message: `installed @openai/codex@${version} but found no linux-x64 binary` };
  return { status: 'installed', binary, seconds: Math.round((Date.now() - started) / 100) / 10 };
}

function firstErrorLine(output) {
  const lines = output.split('\n').filter((l) => /err/i.test(l));
  return (lines.find((l) => UNREACHABLE.test(l)) ?? lines[0] ?? output.trim().split('\n')[0] ?? '').trim();
}

function main() {
  const versions = process.argv.slice(2).filter((a) => !a.startsWith('-'));
  const wanted = versions.length > 0 ? versions : CODEX_VERSIONS;
  mkdirSync(cacheDir, { recursive: true });
  let status = {};
  try {
    status = JSON.parse(readFileSync(statusFile, 'utf8'));
  } catch {}
  let unreachable = null;
  let failed = false;
  for (const version of wanted) {
    // Once the registry is known unreachable, do not wait for it again for the next version.
    const result =
      unreachable && !binaryPath(version)
        ? { status: 'unreachable', message: unreachable }
        : install(version);
    if (result.status === 'unreachable') unreachable = result.message;
    if (result.status === 'failed' || result.status === 'unsupported') failed = true;
    status[version] = result;
    const what =
      result.status === 'cached'
        ? `cached     ${result.binary}`
        : result.status === 'installed'
          ? `installed  ${result.binary} (${result.seconds}s)`
          : `${result.status.padEnd(10)} ${result.message}`;
    console.log(`codex ${version.padEnd(8)} ${what}`);
  }
  writeFileSync(statusFile, `${JSON.stringify(status, null, 2)}\n`);
  if (unreachable) console.log(`install-codex: ${unreachable}; the Codex end-to-end tests will skip.`);
  // Unreachable registry: exit 0 (the tests skip). A real install failure is an error.
  process.exit(failed ? 1 : 0);
}

if (process.argv[1] && existsSync(process.argv[1]) && fileURLToPath(import.meta.url) === process.argv[1])
  main();
