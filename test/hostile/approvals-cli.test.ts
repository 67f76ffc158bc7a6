// Hostile input to `corral approvals` and to what it trusts (issue 36, item 4): malformed command lines (deep, wide,
// huge, control characters), unknown ids, no or the wrong credential, a planted or loosened state file, a sandboxed
// command reaching for the panel token or the rule file, a hand-edited rule file, and a process's own client trying
// to store a project rule. Each fails on cca01b7 (no `approvals` command, no project rules there).
import assert from 'node:assert/strict';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { openRuleStore } from '../../src/app/approvalRuleStore.js';
import type { Host } from '../../src/app/host.js';
import { localStatePath, readLocalStateFile } from '../../src/app/localState.js';
import { CliError, parseApprovalsArgs } from '../../src/cli/approvals.js';
import type { ApprovalsState, RulesResult } from '../../src/protocol/approvals.js';
import { silentLogger } from '../../src/server/core/log.js';
import {
  askingStart,
  closeApprovalsRig,
  curlCode,
  runApprovalsCli,
  startRulesHost,
} from '../helpers/approvalsCli.js';
import { RpcClient } from '../helpers/client.js';
import { tempDir, until } from '../helpers/server.js';
import { startOrigin } from '../integration/network-helpers.js';
import { sandboxParam } from './sandbox-harness.js';

const skip = existsSync('/usr/bin/curl') ? false : 'curl is not installed';

/** The CliError a command line throws (exit 2), or null when it parses. */
function parseError(argv: string[]): CliError | null {
  try {
    parseApprovalsArgs(argv);
    return null;
  } catch (e) {
    assert.ok(e instanceof CliError, `not a CliError: ${(e as Error).message}`);
    return e;
  }
}

describe('corral approvals: hostile input', { skip }, () => {
  const tmp = tempDir('corral-approvals-hostile-');
  const stateHome = join(tmp.path, 'state');
  const rulesFile = join(tmp.path, 'rules', 'approval-rules.db');
  const statePath = localStatePath({ XDG_STATE_HOME: stateHome });
  const offMachine: string[] = [];
  let host: Host;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  const clients: RpcClient[] = [];
  const open = async (token: string, name: string, extra: Record<string, unknown> = {}) => {
    const c = await RpcClient.open(`${host.listener.url}/?token=${encodeURIComponent(token)}`, name, extra);
    clients.push(c);
    return c;
  };

  before(async () => {
    origin = await startOrigin();
    host = await startRulesHost(stateHome, rulesFile, offMachine);
  });
  after(() => closeApprovalsRig({ clients, host, origin, tmp, offMachine }));

  test('malformed command lines: exit 2 naming what is wrong (deep, wide, huge, control characters)', async () => {
    const cases: [string[], RegExp][] = [
      [[], /a subcommand is required/],
      [['frobnicate'], /unknown subcommand "frobnicate"/],
      [['allow'], /allow: ID is required/],
      [['revoke'], /revoke: RULE is required/],
      [['allow', 'a', 'b'], /unexpected argument "b"/],
      [['list', 'x'], /unexpected argument "x"/],
      [
        ['allow', 'abc', '--scope', 'forever'],
        /--scope "forever": expected once, process, session or project/,
      ],
      [['allow', 'abc', '--scope', '*'], /--scope "\*"/],
      [['list', '--scope', 'project'], /--scope is for allow and deny/],
      [['allow', 'abc', '--json'], /--json is for list and rules/],
      [['list', '--bogus'], /Unknown option '--bogus'/],
      [['allow', '\u001b]0;owned\u0007'], /is not an approval or rule id/],
      [['allow', 'a b'], /is not an approval or rule id/],
      [['allow', '-'], /is not an approval or rule id/],
      [['allow', 'x'.repeat(100_000)], /is not an approval or rule id/],
      [['deny', '../../etc/passwd\n'], /is not an approval or rule id/],
      [['rules', '--workspace', 'relative/dir'], /--workspace must be an absolute path/],
      [['rules', '--workspace', `/${'a/'.repeat(5000)}`], /--workspace must be an absolute path/],
      [['list', ...Array.from({ length: 10_000 }, () => '--json')], /./],
    ];
    for (const [argv, message] of cases) {
      const e = parseError(argv);
      if (argv.length === 10_001) {
        assert.equal(e, null, 'a repeated boolean flag is still one flag');
        continue;
      }
      assert.ok(e, `${JSON.stringify(argv).slice(0, 80)} must be refused`);
      assert.equal(e.exitCode, 2);
      assert.match(e.message, message);
      assert.ok(e.message.length < 4000, 'the message stays bounded whatever was typed');
    }
    // The real command: exit 2, the message on stderr with controls escaped, nothing on stdout.
    const r = await runApprovalsCli(['allow', 'x\u001b[2J', '--scope', 'never'], stateHome);
    assert.equal(r.code, 2);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, /not an approval or rule id/);
    assert.ok(!r.stderr.includes('\u001b'), 'no raw escape reaches the terminal');
    // Asked for, the usage goes to stdout with exit 0; with anything else beside it, --help is an unknown subcommand.
    const help = await runApprovalsCli(['--help'], stateHome);
    assert.deepEqual([help.code, help.stderr], [0, '']);
    assert.match(help.stdout, /corral approvals accept-repo DIR/);
    assert.equal((await runApprovalsCli(['--help', 'list'], stateHome)).code, 2);
    for (const connect of ['not a url', 'ws://127.0.0.1:1/?token=abcdefabcdefabcdef', 'ws://127.0.0.1:1/']) {
      const c = await runApprovalsCli(['list', '--connect', connect], stateHome);
      assert.equal(c.code, 2, connect);
      assert.equal(c.stdout, '');
      assert.match(c.stderr, /--connect: /);
    }
  });

  test('unknown ids: a clear message and exit 2', async () => {
    const unknown = '00000000-0000-4000-8000-000000000000';
    const allow = await runApprovalsCli(['allow', unknown, '--scope', 'project'], stateHome);
    assert.equal(allow.code, 2, allow.stderr);
    assert.match(allow.stderr, /unknown or already resolved approval id 00000000/);
    assert.equal(allow.stdout, '');
    const revoke = await runApprovalsCli(['revoke', unknown], stateHome);
    assert.equal(revoke.code, 2);
    assert.match(revoke.stderr, /unknown rule 00000000/);
    // Nothing was stored by either.
    assert.deepEqual(JSON.parse((await runApprovalsCli(['rules', '--json'], stateHome)).stdout).rules, []);
  });

  test('without the panel credential the CLI gets nothing', async () => {
    const agentFile = join(tmp.path, 'agent-token');
    writeFileSync(agentFile, host.tokens.agent, { mode: 0o600 });
    const asAgent = await runApprovalsCli(
      ['list', '--connect', `${host.listener.url}#token-file=${agentFile}`],
      stateHome,
    );
    assert.notEqual(asAgent.code, 0);
    assert.equal(asAgent.stdout, '', 'an agent token lists nothing');
    const wrongFile = join(tmp.path, 'wrong-token');
    writeFileSync(wrongFile, 'w'.repeat(43), { mode: 0o600 });
    const wrong = await runApprovalsCli(
      ['rules', '--connect', `${host.listener.url}#token-file=${wrongFile}`],
      stateHome,
    );
    assert.equal(wrong.code, 1);
    assert.equal(wrong.stdout, '');
    assert.match(wrong.stderr, /HTTP 401/);

    // The state file: loosened, replaced by a link, or holding the agent token — refused or answered with nothing.
    const saved = readFileSync(statePath, 'utf8');
    try {
      chmodSync(statePath, 0o644);
      const loose = await runApprovalsCli(['list'], stateHome);
      assert.equal(loose.code, 1);
      assert.match(loose.stderr, /mode 644, not 600/);
      assert.equal(loose.stdout, '');
      chmodSync(statePath, 0o600);
      const elsewhere = join(tmp.path, 'elsewhere.json');
      writeFileSync(elsewhere, saved, { mode: 0o600 });
      unlinkSync(statePath);
      symlinkSync(elsewhere, statePath);
      const linked = await runApprovalsCli(['list'], stateHome);
      assert.equal(linked.code, 1);
      assert.match(linked.stderr, /symbolic link/);
      assert.equal(linked.stdout, '');
      unlinkSync(statePath);
      const forged = { ...JSON.parse(saved), token: host.tokens.agent };
      writeFileSync(statePath, JSON.stringify(forged), { mode: 0o600 });
      const agentState = await runApprovalsCli(['rules'], stateHome);
      assert.notEqual(agentState.code, 0);
      assert.equal(agentState.stdout, '');
      for (const bad of ['{', '[]', JSON.stringify({ ...JSON.parse(saved), url: 'http://127.0.0.1:1' })]) {
        writeFileSync(statePath, bad, { mode: 0o600 });
        assert.throws(() => readLocalStateFile(statePath), /state file/);
      }
      writeFileSync(statePath, 'x'.repeat(70_000), { mode: 0o600 });
      assert.throws(() => readLocalStateFile(statePath), /70000 bytes/);
    } finally {
      if (existsSync(statePath)) unlinkSync(statePath);
      writeFileSync(statePath, saved, { mode: 0o600 });
    }
  });

  test('a sandboxed command can neither read the panel token in the state file nor read or write the rule file', async () => {
    const agent = await open(host.tokens.agent, 'sandboxed');
    const work = join(tmp.path, 'work');
    mkdirSync(work, { recursive: true });
    const token = host.tokens.panel;
    await agent.request('process/start', {
      processId: 'peek',
      argv: [
        '/bin/sh',
        '-c',
        `cat '${statePath}'; echo "state=$?"; cat '${rulesFile}' > /dev/null; echo "rules=$?"; ` +
          `echo planted >> '${rulesFile}'; echo "write=$?"`,
      ],
      cwd: work,
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      arg0: null,
      sandbox: sandboxParam('seed', { cwd: work }),
    });
    await agent.collect('peek', 30_000);
    const out = agent.output('peek', 'stdout');
    assert.ok(!out.includes(token), 'the panel token never reaches the sandbox');
    assert.match(out, /state=[1-9]/);
    assert.match(out, /rules=[1-9]/);
    assert.match(out, /write=[1-9]/);
    assert.ok(!readFileSync(rulesFile).includes('planted'));
  });

  test('approvals/ruleUpdate: malformed params named, unknown ids refused; a disabled rule matches nothing, its note kept', async () => {
    const panel = await open(host.tokens.panel, 'rules-panel');
    const agent = await open(host.tokens.agent, 'rules-agent');
    const work = join(tmp.path, 'toggle');
    mkdirSync(join(work, '.git'), { recursive: true });
    const run = (processId: string) =>
      askingStart(agent, processId, curlCode(processId, `http://127.0.0.1:${origin.port}/t`), work);
    const promptOf = async (processId: string) => {
      await until(
        async () =>
          (await panel.request<ApprovalsState>('approvals/list', {})).pending.some(
            (p) => p.processId === processId,
          ),
        30_000,
        `the prompt of ${processId}`,
      );
      return (await panel.request<ApprovalsState>('approvals/list', {})).pending.find(
        (p) => p.processId === processId,
      )!;
    };
    await run('t1');
    await panel.request('approvals/decide', { id: (await promptOf('t1')).id, decision: 'allowProject' });
    await agent.collect('t1', 30_000);
    const rule = (await panel.request<RulesResult>('approvals/rules', { workspace: work })).rules[0]!;
    for (const [params, field] of [
      [{ id: rule.id, enabled: 'no' }, /enabled/],
      [{ id: rule.id, note: 'n'.repeat(1001) }, /note/],
      [{ id: rule.id, note: { deep: [[[[]]]] } }, /note/],
      [{ id: 'x'.repeat(100_000), enabled: false }, /id/],
      [{ enabled: false }, /id/],
    ] as [unknown, RegExp][]) {
      const e = (await panel.request('approvals/ruleUpdate', params).catch((x) => x)) as {
        code: number;
        message: string;
      };
      assert.equal(e.code, -32602, JSON.stringify(params).slice(0, 60));
      assert.match(e.message, field);
    }
    const unknown = (await panel
      .request('approvals/ruleUpdate', { id: 'nope', enabled: false })
      .catch((x) => x)) as {
      code: number;
      message: string;
    };
    assert.equal(unknown.code, -32600);
    assert.match(unknown.message, /unknown rule nope/);
    const agentTry = (await agent
      .request('approvals/ruleUpdate', { id: rule.id, enabled: false })
      .catch((x) => x)) as {
      code: number;
    };
    assert.equal(agentTry.code, -32600, 'an agent cannot touch a rule');
    // Disabled: the prompt is back; enabled again with a note: allowed without one, the note stored.
    const off = await panel.request<{ rule: { enabled: boolean } }>('approvals/ruleUpdate', {
      id: rule.id,
      enabled: false,
    });
    assert.equal(off.rule.enabled, false);
    await run('t2');
    await panel.request('approvals/decide', { id: (await promptOf('t2')).id, decision: 'denyOnce' });
    await agent.collect('t2', 30_000);
    assert.match(agent.output('t2', 'stdout'), /t2=403/);
    await panel.request('approvals/ruleUpdate', { id: rule.id, enabled: true, note: 'the docs mirror' });
    await run('t3');
    await agent.collect('t3', 30_000);
    assert.match(agent.output('t3', 'stdout'), /t3=200/);
    const stored = openRuleStore(rulesFile, silentLogger)
      .load()
      .find((r) => r.id === rule.id)!;
    assert.equal(stored.note, 'the docs mirror');
    assert.equal(stored.enabled, true);
    await panel.request('approvals/revoke', { id: rule.id });
  });

  test('learning mode: malformed params named; only what was seen can be accepted; it stops at its bound', async () => {
    const panel = await open(host.tokens.panel, 'learn-panel');
    const agent = await open(host.tokens.agent, 'learn-agent');
    const work = join(tmp.path, 'learn-hostile');
    mkdirSync(join(work, '.git'), { recursive: true });
    const err = async (c: RpcClient, method: string, params: unknown) =>
      (await c.request(method, params).then(
        () => ({ code: 0, message: 'answered' }),
        (x) => x,
      )) as { code: number; message: string };
    for (const [params, code, field] of [
      [{ workspace: 'relative' }, -32600, /workspace/],
      [{ workspace: join(work, 'missing') }, -32600, /workspace/],
      [{ workspace: `/${'a'.repeat(5000)}` }, -32602, /workspace/],
      [{ workspace: work, durationMs: 24 * 3600_000 }, -32602, /durationMs/],
      [{ workspace: work, maxRequests: 0 }, -32602, /maxRequests/],
      [{ workspace: work, maxRequests: 1e9 }, -32602, /maxRequests/],
      [{ workspace: { deep: [[[[]]]] } }, -32602, /workspace/],
    ] as [unknown, number, RegExp][]) {
      const e = await err(panel, 'approvals/learn', params);
      assert.equal(e.code, code, JSON.stringify(params).slice(0, 80));
      assert.match(e.message, field);
    }
    assert.equal(
      (await err(agent, 'approvals/learn', { workspace: work })).code,
      -32600,
      'an agent cannot learn',
    );
    assert.match((await err(panel, 'approvals/learnEnd', { workspace: work })).message, /is not learning/);

    await panel.request('approvals/learn', { workspace: work, maxRequests: 1 });
    const curl = (label: string) => curlCode(label, `http://127.0.0.1:${origin.port}/${label}`);
    await askingStart(agent, 'bounded', `${curl('one')}; ${curl('two')}`, work);
    // The first is learned; the second, past maxRequests, is prompted as usual.
    await until(
      async () =>
        (await panel.request<ApprovalsState>('approvals/list', {})).pending.some(
          (p) => p.processId === 'bounded',
        ),
      30_000,
      'the prompt past the bound',
    );
    const p = (await panel.request<ApprovalsState>('approvals/list', {})).pending.find(
      (x) => x.processId === 'bounded',
    )!;
    await panel.request('approvals/decide', { id: p.id, decision: 'denyOnce' });
    await agent.collect('bounded', 30_000);
    assert.match(agent.output('bounded', 'stdout'), /one=200/);
    assert.match(agent.output('bounded', 'stdout'), /two=403/);
    const seen = {
      protocol: 'http',
      host: '127.0.0.1',
      port: origin.port,
      method: 'GET',
      pathPrefix: '/one',
    };
    // Widening attempts: another port, another method, a '*' host, no method, no or a wider path prefix, a prefix
    // spelled to pass for another — all refused.
    for (const accept of [
      [{ ...seen, port: origin.port + 1 }],
      [{ ...seen, method: 'POST' }],
      [{ ...seen, host: '*' }],
      [{ ...seen, method: null }],
      [{ ...seen, pathPrefix: null }],
      [{ ...seen, pathPrefix: '/' }],
      [{ ...seen, pathPrefix: '/on' }],
      [{ ...seen, pathPrefix: '/one/../two' }],
      [{ ...seen, pathPrefix: '/one%2F..' }],
    ]) {
      const e = await err(panel, 'approvals/learnEnd', { workspace: work, accept });
      assert.equal(e.code, -32600);
      assert.match(e.message, /was not seen while learning/);
    }
    const tooMany = await err(panel, 'approvals/learnEnd', {
      workspace: work,
      accept: Array(300).fill(seen),
    });
    assert.equal(tooMany.code, -32602);
    assert.deepEqual((await panel.request<RulesResult>('approvals/rules', { workspace: work })).rules, []);
    const ok = await panel.request<{ rules: { host: string }[] }>('approvals/learnEnd', {
      workspace: work,
      accept: [seen, seen],
    });
    assert.equal(ok.rules.length, 1, 'one rule per endpoint');
    const [rule] = (await panel.request<RulesResult>('approvals/rules', { workspace: work })).rules;
    await panel.request('approvals/revoke', { id: rule!.id });
  });

  test("a process's own client cannot store a project rule; a hand-edited rule file cannot widen", async () => {
    // The agent answers its own prompt asking for a project-wide allow: not a valid answer, left to the panel.
    const agent = await open(host.tokens.agent, 'self-approver', {
      capabilities: { networkApprovals: true },
    });
    agent.onRequest = () => ({ decision: { type: 'allow', scope: 'project' } });
    const panel = await open(host.tokens.panel, 'panel');
    const work = join(tmp.path, 'self');
    mkdirSync(join(work, '.git'), { recursive: true });
    await askingStart(agent, 'self', curlCode('self', `http://127.0.0.1:${origin.port}/self`), work);
    await until(
      async () =>
        (await panel.request<ApprovalsState>('approvals/list', {})).pending.some(
          (p) => p.processId === 'self',
        ),
      30_000,
      'the prompt stays for the panel',
    );
    await until(() => agent.notifications.some((n) => n.method === 'network/policyRequest'), 30_000, 'asked');
    const p = (await panel.request<ApprovalsState>('approvals/list', {})).pending.find(
      (x) => x.processId === 'self',
    )!;
    assert.deepEqual((await panel.request<RulesResult>('approvals/rules', {})).rules, []);
    await panel.request('approvals/decide', { id: p.id, decision: 'denyOnce' });
    await agent.collect('self', 30_000);
    assert.match(agent.output('self', 'stdout'), /self=403/);
    assert.deepEqual((await panel.request<RulesResult>('approvals/rules', {})).rules, []);

    // Rows another program wrote: garbage and a rule for every host are read through the schema, or ignored.
    const file = join(tmp.path, 'edited', 'approval-rules.db');
    const store = openRuleStore(file, silentLogger);
    store.insert({
      id: 'wide',
      workspace: work,
      decision: 'allow',
      protocol: 'http',
      host: '*',
      port: 0,
      method: null,
      origin: 'cli',
      createdBy: { kind: 'panel', credential: 'panel-token', clientName: null },
      createdAt: 0,
      promptId: null,
      enabled: true,
      note: null,
      hits: 0,
      lastHitAt: null,
    });
    const { sqlite } = await import('../../src/audit/sqliteDriver.js');
    const db = new (sqlite())(file);
    db.prepare('INSERT INTO rules (id, body) VALUES (?, ?)').run('garbage', '{"decision":"allow"');
    db.prepare('INSERT INTO rules (id, body) VALUES (?, ?)').run(
      'deep',
      `${'['.repeat(100_000)}${']'.repeat(100_000)}`,
    );
    db.close();
    const loaded = openRuleStore(file, silentLogger).load();
    assert.deepEqual(
      loaded.map((r) => r.id),
      ['wide'],
      'unreadable rows are ignored',
    );
    // '*' is a host name like any other: it matches a request to the host literally named '*', nothing else.
    const { ProjectRules } = await import('../../src/server/approvals/projectRules.js');
    const rules = new ProjectRules(openRuleStore(file, silentLogger));
    assert.equal(
      rules.find(work, { protocol: 'http', host: '127.0.0.1', port: 0, method: 'GET' }),
      undefined,
    );
    assert.equal(
      rules.find(work, { protocol: 'http', host: 'localhost', port: 0, method: 'GET' }),
      undefined,
    );
  });
});
