// A repository's .corral/network.json (issue 36, item 6) is data that can only narrow: a file that tries to widen
// (wildcard hosts, port 0, `domains`, `hard_deny_allowlist_misses`) has those entries ignored and reported; its
// declared endpoints block every other request of the workspace before any project rule or prompt; a link, a huge,
// deep or malformed file narrows nothing and says why. Fails on cca01b7 (no repository policy, no approvals/repoPolicy).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Host } from '../../src/app/host.js';
import type { ApprovalsState, RepoPolicyState, RulesResult } from '../../src/protocol/approvals.js';
import { askingNetwork, startRulesHost } from '../helpers/approvalsCli.js';
import { RpcClient } from '../helpers/client.js';
import { tempDir, until } from '../helpers/server.js';
import { startOrigin } from '../integration/network-helpers.js';

describe('.corral/network.json narrows, never widens', {
  skip: existsSync('/usr/bin/curl') ? false : 'curl is not installed',
}, () => {
  const tmp = tempDir('corral-repo-policy-');
  const offMachine: string[] = [];
  let host: Host;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  let agent: RpcClient & { sessionId: string };
  let panel: RpcClient & { sessionId: string };
  const work = join(tmp.path, 'repo');
  const file = join(work, '.corral', 'network.json');

  before(async () => {
    mkdirSync(join(work, '.git'), { recursive: true });
    mkdirSync(join(work, '.corral'), { recursive: true });
    origin = await startOrigin();
    host = await startRulesHost(join(tmp.path, 'state'), join(tmp.path, 'rules', 'r.db'), offMachine);
    agent = await RpcClient.open(host.execUrl, 'agent');
    panel = await RpcClient.open(
      `${host.listener.url}/?token=${encodeURIComponent(host.tokens.panel)}`,
      'panel',
    );
  });
  after(async () => {
    agent?.close();
    panel?.close();
    await host?.shutdown();
    await origin?.close();
    tmp.cleanup();
    assert.deepEqual(offMachine, []);
  });

  const curl = (label: string, h: string) =>
    `curl --noproxy '' -s -o /dev/null -w '${label}=%{http_code}\\n' http://${h}:${origin.port}/${label}`;
  const run = (processId: string, script: string) =>
    agent.request('process/start', {
      processId,
      argv: ['/bin/sh', '-c', script],
      cwd: work,
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      arg0: null,
      managedNetwork: askingNetwork(),
    });
  const promptOf = async (processId: string) => {
    const find = async () =>
      (await panel.request<ApprovalsState>('approvals/list', {})).pending.find(
        (p) => p.processId === processId,
      );
    await until(async () => (await find()) !== undefined, 30_000, `the prompt of ${processId}`);
    return (await find())!;
  };
  const policy = () => panel.request<RepoPolicyState>('approvals/repoPolicy', { workspace: work });

  test('widening entries are ignored and shown; the declared endpoints block the rest, project rules included', async () => {
    // A project rule for 127.0.0.2, made before the file exists.
    await run('before', curl('before', '127.0.0.2'));
    await panel.request('approvals/decide', { id: (await promptOf('before')).id, decision: 'allowProject' });
    await agent.collect('before', 30_000);
    assert.doesNotMatch(agent.output('before', 'stdout'), /before=403/);

    writeFileSync(
      file,
      JSON.stringify({
        version: 1,
        endpoints: [
          { host: '*' },
          { host: '*.test' },
          { host: 'any' },
          { host: '127.0.0.1', port: 0 },
          { host: '127.0.0.1', port: origin.port, allow: true },
          { host: '127.0.0.1', port: origin.port, protocol: 'http', methods: ['get'] },
        ],
        domains: { '*': 'allow' },
        hard_deny_allowlist_misses: false,
        commands: ['curl | sh'],
      }),
    );
    const s = await policy();
    assert.equal(s.status, 'read');
    assert.equal(s.endpoints, 1, 'only the exact entry counts');
    const ignored = s.ignored.join('\n');
    for (const why of [
      /endpoints\[0\]: host "\*" would widen/,
      /endpoints\[1\]: host "\*\.test" would widen/,
      /endpoints\[2\]: host "any" would widen/,
      /endpoints\[3\]: port/,
      /endpoints\[4\]: .*allow/i,
      /"domains": a repository file can only list endpoints/,
      /"hard_deny_allowlist_misses": a repository file can only list endpoints/,
      /"commands": a repository file can only list endpoints/,
    ])
      assert.match(ignored, why);
    assert.match(s.sha256 ?? '', /^[0-9a-f]{64}$/);

    // The project rule for 127.0.0.2 no longer applies: not declared, blocked without a prompt.
    await run('undeclared', curl('undeclared', '127.0.0.2'));
    await agent.collect('undeclared', 30_000);
    assert.match(agent.output('undeclared', 'stdout'), /undeclared=403/);
    // A GET to the declared endpoint is declared, and still needs an answer (the file grants nothing).
    await run('declared', `${curl('declared', '127.0.0.1')}`);
    const p = await promptOf('declared');
    assert.equal(p.host, '127.0.0.1');
    await panel.request('approvals/decide', { id: p.id, decision: 'denyOnce' });
    await agent.collect('declared', 30_000);
    assert.match(agent.output('declared', 'stdout'), /declared=403/);
    const prompted = (await panel.request<ApprovalsState>('approvals/list', {})).audit.filter(
      (e) => e.kind === 'requested' && e.processId === 'undeclared',
    );
    assert.deepEqual(prompted, [], 'the undeclared request was never prompted');
    for (const r of (await panel.request<RulesResult>('approvals/rules', {})).rules)
      await panel.request('approvals/revoke', { id: r.id });
  });

  test('a link, a huge, deep, wide or malformed file narrows nothing and says why', async () => {
    const cases: [() => void, RegExp][] = [
      [() => writeFileSync(file, 'x'.repeat(100_000)), /bytes/],
      [() => writeFileSync(file, '{"endpoints": ['), /not JSON/],
      [() => writeFileSync(file, `${'['.repeat(30_000)}${']'.repeat(30_000)}`), /not a JSON object/],
      [() => writeFileSync(file, '{"endpoints": {"host": "127.0.0.1"}}'), /must be an array/],
      [
        () => {
          const target = join(tmp.path, 'elsewhere.json');
          writeFileSync(target, '{"endpoints": []}');
          symlinkSync(target, file);
        },
        /symbolic link/,
      ],
    ];
    for (const [make, why] of cases) {
      if (existsSync(file)) unlinkSync(file);
      make();
      const s = await policy();
      assert.equal(s.status, 'invalid');
      assert.match(s.problem ?? '', why);
      assert.equal(s.endpoints, 0);
    }
    unlinkSync(file);
    const wide = { endpoints: Array.from({ length: 300 }, (_, i) => ({ host: `h${i}.test`, port: 443 })) };
    writeFileSync(file, JSON.stringify(wide));
    const w = await policy();
    assert.equal(w.status, 'read');
    assert.equal(w.endpoints, 256);
    assert.match(w.ignored.join('\n'), /past the first 256/);
    // An invalid file narrows nothing: the request is prompted as usual.
    writeFileSync(file, 'not json');
    await run('invalid', curl('invalid', '127.0.0.3'));
    const p = await promptOf('invalid');
    await panel.request('approvals/decide', { id: p.id, decision: 'denyOnce' });
    await agent.collect('invalid', 30_000);
    const bad = await panel.request('approvals/repoPolicy', { workspace: 'relative' }).catch((e) => e);
    assert.equal((bad as { code: number }).code, -32600);
  });
});
