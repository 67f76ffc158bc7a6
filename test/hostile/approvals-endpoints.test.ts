// Endpoint granularity (issue 36, item 7) under attack: the one path normalisation fed deep, wide, huge and malformed
// paths; project rules with a path prefix through a real proxy and curl (--path-as-is): `/api` holds `/api/x`, never
// `/apix`, and no spelling (`..`, `%2e%2e`, an encoded slash, a backslash, double encoding; the battery in
// helpers/approvalsRun.ts, which approvals-https-paths tries inside TLS) passes an allow's prefix
// or escapes a deny's; a repository file's pathPrefix narrows the same way; the new methods' params refused naming
// the field. On the code before (no path in rules), the `/api` allow let `/apix` and `/api/../admin` through.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { CliError, parseApprovalsArgs } from '../../src/cli/approvals.js';
import type { ApprovalPrompt, RulesResult } from '../../src/protocol/approvals.js';
import {
  firstSegment,
  MAX_REQUEST_PATH,
  normalizePathPrefix,
  normalizeRequestPath,
  pathWithin,
} from '../../src/server/approvals/endpointPath.js';
import { approvalsRig, askingStart } from '../helpers/approvalsCli.js';
import { ADMIN_SPELLINGS, API_SPELLINGS, runDenyingPrompts } from '../helpers/approvalsRun.js';
import type { RpcClient } from '../helpers/client.js';
import { until } from '../helpers/server.js';

const skip = existsSync('/usr/bin/curl') ? false : 'curl is not installed';

describe('endpoint paths: one normalisation', () => {
  test('dot segments, empty segments and percent-escapes of ordinary characters are resolved', () => {
    for (const [raw, want] of [
      ['/', '/'],
      ['/api', '/api'],
      ['/api/', '/api'],
      ['/api/x?q=/../admin', '/api/x'],
      ['//api//x', '/api/x'],
      ['/./api/./x', '/api/x'],
      ['/api/../admin', '/admin'],
      ['/api/%2e%2e/admin', '/admin'],
      ['/api/%2E./admin', '/admin'],
      ['/%61pi/x', '/api/x'],
      ['/caf%C3%A9', '/café'],
    ] as const)
      assert.equal(normalizeRequestPath(raw), want, raw);
  });

  test('what servers read differently is not read at all', () => {
    for (const raw of [
      '',
      'api/x',
      '*',
      'http://a.test/x',
      '/..',
      '/a/../..',
      '/%2e%2e',
      '/api%2Fx',
      '/api%2fx',
      '/api%5Cx',
      '/api\\..\\admin',
      '/api/%252e%252e/admin',
      '/api/%25',
      '/api%3Fx',
      '/api%23x',
      '/api/%',
      '/api/%zz',
      '/api/%C3',
      '/api/%00',
      '/api/\u0000',
      '/api/\u007f',
      '/api/..;/admin',
      '/api/.;x',
      `/${'a'.repeat(MAX_REQUEST_PATH)}`,
    ])
      assert.equal(normalizeRequestPath(raw), null, JSON.stringify(raw).slice(0, 60));
    assert.equal(normalizeRequestPath(null), null);
    assert.equal(normalizeRequestPath(undefined), null);
    assert.equal(normalizeRequestPath(42 as unknown as string), null);
  });

  test('deep and wide paths are read in linear time, within the bound', () => {
    const deep = '/a'.repeat(4000);
    assert.equal(normalizeRequestPath(deep), deep);
    const dots = `${'/a'.repeat(1000)}${'/..'.repeat(1000)}/x`;
    assert.equal(normalizeRequestPath(dots), '/x');
    const wide = `/${'%41'.repeat(2700)}`;
    assert.equal(normalizeRequestPath(wide), `/${'A'.repeat(2700)}`);
    const slashes = '/'.repeat(MAX_REQUEST_PATH);
    assert.equal(normalizeRequestPath(slashes), '/');
    const started = process.hrtime.bigint();
    for (let i = 0; i < 200; i++) normalizeRequestPath(`/${'x/'.repeat(4000)}`);
    assert.ok(process.hrtime.bigint() - started < 5_000_000_000n, 'no blow-up');
  });

  test('prefixes hold paths on segment boundaries only', () => {
    assert.ok(pathWithin('/api', '/api'));
    assert.ok(pathWithin('/api/x', '/api'));
    assert.ok(!pathWithin('/apix', '/api'));
    assert.ok(!pathWithin('/ap', '/api'));
    assert.ok(pathWithin('/anything', '/'));
    assert.equal(firstSegment('/api/v1/x'), '/api');
    assert.equal(firstSegment('/'), '/');
    assert.equal(normalizePathPrefix('/api?x'), null);
    assert.equal(normalizePathPrefix('/api#x'), null);
    assert.equal(normalizePathPrefix(`/${'a'.repeat(2000)}`), null);
  });
});

describe('endpoint rules through the proxy', { skip }, () => {
  const rig = approvalsRig('corral-approvals-endpoints-');
  const { open, pendingOf } = rig;
  const work = join(rig.tmp.path, 'project');
  const repo = join(rig.tmp.path, 'narrowed');
  before(() => {
    for (const w of [work, repo]) mkdirSync(join(w, '.git'), { recursive: true });
  });

  const curl = (label: string, path: string) =>
    `curl --noproxy '' --path-as-is -s -o /dev/null -w '${label}=%{http_code}\\n' 'http://127.0.0.1:${rig.origin.port}${path}'`;

  /** Runs `requests` one after another in `cwd`, answering each prompt denyOnce; the status per label, the prompts. */
  async function run(
    agent: RpcClient,
    panel: RpcClient,
    id: string,
    requests: [string, string][],
    cwd: string,
  ): Promise<{ codes: Map<string, string>; prompts: ApprovalPrompt[] }> {
    return runDenyingPrompts(agent, panel, pendingOf, id, () =>
      askingStart(agent, id, requests.map(([l, p]) => curl(l, p)).join('; '), cwd),
    );
  }

  test('an allow for /api holds /api and below it, never /apix nor a spelling that leaves it', async () => {
    const agent = await open(rig.host.tokens.agent, 'paths-agent');
    const panel = await open(rig.host.tokens.panel, 'paths-panel');
    // The rule: from a prompt for /api/v1/x, answered for the project with the prefix /api.
    await askingStart(agent, 'make', curl('make', '/api/v1/x?token=1'), work);
    await until(async () => (await pendingOf(panel, 'make')).length === 1, 30_000, 'the prompt');
    const [p] = await pendingOf(panel, 'make');
    assert.equal(p!.path, '/api/v1/x', 'the prompt shows the normalised path, no query');
    const err = async (params: unknown) =>
      (await panel.request('approvals/decide', params).then(
        () => ({ code: 0, message: 'answered' }),
        (x) => x,
      )) as { code: number; message: string };
    for (const [prefix, why] of [
      ['/apix', /does not hold the request's path/],
      ['/api/v2', /does not hold/],
      ['/api/../other', /does not hold/],
      ['/api%2F', /not a plain path/],
      ['/api?x=1', /not a plain path/],
      ['api', /not a plain path/],
    ] as const) {
      const e = await err({ id: p!.id, decision: 'allowProject', pathPrefix: prefix });
      assert.equal(e.code, -32600, prefix);
      assert.match(e.message, /pathPrefix/);
      assert.match(e.message, why);
    }
    for (const bad of [{ pathPrefix: 'x'.repeat(5000) }, { pathPrefix: 42 }, { pathPrefix: '' }]) {
      const e = await err({ id: p!.id, decision: 'allowProject', ...bad });
      assert.equal(e.code, -32602);
      assert.match(e.message, /pathPrefix/);
    }
    const e = await err({ id: p!.id, decision: 'allowSession', pathPrefix: '/api' });
    assert.match(e.message, /pathPrefix: only a project answer/);
    await panel.request('approvals/decide', { id: p!.id, decision: 'allowProject', pathPrefix: '/api/' });
    await agent.collect('make', 30_000);
    assert.match(agent.output('make', 'stdout'), /make=200/);
    const [rule] = (await panel.request<RulesResult>('approvals/rules', { workspace: work })).rules;
    assert.equal(rule!.pathPrefix, '/api');

    const { codes, prompts } = await run(
      agent,
      panel,
      'variants',
      [...API_SPELLINGS.within, ...API_SPELLINGS.outside],
      work,
    );
    for (const [ok] of API_SPELLINGS.within) assert.equal(codes.get(ok), '200', `${ok} is within /api`);
    for (const [no] of API_SPELLINGS.outside)
      assert.notEqual(codes.get(no) ?? 'missing', '200', `${no} must not pass the /api allow`);
    const paths = prompts.map((x) => x.path ?? null);
    assert.ok(paths.includes('/apix'));
    assert.ok(paths.includes('/admin'), 'the dot-dot spellings are asked about as /admin');
    assert.ok(paths.includes(null), 'an unreadable path is asked about as such');
    // A project answer on an unreadable path is refused (it would say nothing about what it covers).
    await askingStart(agent, 'unreadable', curl('unreadable', '/api%2Fx'), work);
    await until(async () => (await pendingOf(panel, 'unreadable')).length === 1, 30_000, 'the prompt');
    const [u] = await pendingOf(panel, 'unreadable');
    assert.equal(u!.path, null);
    assert.match(
      (await err({ id: u!.id, decision: 'allowProject' })).message,
      /path could not be read safely/,
    );
    await panel.request('approvals/decide', { id: u!.id, decision: 'denyOnce' });
    await agent.collect('unreadable', 30_000);
    await panel.request('approvals/revoke', { id: rule!.id });
  });

  test('a deny for /admin covers every spelling of it, and every unreadable path; /adminx is asked', async () => {
    const agent = await open(rig.host.tokens.agent, 'deny-agent');
    const panel = await open(rig.host.tokens.panel, 'deny-panel');
    await askingStart(agent, 'mk', curl('mk', '/admin/panel'), work);
    await until(async () => (await pendingOf(panel, 'mk')).length === 1, 30_000, 'the prompt');
    const [p] = await pendingOf(panel, 'mk');
    await panel.request('approvals/decide', { id: p!.id, decision: 'denyProject' });
    await agent.collect('mk', 30_000);
    const [rule] = (await panel.request<RulesResult>('approvals/rules', { workspace: work })).rules;
    assert.equal(rule!.pathPrefix, '/admin', 'the first segment by default');
    const { codes, prompts } = await run(
      agent,
      panel,
      'deny-variants',
      [...ADMIN_SPELLINGS.denied, ADMIN_SPELLINGS.neighbour],
      work,
    );
    for (const [k] of ADMIN_SPELLINGS.denied) assert.equal(codes.get(k), '403', `${k} is denied by the rule`);
    assert.deepEqual(
      prompts.map((x) => x.path),
      ['/adminx'],
      'only /adminx was asked',
    );
    await panel.request('approvals/revoke', { id: rule!.id });
  });

  test("a repository file's pathPrefix narrows plain HTTP to it (an invalid one drops its entry)", async () => {
    mkdirSync(join(repo, '.corral'), { recursive: true });
    writeFileSync(
      join(repo, '.corral', 'network.json'),
      JSON.stringify({
        endpoints: [
          { host: '127.0.0.1', pathPrefix: '/api' },
          { host: '127.0.0.1', pathPrefix: '/a/../../etc' },
          { host: '127.0.0.1', pathPrefix: '/x%2Fy' },
        ],
      }),
    );
    const agent = await open(rig.host.tokens.agent, 'repo-agent');
    const panel = await open(rig.host.tokens.panel, 'repo-panel');
    const state = await panel.request<{ endpoints: number; ignored: string[] }>('approvals/repoPolicy', {
      workspace: repo,
    });
    assert.equal(state.endpoints, 1);
    assert.equal(state.ignored.filter((s) => /pathPrefix .* is not a plain path/.test(s)).length, 2);
    const { codes, prompts } = await run(
      agent,
      panel,
      'repo-variants',
      [
        ['inside', '/api/x'],
        ['apix', '/apix'],
        ['up', '/api/../admin'],
        ['encslash', '/api%2F..%2Fadmin'],
      ],
      repo,
    );
    assert.deepEqual(
      prompts.map((x) => x.path),
      ['/api/x'],
      'only the declared path reaches a prompt; the rest is blocked by the repository file',
    );
    for (const k of ['inside', 'apix', 'up', 'encslash']) assert.equal(codes.get(k), '403', k);
    assert.equal(realpathSync(repo), prompts[0]!.workspace);
  });
});

describe('the new methods and subcommands refuse bad input, naming it', { skip, timeout: 120_000 }, () => {
  const rig = approvalsRig('corral-approvals-new-methods-');
  const work = join(rig.tmp.path, 'ws');
  before(() => mkdirSync(join(work, '.git'), { recursive: true }));

  test('approvals/waitForExit and approvals/repoAccept: malformed, unknown, stale, and not for an agent', async () => {
    const panel = await rig.open(rig.host.tokens.panel, 'bad-panel');
    const agent = await rig.open(rig.host.tokens.agent, 'bad-agent');
    const err = async (c: RpcClient, method: string, params: unknown) =>
      (await c.request(method, params).then(
        () => ({ code: 0, message: 'answered' }),
        (x) => x,
      )) as { code: number; message: string };
    const deep = { deep: [[[[{ a: [[[]]] }]]]] };
    for (const [method, params, code, field] of [
      ['approvals/waitForExit', {}, -32602, /id/],
      ['approvals/waitForExit', { id: '' }, -32602, /id/],
      ['approvals/waitForExit', { id: 'x'.repeat(100_000) }, -32602, /id/],
      ['approvals/waitForExit', { id: deep }, -32602, /id/],
      ['approvals/waitForExit', { id: 'no-such-prompt' }, -32600, /unknown or already resolved/],
      ['approvals/repoAccept', { workspace: work }, -32602, /sha256/],
      ['approvals/repoAccept', { workspace: work, sha256: 'ABC' }, -32602, /sha256/],
      ['approvals/repoAccept', { workspace: work, sha256: 'f'.repeat(65) }, -32602, /sha256/],
      ['approvals/repoAccept', { workspace: 'relative', sha256: 'a'.repeat(64) }, -32600, /workspace/],
      [
        'approvals/repoAccept',
        { workspace: `/${'a'.repeat(5000)}`, sha256: 'a'.repeat(64) },
        -32602,
        /workspace/,
      ],
      ['approvals/repoAccept', { workspace: work, sha256: 'a'.repeat(64) }, -32600, /no readable/],
    ] as [string, unknown, number, RegExp][]) {
      const e = await err(panel, method, params);
      assert.equal(e.code, code, `${method} ${JSON.stringify(params).slice(0, 80)}`);
      assert.match(e.message, field);
    }
    mkdirSync(join(work, '.corral'), { recursive: true });
    writeFileSync(join(work, '.corral', 'network.json'), '{"endpoints":[]}');
    const state = await panel.request<{ sha256: string }>('approvals/repoPolicy', { workspace: work });
    assert.equal(
      (await err(agent, 'approvals/repoAccept', { workspace: work, sha256: state.sha256 })).code,
      -32600,
    );
    assert.equal((await err(agent, 'approvals/waitForExit', { id: 'x' })).code, -32600);
    assert.match(
      (await err(panel, 'approvals/repoAccept', { workspace: work, sha256: 'b'.repeat(64) })).message,
      /sha256: b+ is not the file's hash now/,
    );
  });

  test('the CLI: malformed repo, accept-repo, wait and --path-prefix: exit 2 naming what is wrong', () => {
    for (const [argv, why] of [
      [['repo'], /DIR \(one workspace directory\) is required/],
      [['repo', 'relative'], /DIR must be an absolute path/],
      [['repo', '/a', '/b'], /DIR \(one workspace directory\) is required/],
      [['repo', `/${'a'.repeat(5000)}`], /DIR must be an absolute path/],
      [['repo', '/a\u001b[2J'], /DIR must be an absolute path/],
      [['repo', '/a', '--sha256', 'a'.repeat(64)], /--sha256 is for accept-repo/],
      [['accept-repo', '/a', '--sha256', 'XYZ'], /expected a lower-case hex sha256/],
      [['accept-repo', '/a', '--scope', 'project'], /--scope is not for accept-repo/],
      [['accept-repo', '/a', '--json'], /--json is for list, rules and repo/],
      [['wait'], /ID is required/],
      [['wait', 'a b'], /is not an approval or rule id/],
      [['allow', 'abc', '--path-prefix', '/x'], /--path-prefix is for allow and deny with --scope project/],
      [['allow', 'abc', '--scope', 'project', '--path-prefix', 'x'], /--path-prefix must start with/],
      [['allow', 'abc', '--sha256', 'a'.repeat(64)], /--sha256 is for accept-repo/],
    ] as [string[], RegExp][]) {
      assert.throws(
        () => parseApprovalsArgs(argv),
        (e: unknown) => e instanceof CliError && e.exitCode === 2 && why.test(e.message),
        argv.join(' ').slice(0, 80),
      );
    }
  });
});
