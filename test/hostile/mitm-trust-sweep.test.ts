/**
 * The sweep of dead servers' trust files (src/network/mitm/trust.ts sweepDeadTrustFiles) reads the names in the trust
 * directory, which any process of the server's user can write: fed wide (5000 names), huge (255-byte names, 30-digit
 * pids), malformed (half tags, control characters, a newline, other suffixes) and hostile (a dead tag on a directory,
 * on a symlink to a file elsewhere, a live server's tag copied) names, it removes exactly the files and links of the
 * trust files' form whose server is certainly gone, follows nothing, and takes no time to speak of. What a same-user
 * process could do with it: nothing it cannot do directly (it may write and delete in that directory itself); it
 * cannot make the sweep touch anything outside the directory, or a live server's file.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { sweepDeadTrustFiles } from '../../src/network/mitm/trust.js';
import { formatTag, ownTag } from '../../src/process/serverTag.js';
import { tempDir } from '../helpers/server.js';

const linux = process.platform === 'linux';

test("wide, huge and malformed names: only dead servers' trust files go, nothing is followed", {
  skip: !linux && 'server tags need /proc',
}, () => {
  const dir = tempDir('corral-trust-sweep-');
  const outside = tempDir('corral-trust-outside-');
  try {
    const me = ownTag();
    const gone = spawnSync('true').pid!;
    const sha = (i: number) => i.toString(16).padStart(64, '0');
    const deadName = (i: number) =>
      `${formatTag({ ...me, pid: gone, startTime: String(1000 + i) })}.${sha(i)}.pem`;
    const expectGone: string[] = [];
    const expectKept: string[] = [];
    // Wide: 2000 dead servers' files, 2000 of this (live) server, 1000 malformed.
    for (let i = 0; i < 2000; i++) {
      writeFileSync(join(dir.path, deadName(i)), '');
      expectGone.push(deadName(i));
      const live = `${formatTag(me)}.${sha(i)}.pem`;
      writeFileSync(join(dir.path, live), '');
      expectKept.push(live);
    }
    const malformed = [
      `${me.pidNs}.${gone}.pem`, // half a tag
      `${me.pidNs}.${gone}.1.${'a'.repeat(63)}.pem`, // a short digest
      `${me.pidNs}.${gone}.1.${'A'.repeat(64)}.pem`, // upper case
      `${me.pidNs}.${gone}.1.${'a'.repeat(64)}.pem\n`, // a newline after it
      `${me.pidNs}.${gone}.1.${'a'.repeat(64)}.pem.tmp`,
      `x${me.pidNs}.${gone}.1.${'a'.repeat(64)}.pem`,
      `${me.pidNs}.${gone}.\u0001.${'a'.repeat(64)}.pem`,
      `${'9'.repeat(30)}.${gone}.1.${'a'.repeat(64)}.pem`, // a pid namespace that is not ours
      'x'.repeat(255),
      `${'1'.repeat(100)}.${'2'.repeat(50)}.${'3'.repeat(20)}`,
    ];
    for (let i = 0; i < 990; i++) malformed.push(`junk-${i}-${'z'.repeat(i % 200)}`);
    for (const n of malformed) writeFileSync(join(dir.path, n), '');
    expectKept.push(...malformed);
    // A pid no process can have (30 digits) in our namespace: certainly gone, removed.
    const hugePid = `${me.pidNs}.${'9'.repeat(30)}.1.${'b'.repeat(64)}.pem`;
    writeFileSync(join(dir.path, hugePid), '');
    expectGone.push(hugePid);
    // Hostile: a dead tag on a directory (kept, with its content), on a symlink to a file outside (the link goes,
    // the file stays), on a symlink to a directory outside (the link goes, nothing in it is touched).
    const onDir = deadName(5000);
    mkdirSync(join(dir.path, onDir));
    writeFileSync(join(dir.path, onDir, 'inside'), 'kept');
    expectKept.push(onDir);
    writeFileSync(join(outside.path, 'precious'), 'kept');
    const linkToFile = deadName(5001);
    symlinkSync(join(outside.path, 'precious'), join(dir.path, linkToFile));
    const linkToDir = deadName(5002);
    symlinkSync(outside.path, join(dir.path, linkToDir));
    expectGone.push(linkToFile, linkToDir);

    const t0 = performance.now();
    sweepDeadTrustFiles(dir.path);
    const ms = performance.now() - t0;
    const left = new Set(readdirSync(dir.path));
    for (const n of expectGone) assert.ok(!left.has(n), `left: ${JSON.stringify(n)}`);
    for (const n of expectKept) assert.ok(left.has(n), `removed: ${JSON.stringify(n)}`);
    assert.equal(left.size, expectKept.length);
    assert.equal(readFileSync(join(dir.path, onDir, 'inside'), 'utf8'), 'kept');
    assert.deepEqual(readdirSync(outside.path), ['precious']);
    assert.equal(readFileSync(join(outside.path, 'precious'), 'utf8'), 'kept');
    assert.ok(ms < 5000, `${ms} ms for 5000 names`);
    // Missing or unreadable directories: nothing happens.
    sweepDeadTrustFiles(join(dir.path, 'missing'));
    sweepDeadTrustFiles(join(dir.path, linkToFile));
  } finally {
    dir.cleanup();
    outside.cleanup();
  }
});
