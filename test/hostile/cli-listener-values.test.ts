/**
 * The listener's values on the command line (`--listen`, `--allow-origin`, `--allow-host`, `--join`: src/cli.ts
 * listenTarget and parseJoins, src/cliOptions.ts allowedOrigins and allowedHosts), fed huge, deep, wide and malformed
 * values. Whoever starts Corral writes these (docs/security.md: the user, or a launcher script acting for them): none
 * may start anything, hang, or echo a value unbounded or with its terminal controls live. Each is refused with exit 2
 * and one line that names the flag, and no audit database is opened.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CORRAL_BIN } from '../helpers/cli.js';

const HUGE = 'h'.repeat(100_000);
const DEEP = '['.repeat(20_000) + ']'.repeat(20_000);
const CONTROLS = 'x\u001b[2J\u001b]0;owned\u0007\r\u009b31m\u202e';

function refused(args: string[], flag: string, dir: string): void {
  const db = join(dir, 'audit.db');
  const r = spawnSync(process.execPath, [CORRAL_BIN, ...args, '--audit-db', db], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  const what = `${args[1]} ${(args[2] ?? '').slice(0, 40)}…`;
  assert.equal(r.status, 2, `${what}: ${r.stderr.slice(0, 300)}`);
  assert.equal(r.stdout, '', what);
  const first = r.stderr.split('\n')[0]!;
  assert.ok(first.startsWith(`corral: ${flag}`), `${what}: ${first.slice(0, 300)}`);
  assert.ok(first.length < 600, `${what}: the value is echoed unbounded (${first.length} characters)`);
  assert.ok(
    !/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202e]/.test(r.stderr),
    `${what}: a terminal control is live`,
  );
  assert.ok(!existsSync(db), `${what}: the audit database was opened`);
}

test('huge, deep, wide and malformed listener values are refused before anything starts', () => {
  const dir = mkdtempSync(join(tmpdir(), 'corral-hostile-listen-'));
  try {
    const tokenFile = join(dir, 'token');
    writeFileSync(tokenFile, `${'t'.repeat(32)}\n`, { mode: 0o600 });
    const server = ['exec-server', '--listen'];
    for (const v of [
      `ws://${HUGE}:0`,
      `ws://127.0.0.1:${'9'.repeat(50_000)}`,
      `ws://${DEEP}:0`,
      `ws://${CONTROLS}:0`,
      CONTROLS,
      HUGE,
      'ws://127.0.0.1:0\u0000',
    ].filter((x) => !x.includes('\u0000')))
      refused([...server, v], '--listen: ', dir);
    for (const v of [
      HUGE,
      DEEP,
      CONTROLS,
      `http://${HUGE}`,
      `http://localhost/${CONTROLS}`,
      'null',
      'http://[::1',
    ])
      refused(['exec-server', '--listen', 'ws://127.0.0.1:0', '--allow-origin', v], '--allow-origin: ', dir);
    // Wide: many good values, then a bad one.
    const many = Array.from({ length: 2000 }, (_, i) => ['--allow-host', `h${i}.example`]).flat();
    for (const v of [HUGE.replace(/h/g, '-'), DEEP, CONTROLS, `${'a.'.repeat(30_000)}:1`])
      refused(
        ['exec-server', '--listen', 'ws://127.0.0.1:0', ...many, `--allow-host=${v}`],
        '--allow-host: ',
        dir,
      );
    for (const v of [`ws://${HUGE}:1`, `ws://${DEEP}`, `ws://${CONTROLS}`, `ftp://${HUGE}`])
      refused(['serve', '--join', `${v}#token-file=${tokenFile}`], '--join: ', dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
