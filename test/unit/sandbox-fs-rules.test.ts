// FsRules (src/sandbox/fsAccess.ts): the decisions of confined fs/*, step by walked step. The policy is resolved on
// a real scratch tree (its writable roots must exist); the walks are synthetic, with made-up identities.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { parseSandboxParam } from '../../src/protocol/sandbox.js';
import { type FsRules, type FsStep, fsRulesFor } from '../../src/sandbox/fsAccess.js';
import type { ParsedSandbox } from '../../src/sandbox/index.js';
import { entry, managedContext, rootEntry } from '../hostile/fs-util.js';

const base = realpathSync(mkdtempSync(join(tmpdir(), 'corral-fs-rules-')));
after(() => rmSync(base, { recursive: true, force: true }));
for (const d of ['ws/sub/out', 'ws/secret', 'ws/.git', 'ws/elsewhere', 'tmpdir'])
  mkdirSync(join(base, d), { recursive: true });
writeFileSync(join(base, 'ws/secret/key'), 'k');
/** `/ws/…` → the same path under the scratch tree. */
const P = (p: string) => `${base}${p}`;

function rules(): FsRules {
  const ctx = managedContext(P('/ws'), [
    rootEntry('read'),
    entry(P('/ws'), 'write'),
    entry(P('/ws/sub'), 'read'),
    entry(P('/ws/sub/out'), 'write'),
    entry(P('/ws/secret'), 'none'),
    entry(P('/tmpdir'), 'write'),
  ]);
  const parsed = parseSandboxParam(ctx);
  assert.ok(parsed.success);
  const out = fsRulesFor(parsed.data as ParsedSandbox, { tmpdir: P('/tmpdir') });
  assert.ok(out && typeof out !== 'string', String(out));
  return out;
}

/** Walks a path step by step; `idents` gives what some walked paths "are" (dev:ino). */
function walk(r: FsRules, path: string, idents: Record<string, string> = {}): FsStep {
  let step = r.root('root');
  let cur = '';
  const inTree = path.startsWith('/ws') || path.startsWith('/tmpdir');
  for (const name of (inTree ? P(path) : path).split('/').filter(Boolean)) {
    cur += `/${name}`;
    const short = inTree ? cur.slice(base.length) : cur;
    step = r.child(step, name, idents[short] ?? `ino:${cur}`);
  }
  return step;
}

test('by walked path: the most specific entry decides (sandbox.md §4.2)', () => {
  const r = rules();
  assert.equal(r.access(walk(r, '/ws/a.txt')), 'write');
  assert.equal(r.access(walk(r, '/ws/sub/a.txt')), 'read');
  assert.equal(r.access(walk(r, '/ws/sub/out/a.txt')), 'write');
  assert.equal(r.access(walk(r, '/ws/secret/key')), 'none');
  assert.equal(r.access(walk(r, '/etc/passwd')), 'read');
  assert.equal(r.denial(walk(r, '/etc/passwd'), 'write'), 'read-only');
  assert.equal(r.denial(walk(r, '/ws/secret/key'), 'read'), 'unreadable');
  assert.equal(r.denial(walk(r, '/ws/secret/key'), 'write'), 'outside');
  // The sandbox has its own /proc and /dev: the server's are neither read nor written, whatever the entries say.
  assert.equal(r.denial(walk(r, '/proc/self/environ'), 'read'), 'host-only');
  assert.equal(r.denial(walk(r, '/dev/shm/x'), 'write'), 'host-only');
  r.addIdentity('/proc', 'ino:procroot');
  assert.equal(
    r.denial(walk(r, '/ws/proc-bind/self', { '/ws/proc-bind': 'ino:procroot' }), 'read'),
    'host-only',
  );
});

test('by identity: a read-only or none path reached by another name keeps its access', () => {
  const r = rules();
  r.addIdentity(P('/ws/sub'), 'ino:sub');
  r.addIdentity(P('/ws/secret/key'), 'ino:key');
  r.addIdentity(P('/ws/sub/out'), 'ino:out'); // a write entry: never matched by identity
  // /ws/alias is /ws/sub (a bind mount, a rename); /ws/link.txt is /ws/secret/key (a hard link).
  assert.equal(r.access(walk(r, '/ws/alias/x', { '/ws/alias': 'ino:sub' })), 'read');
  assert.equal(r.access(walk(r, '/ws/alias/out/x', { '/ws/alias': 'ino:sub' })), 'read');
  assert.equal(r.access(walk(r, '/ws/link.txt', { '/ws/link.txt': 'ino:key' })), 'none');
  // By its own name the deeper write entry still applies; identity never grants.
  assert.equal(
    r.access(walk(r, '/ws/sub/out/x', { '/ws/sub': 'ino:sub', '/ws/sub/out': 'ino:out' })),
    'write',
  );
  assert.equal(r.access(walk(r, '/etc/x', { '/etc': 'ino:out' })), 'read');
});

test('protected names are read-only in every writable root, links to them carry it', () => {
  const r = rules();
  for (const p of [
    '/ws/.git',
    '/ws/.git/HEAD',
    '/ws/.codex/config.toml',
    '/tmpdir/.aws',
    '/ws/sub/out/.agents/x',
  ]) {
    assert.equal(r.access(walk(r, p)), 'read', p);
    assert.equal(r.denial(walk(r, p), 'write'), 'protected', p);
  }
  assert.equal(r.access(walk(r, '/ws/elsewhere/.git/x')), 'write', 'not a writable root: an ordinary name');
  // /ws/.codex is a link to /ws/elsewhere: what it leads to is protected through it.
  const link = walk(r, '/ws/.codex');
  const target = r.throughLink(walk(r, '/ws/elsewhere/config.toml'), link);
  assert.equal(r.denial(target, 'write'), 'protected');
  const msg = r.message(P('/ws/.codex/config.toml'), target, 'write', 'protected');
  assert.equal(
    msg,
    `sandbox denied write to ${P('/ws/.codex/config.toml')} (resolves to ${P('/ws/elsewhere/config.toml')}): ${P('/ws/.codex')} is protected in a writable root`,
  );
});
