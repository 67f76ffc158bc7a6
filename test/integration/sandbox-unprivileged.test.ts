/**
 * The suite runs as root here; Corral's users mostly do not. This runs a sandbox with managed network as an
 * unprivileged user (uid 65534 through setpriv): bubblewrap then builds its namespaces without privileges, and the
 * server has to enter the sandbox's network namespace through the user namespace that owns it.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, rmdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { sandboxNative } from '../../src/platform/sandbox.js';
import { lockFile } from '../../src/sandbox/linux/mountTargets.js';
import { tsEntry } from '../helpers/cli.js';
import { needsSandbox } from '../helpers/native.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const FIXTURE = fileURLToPath(new URL('../fixtures/unprivileged/managed-net.ts', import.meta.url));
const FOREIGN = fileURLToPath(new URL('../fixtures/unprivileged/foreign-placeholder.ts', import.meta.url));
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

// The suite's root servers and this uid's share /tmp's placeholders (/tmp/.agents, …): one of root's, which uid 65534
// cannot list, was bound as a plain directory, and root removed it before bwrap got to it (bwrap: "Can't find source
// path"; the case above failed with "the sandbox exited during setup" under a loaded `npm test`, stop 50).
test("unprivileged: another user's placeholder is a missing name, held even when its owner removes it before the sandbox starts", {
  skip: whySkip() || needsSandbox,
  timeout: 60_000,
}, async (t) => {
  const root = mkdtempSync('/tmp/corral-foreign-');
  t.after(() => rmSync(root, { recursive: true, force: true }));
  chmodSync(root, 0o755);
  const W = join(root, 'ws');
  mkdirSync(W, { mode: 0o777 });
  chmodSync(W, 0o777);
  const placeholder = join(W, '.agents');
  mkdirSync(placeholder, { mode: 0o500 });
  chmodSync(placeholder, 0o500);
  const child = spawn('setpriv', [...NOBODY, 'env', 'HOME=/tmp', process.execPath, ...tsEntry(FOREIGN), W], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  t.signal.addEventListener('abort', () => child.kill('SIGKILL'));
  let err = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  const closed = new Promise<number | null>((r) => child.on('close', r));
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async () => {
    const l = await lines.next();
    assert.ok(!l.done, `the fixture ended early: ${err}`);
    return JSON.parse(l.value) as Record<string, unknown>;
  };
  const { planned } = await next();
  rmdirSync(placeholder); // its owner's last sandbox ended
  child.stdin.end('go\n');
  const r = await next();
  assert.equal(await closed, 0, err);
  assert.equal(r.error, undefined, String(r.error));
  assert.equal(r.code, 0, String(r.stderr));
  assert.match(String(r.stdout), /^refused \d+\n$/);
  assert.deepEqual(planned, [`--dir ${placeholder}`, `--tmpfs ${placeholder}`], 'held as missing, not bound');
  assert.equal(existsSync(placeholder), false, 'the placeholder bwrap made again goes with the last share');
});

test("a server's last share removes its own user's placeholder only, never another user's", {
  skip: whySkip() || needsSandbox,
}, (t) => {
  const root = mkdtempSync('/tmp/corral-foreign-');
  t.after(() => rmSync(root, { recursive: true, force: true }));
  for (const [name, uid] of [
    ['mine', 0],
    ['theirs', 65534],
  ] as const) {
    const p = join(root, name);
    mkdirSync(p, { mode: 0o500 });
    chmodSync(p, 0o500);
    chownSync(p, uid, uid);
    const lock = lockFile(p);
    sandboxNative!.releaseMountTarget(sandboxNative!.holdMountTarget(lock, p), lock, p);
    // uid 65534's sandbox may have a tmpfs on its placeholder: its own server's shares, not this one's, keep it
    assert.equal(existsSync(p), uid !== 0, name);
  }
});
