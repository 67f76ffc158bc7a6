/**
 * The command line's own answers. Every `corral` command answers `--help` (and `-h`) with the usage on stdout and
 * exit 0, and the usage names every command: `serve --help`, `audit export --help`, `doctor -h` and `selftest --help`
 * were refused as unknown options (exit 1) before. A `-h` after `--` is not a request for help.
 *
 * Bad values are refused before anything is started: a bad `--listen` (it used to open the audit database and set
 * up cgroups first), a `--join` URL the fleet would refuse or a server joined twice (the host was started, then the
 * join failed), and an `--allow-origin` or `--allow-host` that could never match (they were taken as given:
 * `--allow-origin http://localhost:3000/` allowed nothing).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CORRAL_BIN } from '../helpers/cli.js';

const corral = (args: string[]) => {
  const r = spawnSync(process.execPath, [CORRAL_BIN, ...args], { encoding: 'utf8', timeout: 30_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
};

test('each command answers --help and -h with the whole usage, exit 0', () => {
  const whole = corral(['--help']);
  assert.equal(whole.code, 0, whole.stderr);
  for (const line of [
    'corral exec-server --listen',
    'corral serve',
    'corral audit export',
    'corral audit replay',
    'corral audit verify',
    'corral doctor',
    'corral selftest',
    'corral approvals',
  ])
    assert.ok(whole.stdout.includes(line), `the usage names ${line}`);
  for (const args of [
    ['exec-server', '--help'],
    ['serve', '--help'],
    ['serve', '--port', '0', '-h'],
    ['audit', '--help'],
    ['audit', 'export', '--help'],
    ['audit', 'verify', '-h'],
    ['doctor', '--help'],
    ['selftest', '-h'],
  ]) {
    const r = corral(args);
    assert.deepEqual({ code: r.code, stdout: r.stdout, stderr: r.stderr }, { ...whole }, args.join(' '));
  }
});

test('a -h after -- is not a request for help', () => {
  const r = corral(['doctor', '--', '-h']);
  assert.notEqual(r.code, 0);
  assert.ok(!r.stdout.startsWith('usage:'), r.stdout);
});

test('a bad --listen is refused, naming what is wrong, before anything is started', () => {
  const dir = mkdtempSync(join(tmpdir(), 'corral-listen-'));
  try {
    const db = join(dir, 'audit.db');
    for (const [listen, said] of [
      ['ws://127.0.0.1:99999', '--listen: port 99999 is out of range (0-65535)'],
      ['ws://[::1]:70000', '--listen: port 70000 is out of range (0-65535)'],
      ['http://127.0.0.1:0', '--listen: expected ws://HOST:PORT or stdio, got http://127.0.0.1:0'],
      ['ws://', '--listen: not a URL: ws://'],
    ]) {
      const r = corral(['exec-server', '--listen', listen!, '--audit-db', db]);
      assert.equal(r.code, 2, r.stderr);
      assert.ok(r.stderr.startsWith(`corral: ${said}\n`), r.stderr);
      assert.equal(r.stdout, '');
      assert.ok(!existsSync(db), `${listen}: the audit database was opened`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a --join URL the fleet would refuse is refused before anything is started', () => {
  const dir = mkdtempSync(join(tmpdir(), 'corral-join-'));
  try {
    const db = join(dir, 'audit.db');
    const tokenFile = join(dir, 'token');
    writeFileSync(tokenFile, `${'t'.repeat(32)}\n`, { mode: 0o600 });
    for (const [url, said] of [
      ['notaurl', '--join: url is not a URL: notaurl'],
      ['ftp://127.0.0.1:1', '--join: url must be ws://, wss://, http:// or https://, not ftp:'],
      ['ws://user:pw@127.0.0.1:1', '--join: url must not hold a user or password'],
    ]) {
      const r = corral(['serve', '--join', `${url}#token-file=${tokenFile}`, '--audit-db', db]);
      assert.equal(r.code, 2, r.stderr);
      assert.ok(r.stderr.startsWith(`corral: ${said}\n`), r.stderr);
      assert.ok(!existsSync(db), `${url}: the audit database was opened`);
    }
    // The same server twice (the fleet would mirror it twice): one URL, with and without its trailing slash.
    const twice = corral([
      'serve',
      '--join',
      `ws://127.0.0.1:1#token-file=${tokenFile}`,
      '--join',
      `ws://127.0.0.1:1/#token-file=${tokenFile}`,
      '--audit-db',
      db,
    ]);
    assert.equal(twice.code, 2, twice.stderr);
    assert.ok(twice.stderr.startsWith('corral: --join: ws://127.0.0.1:1/ is given twice\n'), twice.stderr);
    assert.ok(!existsSync(db));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--allow-origin and --allow-host values that could never match are refused, naming what would', () => {
  for (const [args, said] of [
    [
      ['--allow-origin', 'notanorigin'],
      '--allow-origin: not an origin (scheme://host[:port], as a browser sends it): notanorigin',
    ],
    [
      ['--allow-origin', 'http://localhost:3000/'],
      '--allow-origin: a browser sends http://localhost:3000, never http://localhost:3000/',
    ],
    [
      ['--allow-origin', 'HTTP://LOCALHOST'],
      '--allow-origin: a browser sends http://localhost, never HTTP://LOCALHOST',
    ],
    [
      ['--allow-origin', 'https://localhost:443'],
      '--allow-origin: a browser sends https://localhost, never https://localhost:443',
    ],
    [['--allow-host', ''], '--allow-host: not a host name or IP address (no scheme, port or path): '],
    [
      ['--allow-host', 'corral.svc:8888'],
      '--allow-host: not a host name or IP address (no scheme, port or path): corral.svc:8888',
    ],
    [
      ['--allow-host', 'http://corral.svc'],
      '--allow-host: not a host name or IP address (no scheme, port or path): http://corral.svc',
    ],
  ] as const) {
    const r = corral(['exec-server', '--listen', 'ws://127.0.0.1:0', '--no-audit', ...args]);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.ok(r.stderr.startsWith(`corral: ${said}\n`), r.stderr);
    assert.equal(r.stdout, '');
  }
});
