/**
 * codex 0.171's OpenAI-account credentials on Corral's command line (issue 35, item 5; src/remote/credentials.ts):
 * `--chatgpt-token-stdin` / `--chatgpt-account-id` are checked as Codex checks them (its texts and exit codes), then
 * the account policy is loaded and the registry asked as codex 0.171 does (a loopback HTTPS stand-in for both; the
 * old code refused the flag and asked neither); `--use-agent-identity-auth` is checked and refused, naming the
 * OpenAI service it needs. `--executor-credential-
 * stdin` is implemented (src/remote/executorCredential.ts): its first frame is checked before anything starts (Codex's
 * texts, exit 1), then the executor registers with the token and lives as long as the pipe (exit 0 when it closes).
 * For every refusal: the exit code, a message naming the flag and why, no secret on stdout or stderr, and the secret
 * (stdin's token, CODEX_ACCESS_TOKEN) in no file the command could write (its state and home directories, its TMPDIR,
 * its --log-file at debug level); nothing started before the refusal (no audit database) and the registry never
 * dialled. The old code (1561683) composed the server (and created its audit database) before refusing: the "nothing
 * started" checks fail there.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { isLoopback } from '../../src/cliAuth.js';
import { API_KEY_REGISTRY_PROBLEM, apiKeyRegistryProblem } from '../../src/remote/credentials.js';
import { CREDENTIAL_TEXT } from '../../src/remote/executorCredential.js';
import { CORRAL_BIN, ROOT } from '../helpers/cli.js';
import { startFakeRegistry } from '../helpers/registry.js';
import { FAKE_AWS } from '../helpers/registry-contract.js';
import { makeOriginCerts } from '../helpers/tlsOrigin.js';

const SECRET_SIG = `corralSecretSignature${'Z'.repeat(40)}`;
const jwt = (claims: Record<string, unknown>) =>
  `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${SECRET_SIG}`;
const ACCOUNT = 'acct_corral_test';
const TOKEN = jwt({ 'https://api.openai.com/auth': { chatgpt_account_id: ACCOUNT } });
const GARBAGE = `not-a-jwt-${SECRET_SIG}`;
const IDENTITY = `identity-${SECRET_SIG}`;

let registry: net.Server;
let dialled = 0;
let remote = '';

before(async () => {
  // The registry the command would register with: a loopback listener that only counts who dials it.
  registry = net.createServer((s) => {
    dialled++;
    s.destroy();
  });
  await new Promise<void>((r) => registry.listen(0, '127.0.0.1', r));
  remote = `https://127.0.0.1:${(registry.address() as net.AddressInfo).port}`;
});
after(() => registry.close());

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  /** Every file the command left under its directories, with its bytes. */
  files: Map<string, Buffer>;
  ms: number;
}

function walk(dir: string, out: Map<string, Buffer>): void {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const st = statSync(p);
    if (st.isDirectory()) walk(p, out);
    else if (st.isFile()) out.set(p, readFileSync(p));
  }
}

/**
 * Runs `corral exec-server ARGS` (or `forward`), writing `stdin` and keeping standard input open unless `close`: a
 * command that waits for more input is killed after 60 s and fails the test (code null).
 */
async function corral(
  args: string[],
  o: {
    stdin?: string;
    env?: Record<string, string>;
    close?: boolean;
    /** Standard input from this file instead of a pipe. */
    stdinFile?: string;
    /** Drives standard input (a pipe) after the start; the command is awaited after it returns. */
    feed?: (stdin: Writable) => Promise<void>;
  } = {},
) {
  const dir = mkdtempSync(join(tmpdir(), 'corral-credentials-'));
  const env = { XDG_STATE_HOME: join(dir, 'state'), HOME: join(dir, 'home'), TMPDIR: join(dir, 'tmp') };
  for (const d of Object.values(env)) mkdirSync(d);
  const log = join(dir, 'corral.log');
  const t0 = performance.now();
  const child = spawn(
    process.execPath,
    // forward has no --log-file (it logs to stderr).
    [
      // The bundle (what `npx corral` runs): through tsx, with the fresh TMPDIR this test gives each run, every start
      // would transform the whole source again (~3 s of CPU).
      CORRAL_BIN,
      'exec-server',
      ...args,
      '--log-level',
      'debug',
      ...(args[0] === 'forward' ? [] : ['--log-file', log]),
    ],
    {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env, ...o.env },
      stdio: [o.stdinFile ? openSync(o.stdinFile, 'r') : 'pipe', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d) => {
    stdout += d;
  });
  child.stderr?.on('data', (d) => {
    stderr += d;
  });
  const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  const killer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  if (child.stdin) {
    child.stdin.on('error', () => {}); // it may exit before reading
    if (o.stdin !== undefined) child.stdin.write(o.stdin);
    if (o.close) child.stdin.end();
    if (o.feed) await o.feed(child.stdin);
  }
  const code = await exited;
  clearTimeout(killer);
  child.stdin?.destroy();
  const files = new Map<string, Buffer>();
  try {
    walk(dir, files);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return { code, stdout, stderr, files, ms: performance.now() - t0 } satisfies Run;
}

/** The refusal's checks that hold for every case. */
function assertRefused(r: Run, code: number, message: RegExp, secrets: string[]): void {
  assert.equal(r.code, code, `exit code (stderr: ${r.stderr})`);
  assert.match(r.stderr, message);
  assert.equal(r.stdout, '', 'nothing on stdout (no URL: nothing listens)');
  for (const s of [...secrets, SECRET_SIG]) {
    assert.ok(!r.stderr.includes(s) && !r.stdout.includes(s), 'the secret is not echoed');
    for (const [path, bytes] of r.files) assert.ok(!bytes.includes(s), `the secret was written to ${path}`);
  }
  const audit = [...r.files.keys()].filter((p) => /audit\.db/.test(p));
  assert.deepEqual(audit, [], 'nothing was started before the refusal (no audit database)');
  assert.equal(dialled, 0, 'the registry was never dialled');
}

const base = () => ['--remote', remote, '--environment-id', 'env-1'];
/** Registration at `url` over the direct link (the fake registry of test/helpers/registry.ts speaks it). */
const directAt = (url: string, env = 'env-1') => [
  '--remote',
  url,
  '--environment-id',
  env,
  '--remote-transport',
  'direct',
];

describe('exec-server: OpenAI-account credentials checked and used as codex 0.171 checks and uses them', () => {
  test('--chatgpt-token-stdin: the account policy loaded from chatgpt_base_url, then the registry asked with the token and the account (as codex 0.171)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'corral-chatgpt-standin-'));
    const certs = makeOriginCerts(dir);
    const seen: { method: string; url: string; headers: Record<string, unknown> }[] = [];
    let policyStatus = 200;
    let policyBody = '{}';
    // One HTTPS stand-in for both OpenAI services the flag talks to: the account policy and the registry (which
    // refuses the registration, so the command ends with the registry's error after asking it once).
    const standin = https.createServer(
      { key: readFileSync(certs.keyPath), cert: readFileSync(certs.certPath) },
      (req, res) => {
        seen.push({ method: req.method!, url: req.url!, headers: { ...req.headers } });
        req.resume();
        if (req.url!.startsWith('/backend-api/')) {
          res.writeHead(policyStatus, { 'content-type': 'application/json' });
          res.end(policyBody);
        } else {
          res.writeHead(401, { 'content-type': 'application/json' });
          res.end('{"error":{"code":"unauthorized","message":"stand-in"}}');
        }
      },
    );
    await new Promise<void>((r) => standin.listen(0, '127.0.0.1', r));
    const port = (standin.address() as net.AddressInfo).port;
    const env = { NODE_EXTRA_CA_CERTS: certs.caPath };
    const args = (base: string) => [
      '-c',
      `chatgpt_base_url=${base}`,
      '--remote',
      `https://127.0.0.1:${port}/reg`,
      '--environment-id',
      'env-1',
      '--chatgpt-token-stdin',
    ];
    try {
      const r = await corral(
        [...args(`https://127.0.0.1:${port}/backend-api/`), '--remote-transport', 'direct'],
        {
          stdin: `${TOKEN}\n`,
          env,
        },
      );
      assert.deepEqual(
        seen.map((q) => `${q.method} ${q.url}`),
        ['GET /backend-api/wham/config/bundle', 'POST /reg/cloud/environment/env-1/direct/register'].slice(
          0,
          seen.length,
        ),
        'the policy first, then the registry',
      );
      assert.ok(seen.length >= 2, `the registry was asked after the policy (stderr: ${r.stderr})`);
      for (const q of seen) {
        assert.equal(q.headers.authorization, `Bearer ${TOKEN}`);
        assert.equal(q.headers['chatgpt-account-id'], ACCOUNT);
      }
      assert.equal(r.code, 1, r.stderr);
      assert.match(r.stderr, /environment registry authentication failed \(HTTP 401\)/);
      for (const [path, bytes] of r.files)
        assert.ok(!bytes.includes(SECRET_SIG), `the token was written to ${path}`);
      assert.ok(!r.stderr.includes(SECRET_SIG) && !r.stdout.includes(SECRET_SIG), 'the token is not echoed');
      // Over Noise (the default, as codex 0.171's: no transport named): the same two requests codex 0.171 makes
      // (test/fixtures/remote/codex-0.171.0-chatgpt.json), with the same headers.
      seen.length = 0;
      const noise = await corral(args(`https://127.0.0.1:${port}/backend-api/`), {
        stdin: `${TOKEN}\n`,
        env,
      });
      assert.equal(noise.code, 1, noise.stderr);
      assert.deepEqual(
        seen.map(
          (q) =>
            `${q.method} ${q.url} ${q.headers.authorization === `Bearer ${TOKEN}`} ${q.headers['chatgpt-account-id']}`,
        ),
        [
          `GET /backend-api/wham/config/bundle true ${ACCOUNT}`,
          `POST /reg/cloud/environment/env-1/register true ${ACCOUNT}`,
        ],
      );

      // The policy service refusing (HTTP 500) or answering what is not a JSON object: Codex's text, exit 1, and
      // the registry never asked.
      for (const [status, body] of [
        [500, '{}'],
        [200, 'not json'],
        [200, '[]'],
      ] as const) {
        seen.length = 0;
        policyStatus = status;
        policyBody = body;
        const bad = await corral(args(`https://127.0.0.1:${port}/backend-api`), { stdin: `${TOKEN}\n`, env });
        assertRefused(bad, 1, /^Error: could not load ChatGPT account policy$/m, [TOKEN]);
        assert.deepEqual(
          seen.map((q) => q.url),
          ['/backend-api/wham/config/bundle'],
        );
      }
      // A policy URL that is not HTTPS (or has userinfo): Codex's text, nothing asked.
      seen.length = 0;
      for (const base of [`http://127.0.0.1:${port}/backend-api/`, `https://u:p@127.0.0.1:${port}/`]) {
        const plain = await corral(args(base), { stdin: `${TOKEN}\n`, env });
        assertRefused(
          plain,
          1,
          /^Error: ChatGPT policy endpoint URLs must use HTTPS without userinfo or fragments$/m,
          [TOKEN],
        );
      }
      assert.equal(seen.length, 0);
    } finally {
      standin.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("--chatgpt-token-stdin: Codex's checks of the URL, the token and the account, in its words", async () => {
    const cases: [string[], string, string][] = [
      [
        ['--remote', `http://127.0.0.1:${new URL(remote).port}`, '--environment-id', 'env-1'],
        `${TOKEN}\n`,
        'ChatGPT token registry URLs must use HTTPS without userinfo or fragments',
      ],
      [
        [...base(), '--chatgpt-account-id', 'acct_other'],
        `${TOKEN}\n`,
        '--chatgpt-account-id does not match the token',
      ],
      [base(), `${GARBAGE}\n`, 'invalid ChatGPT access token'],
      [base(), `${jwt({ sub: 'x' })}\n`, 'token has no ChatGPT account ID; supply --chatgpt-account-id'],
      [
        [...base(), '--chatgpt-account-id', `bad id ${SECRET_SIG}`],
        `${jwt({})}\n`,
        'invalid ChatGPT account ID',
      ],
    ];
    for (const [args, stdin, text] of cases) {
      const r = await corral([...args, '--chatgpt-token-stdin'], { stdin });
      assertRefused(r, 1, new RegExp(`^Error: ${text.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&')}$`, 'm'), [
        stdin.trim(),
      ]);
    }
  });

  test("--chatgpt-token-stdin: stdin closed before a newline, a line past 16 KiB, a file: Codex's texts (exit 1)", async () => {
    const bounded = /^Error: expected a bounded, newline-terminated ChatGPT access token$/m;
    const closed = await corral([...base(), '--chatgpt-token-stdin'], { stdin: SECRET_SIG, close: true });
    assertRefused(closed, 1, bounded, []);
    const huge = `${SECRET_SIG}${'x'.repeat(200_000)}`;
    const long = await corral([...base(), '--chatgpt-token-stdin'], { stdin: huge });
    assertRefused(long, 1, bounded, []);
    const dir = mkdtempSync(join(tmpdir(), 'corral-token-file-'));
    try {
      writeFileSync(join(dir, 'token'), `${TOKEN}\n`);
      const file = await corral([...base(), '--chatgpt-token-stdin'], { stdinFile: join(dir, 'token') });
      assertRefused(file, 1, /^Error: ChatGPT token stdin must be a pipe or socket$/m, [TOKEN]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('--chatgpt-account-id without --chatgpt-token-stdin: the argument error (exit 2)', async () => {
    const r = await corral([...base(), '--chatgpt-account-id', ACCOUNT]);
    assertRefused(
      r,
      2,
      /^error: the following required arguments were not provided:\n {2}--chatgpt-token-stdin$/m,
      [],
    );
  });

  test('--use-agent-identity-auth: CODEX_ACCESS_TOKEN required, then refused in codex 0.171’s words, saying why', async () => {
    const none = await corral([...base(), '--use-agent-identity-auth']);
    assertRefused(
      none,
      1,
      /^Error: CODEX_ACCESS_TOKEN is required when --use-agent-identity-auth is set$/m,
      [],
    );
    const r = await corral([...base(), '--use-agent-identity-auth'], {
      env: { CODEX_ACCESS_TOKEN: IDENTITY },
    });
    assertRefused(r, 1, /^Error: Agent Identity authentication is unavailable$/m, [IDENTITY]);
    assert.match(
      r.stderr,
      /^corral: --use-agent-identity-auth: agent identity needs OpenAI’s identity service/m,
    );
    const sig = await corral([...base(), '--use-agent-identity-auth', '--aws-sigv4']);
    assertRefused(sig, 2, /the argument '--use-agent-identity-auth' cannot be used with '--aws-sigv4'/, []);
  });

  // Every frame check in process: integration/remote-executor-credential and hostile/executor-credential-frames.
  test("--executor-credential-stdin: a bad first frame is Codex's error (exit 1), before anything starts", async () => {
    const inAnHour = Math.floor(Date.now() / 1000) + 3600;
    const f = (o: Record<string, unknown>) =>
      `${JSON.stringify({ version: 1, environment_id: 'env-1', token: SECRET_SIG, expires_at: inAnHour, ...o })}\n`;
    for (const [stdin, text, close] of [
      [`${SECRET_SIG}\n`, CREDENTIAL_TEXT.invalid, false],
      [f({ environment_id: 'env-2' }), CREDENTIAL_TEXT.otherEnvironment, false],
      [`${SECRET_SIG}${'x'.repeat(20_000)}`, CREDENTIAL_TEXT.tooLarge, false],
      ['', CREDENTIAL_TEXT.pipeClosed, true],
      [f({}).trim(), CREDENTIAL_TEXT.invalid, true],
    ] as const) {
      const r = await corral([...base(), '--executor-credential-stdin'], { stdin, close });
      assertRefused(r, 1, new RegExp(`^Error: ${text}$`, 'm'), []);
    }
    for (const [other, text] of [
      ['--aws-sigv4', "the argument '--executor-credential-stdin' cannot be used with '--aws-sigv4'"],
      [
        '--registration-bearer-stdin',
        "the argument '--registration-bearer-stdin' cannot be used with '--executor-credential-stdin'",
      ],
    ] as const) {
      const c = await corral([...base(), '--executor-credential-stdin', other], { stdin: `${SECRET_SIG}\n` });
      assertRefused(c, 2, new RegExp(text.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&')), []);
    }
  });

  test('--executor-credential-stdin: registers with the token, rotates, exits 0 when the pipe closes; the tokens in no file or output', async () => {
    const tokens = [`${SECRET_SIG}-one`, `${SECRET_SIG}-two`];
    const accepted = new Set(tokens);
    const frame = (token: string) =>
      `${JSON.stringify({ version: 1, environment_id: 'env-1', token, expires_at: Math.floor(Date.now() / 1000) + 3600 })}\n`;
    for (const command of [[], ['forward', '--connect', 'ws://127.0.0.1:9/']]) {
      const registry = await startFakeRegistry({ executorAuth: { kind: 'bearers', tokens: accepted } });
      try {
        const r = await corral([...command, ...directAt(registry.url), '--executor-credential-stdin'], {
          feed: async (stdin) => {
            stdin.write(frame(tokens[0]!));
            await registry.waitForRequests('register', 1, 30_000);
            stdin.write(frame(tokens[1]!));
            // The next registration (the registry forgot this one) carries the newest token.
            registry.expireRegistrations();
            registry.dropLinks();
            await registry.waitForRequests('register', 2, 30_000);
            stdin.end();
          },
        });
        assert.equal(r.code, 0, `exit code (stderr: ${r.stderr})`);
        const auth = registry.requests
          .filter((x) => x.kind === 'register')
          .map((x) => x.headers.authorization);
        assert.deepEqual(
          auth.slice(0, 2),
          tokens.map((t) => `Bearer ${t}`),
        );
        for (const t of [...tokens, SECRET_SIG]) {
          assert.ok(!r.stdout.includes(t) && !r.stderr.includes(t), 'a token was printed');
          for (const [path, bytes] of r.files)
            assert.ok(!bytes.includes(t), `a token was written to ${path}`);
        }
      } finally {
        await registry.close();
      }
    }
  });

  test('CODEX_API_KEY: the registry bearer when no other credential is given (as codex 0.171), only where Codex allows it', async () => {
    const key = `sk-${SECRET_SIG}`;
    const registry = await startFakeRegistry({ executorAuth: { kind: 'bearer', token: key } });
    try {
      const r = await corral([...directAt(registry.url), '--exit-on-stdin-close'], {
        env: { CODEX_API_KEY: key },
        feed: async (stdin) => {
          await registry.waitForRequests('register', 1, 30_000);
          stdin.end();
        },
      });
      assert.equal(r.code, 0, `exit code (stderr: ${r.stderr})`);
      const register = registry.requests.find((x) => x.kind === 'register')!;
      assert.equal(register.headers.authorization, `Bearer ${key}`);
      assert.ok(!r.stdout.includes(SECRET_SIG) && !r.stderr.includes(SECRET_SIG), 'the key was printed');
      for (const [path, bytes] of r.files)
        assert.ok(!bytes.includes(SECRET_SIG), `the key was written to ${path}`);
    } finally {
      await registry.close();
    }
    // A stdin bearer wins over the variable (as in codex 0.171). Its registry accepts that bearer: one that refused it
    // raced the stdin close (a 401 read first is exit 1).
    const stdinRegistry = await startFakeRegistry({
      executorAuth: { kind: 'bearer', token: 'bearer-from-stdin' },
    });
    try {
      const stdinBearer = await corral(
        [...directAt(stdinRegistry.url, 'env-2'), '--registration-bearer-stdin', '--exit-on-stdin-close'],
        {
          env: { CODEX_API_KEY: key },
          feed: async (stdin) => {
            stdin.write('bearer-from-stdin\n');
            await stdinRegistry.waitForRequests('register', 1, 30_000);
            stdin.end();
          },
        },
      );
      assert.equal(stdinBearer.code, 0, `exit code (stderr: ${stdinBearer.stderr})`);
      const register = stdinRegistry.requests.find((x) => x.kind === 'register')!;
      assert.equal(register.headers.authorization, 'Bearer bearer-from-stdin');
    } finally {
      await stdinRegistry.close();
    }
    // Codex's host rule (a pure check: no address is dialled).
    for (const ok of [
      'http://127.0.0.1:9/',
      'https://localhost/',
      'https://[::1]/',
      'https://openai.com/',
      'https://x.openai.org/r',
    ])
      assert.equal(apiKeyRegistryProblem(ok, isLoopback), null, ok);
    for (const bad of [
      'http://openai.com/',
      'https://openai.com.example.test/',
      'https://notopenai.com/',
      'bad',
    ])
      assert.equal(apiKeyRegistryProblem(bad, isLoopback), API_KEY_REGISTRY_PROBLEM, bad);
  });

  test('--aws-region and --aws-service reach the SigV4 scope; without --aws-sigv4 or a region: Codex’s texts', async () => {
    const aws = { ...FAKE_AWS, region: 'eu-west-3', service: 'svc-corral' };
    const registry = await startFakeRegistry({ executorAuth: { kind: 'sigv4', ...aws } });
    const env = { AWS_ACCESS_KEY_ID: aws.accessKeyId, AWS_SECRET_ACCESS_KEY: aws.secretAccessKey };
    try {
      const args = [...directAt(registry.url), '--aws-sigv4'];
      const r = await corral(
        [...args, '--aws-region', aws.region, '--aws-service', aws.service, '--exit-on-stdin-close'],
        {
          env,
          feed: async (stdin) => {
            await registry.waitForRequests('executor-handshake', 1, 30_000);
            stdin.end();
          },
        },
      );
      assert.equal(r.code, 0, r.stderr);
      const register = registry.requests.find((x) => x.kind === 'register')!;
      assert.equal(register.status, 200, 'the registry verified the signature');
      assert.match(String(register.headers.authorization), /\/eu-west-3\/svc-corral\/aws4_request/);
      assert.ok(!r.stderr.includes(aws.secretAccessKey));
      const noSigv4 = await corral([...base(), '--aws-service', 'x']);
      assertRefused(
        noSigv4,
        2,
        /^error: the following required arguments were not provided:\n {2}--aws-sigv4$/m,
        [],
      );
      const noRegion = await corral([...args], { env });
      assert.equal(noRegion.code, 1, noRegion.stderr);
      assert.match(noRegion.stderr, /^Error: AWS SDK config did not resolve a region$/m);
    } finally {
      await registry.close();
    }
  });

  test('forward: a bad executor credential frame and --use-agent-identity-auth refused the same way', async () => {
    const fwd = [
      'forward',
      '--remote',
      remote,
      '--environment-id',
      'env-1',
      '--connect',
      'ws://127.0.0.1:9/',
    ];
    const r = await corral([...fwd, '--executor-credential-stdin'], { stdin: `${SECRET_SIG}\n` });
    assertRefused(r, 1, new RegExp(`^Error: ${CREDENTIAL_TEXT.invalid}$`, 'm'), []);
    const id = await corral([...fwd, '--use-agent-identity-auth'], { env: { CODEX_ACCESS_TOKEN: IDENTITY } });
    assertRefused(id, 1, /^Error: Agent Identity authentication is unavailable$/m, [IDENTITY]);
  });

  test('without --remote: each is a usage error (exit 2) naming --remote', async () => {
    for (const flag of [
      '--chatgpt-token-stdin',
      '--use-agent-identity-auth',
      '--executor-credential-stdin',
    ]) {
      const r = await corral(['--listen', 'ws://127.0.0.1:0', flag], { stdin: `${SECRET_SIG}\n` });
      assertRefused(r, 2, /--use-agent-identity-auth and --executor-credential-stdin require --remote/, []);
    }
  });
});
