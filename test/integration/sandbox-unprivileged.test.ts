/**
 * The suite runs as root here; Corral's users mostly do not. This runs a sandbox with managed network as an
 * unprivileged user (uid 65534 through setpriv): bubblewrap then builds its namespaces without privileges, and the
 * server has to enter the sandbox's network namespace through the user namespace that owns it.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { tsEntry } from '../helpers/cli.js';
import { needsSandbox } from '../helpers/native.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const FIXTURE = fileURLToPath(new URL('../fixtures/unprivileged/managed-net.ts', import.meta.url));
const NOBODY = ['--reuid=65534', '--regid=65534', '--clear-groups'];

function whySkip(): string | false {
  if (process.getuid?.() !== 0)
    return 'not root: nothing to switch away from (the other sandbox tests run unprivileged)';
  try {
    execFileSync('setpriv', [...NOBODY, 'test', '-r', FIXTURE], { stdio: 'ignore' });
  } catch {
    return `setpriv is missing, or uid 65534 cannot read ${FIXTURE}`;
  }
  return false;
}

test('unprivileged: a sandbox with managed network reaches its endpoint through listeners made in its namespace', {
  skip: whySkip() || needsSandbox,
  timeout: 60_000,
}, async (t) => {
  const child = spawn('setpriv', [...NOBODY, 'env', 'HOME=/tmp', process.execPath, ...tsEntry(FIXTURE)], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.signal.addEventListener('abort', () => child.kill('SIGKILL'));
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  const code = await new Promise<number | null>((r) => child.on('close', r));
  assert.equal(code, 0, err);
  const r = JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, unknown>;
  assert.equal(r.error, undefined, String(r.error));
  assert.equal(r.uid, 65534);
  assert.equal(r.code, 0, String(r.stderr));
  assert.equal(r.stdout, 'hello from the host 65534\n');
  assert.equal(r.forwarderSeen, false, 'the forwarder fallback must not have run');
});
