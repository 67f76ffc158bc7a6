// The audit trail of a running server (issue 15): real processes, fs/* calls, proxies and approvals go through the
// real server, and what ends up in the database file is read back with audit/query, audit/process and SQL.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { AUDIT_THREAD_NAME } from '../../src/audit/trail.js';
import type { Dialer } from '../../src/network/dial.js';
import { defaultDialer } from '../../src/network/proxy.js';
import type { ApprovalPrompt } from '../../src/protocol/approvals.js';
import type {
  AuditApprovalItem,
  AuditFsItem,
  AuditInfoResult,
  AuditNetworkItem,
  AuditProcessItem,
  AuditProcessResult,
  AuditQueryResult,
  AuditSessionItem,
} from '../../src/protocol/audit.js';
import { NOT_PRIVILEGED } from '../../src/server/core/dispatch.js';
import { b64, RpcClient } from '../helpers/client.js';
import { needsConfinedFs } from '../helpers/native.js';
import { tempDir, until } from '../helpers/server.js';
import { type AuditedServer, asking, openDb, run, startAuditedServer } from './audit-helpers.js';
import { startOrigin, stubResolver } from './network-helpers.js';
import { seed, special } from './sandbox-util.js';

const CURL = '/usr/bin/curl';

const SECRET = 'tops3cret-value-never-stored';

describe('audit trail of a running server', () => {
  const dir = tempDir('corral-audit-srv-');
  const dbPath = join(dir.path, 'state', 'audit.db');
  let as: AuditedServer;
  let panel: RpcClient & { sessionId: string };
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  const offMachine: string[] = [];

  before(async () => {
    origin = await startOrigin();
    const dialer: Dialer = (t) => {
      if (!/^127\./.test(t.host) && t.host !== 'localhost') {
        offMachine.push(t.host);
        return Promise.reject(new Error('non-loopback dial refused by the test'));
      }
      return defaultDialer(t);
    };
    as = await startAuditedServer(
      { dbPath, outputBytes: 1024 },
      { launcher: { resolver: stubResolver, dialer }, approvals: { timeoutMs: 10_000 } },
    );
    panel = await as.panel();
  });
  after(async () => {
    await as?.close();
    await origin?.close();
    dir.cleanup();
    assert.deepEqual(offMachine, []);
  });

  const query = (params: Record<string, unknown>) => panel.request<AuditQueryResult>('audit/query', params);
  const detail = (sessionId: string, processId: string) =>
    panel.request<AuditProcessResult>('audit/process', { sessionId, processId });
  /** Waits until the worker has committed everything so far (audit/info goes through the same queue). */
  const committed = () => as.audit.trail!.flush();

  test('its worker is a thread the kernel names corral-audit (top -H, the hot-path bench), one per trail', () => {
    const names = readdirSync('/proc/self/task').map((tid) => {
      try {
        return readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
      } catch {
        return ''; // the thread ended meanwhile
      }
    });
    assert.equal(names.filter((n) => n === AUDIT_THREAD_NAME).length, 1);
    assert.equal(AUDIT_THREAD_NAME, 'corral-audit');
  });

  test('a process: argv, cwd, env names (never values), sandbox type, pid, times, exit code, output head and tail', async () => {
    const agent = await as.agent('codex');
    const script = 'printf START; head -c 6000 /dev/zero | tr "\\0" x; echo err >&2; printf END; exit 3';
    await run(agent, 'big', ['/bin/sh', '-c', script], {
      env: { PATH: '/usr/bin:/bin', API_TOKEN: SECRET },
      metadata: { threadId: 'th-1', toolCallId: 'call-1' },
    });
    await committed();
    const d = await detail(as.publicId(agent), 'big');
    const p = d.process!;
    assert.deepEqual(p.argv, ['/bin/sh', '-c', script]);
    assert.equal(p.cwd, '/tmp');
    assert.equal(p.clientName, 'codex');
    assert.equal(p.tty, false);
    assert.equal(p.sandboxType, 'none');
    assert.deepEqual(p.envNames, ['API_TOKEN', 'PATH']);
    assert.equal(p.exitCode, 3);
    assert.equal(p.signal, null);
    assert.ok(p.pid! > 1);
    assert.ok(p.startedAt <= p.exitedAt! && p.exitedAt! <= p.closedAt!);
    assert.equal(p.outputBytes, 5 + 6000 + 4 + 3);
    assert.deepEqual(p.metadata, { threadId: 'th-1', toolCallId: 'call-1' });
    const head = Buffer.from(d.output!.head, 'base64').toString();
    const tail = Buffer.from(d.output!.tail, 'base64').toString();
    assert.equal(head.length, 1024);
    assert.equal(tail.length, 1024);
    assert.ok(head.startsWith('STARTxxx'), head.slice(0, 20));
    // stdout and stderr interleave as the server read them.
    assert.match(tail.slice(-8), /END/);
    assert.match(tail.slice(-8), /err\n/);
    assert.equal(d.output!.omittedBytes, 6012 - 2048);
    // The value is nowhere in the database (file and WAL), the name is.
    for (const f of [dbPath, `${dbPath}-wal`]) {
      if (existsSync(f)) assert.equal(readFileSync(f).includes(SECRET), false, `${f} holds the env value`);
    }
    const db = openDb(dbPath);
    const row = db.prepare('SELECT env_names FROM process_details').all() as { env_names: string }[];
    assert.ok(row.some((r) => r.env_names.includes('API_TOKEN')));
    db.close();
    agent.close();
  });

  test('a process killed by a signal, a terminal process, and the list filters over them', async () => {
    const agent = await as.agent('claude');
    await agent.request('process/start', {
      processId: 'sleeper',
      argv: ['/bin/sleep', '60'],
      cwd: '/tmp',
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
    });
    await agent.request('process/terminate', { processId: 'sleeper' });
    await agent.collect('sleeper');
    await run(agent, 'term', ['/bin/sh', '-c', 'echo on-a-tty; tty >/dev/null && echo yes'], { tty: true });
    await committed();
    const killed = (await detail(as.publicId(agent), 'sleeper')).process!;
    assert.equal(killed.signal, 'SIGKILL');
    assert.equal(killed.exitCode, 137);
    const term = await detail(as.publicId(agent), 'term');
    assert.equal(term.process!.tty, true);
    assert.match(Buffer.from(term.output!.head, 'base64').toString(), /on-a-tty[\s\S]*yes/);
    const signalled = await query({ type: 'process', exitStatus: 'signal', clientName: 'claude' });
    assert.deepEqual(
      signalled.items.map((i) => (i as AuditProcessItem).processId),
      ['sleeper'],
    );
    const text = await query({ type: 'process', text: 'ON-A-TTY' });
    assert.deepEqual(
      text.items.map((i) => (i as AuditProcessItem).processId),
      ['term'],
    );
    agent.close();
  });

  test('sessions: connect, detach, resume and end, with the client name', async () => {
    const other = await startAuditedServer(
      { dbPath: join(dir.path, 'sessions', 'audit.db') },
      { resumeGraceMs: 300 },
    );
    try {
      const agent = await other.agent('resumer');
      const resumeKey = agent.sessionId;
      const sid = other.publicId(agent);
      agent.close();
      await agent.waitClose();
      const again = await RpcClient.connect(other.agentUrl);
      await until(
        async () => {
          try {
            await again.request('initialize', { clientName: 'resumer', resumeSessionId: resumeKey });
            return true;
          } catch {
            return false; // the server has not seen the first connection close yet
          }
        },
        5000,
        'the resume',
      );
      again.notify('initialized', {});
      again.close();
      const p = await other.panel();
      await until(
        async () => {
          await other.audit.trail!.flush();
          const s = await p.request<AuditQueryResult>('audit/query', { type: 'session', sessionId: sid });
          return s.items.length === 5;
        },
        5000,
        'the end of the session',
      );
      const s = await p.request<AuditQueryResult>('audit/query', { type: 'session', sessionId: sid });
      assert.deepEqual(s.items.map((i) => (i as AuditSessionItem).event).reverse(), [
        'connect',
        'detach',
        'resume',
        'detach',
        'end',
      ]);
      assert.ok(s.items.every((i) => (i as AuditSessionItem).clientName === 'resumer'));
    } finally {
      await other.close();
    }
  });

  test('fs/*: writes, creates, copies and removes with path, bytes and outcome; every sandbox refusal, reads too', {
    skip: needsConfinedFs,
  }, async () => {
    const agent = await as.agent('patcher');
    const w = join(dir.path, 'work');
    const outside = join(dir.path, 'outside');
    const sandbox = seed({
      cwd: w,
      entries: [special('root', 'read'), special('current_working_directory', 'write')],
    });
    await agent.request('fs/createDirectory', { path: w });
    await agent.request('fs/createDirectory', { path: outside });
    await agent.request('fs/writeFile', { path: join(w, 'a.txt'), dataBase64: b64('hello audit'), sandbox });
    await agent.request('fs/copy', { sourcePath: join(w, 'a.txt'), destinationPath: join(w, 'b.txt') });
    await agent.request('fs/remove', { path: join(w, 'b.txt') });
    await agent.request('fs/readFile', { path: join(w, 'a.txt') });
    const refused = await agent.requestError('fs/writeFile', {
      path: join(outside, 'x'),
      dataBase64: b64('nope'),
      sandbox,
    });
    assert.equal(refused.code, -32603);
    const readSandbox = seed({ cwd: w, entries: [special('current_working_directory', 'write')] });
    const readRefused = await agent.requestError('fs/readFile', {
      path: join(outside, 'secret'),
      sandbox: readSandbox,
    });
    assert.equal(readRefused.code, -32603);
    const failed = await agent.requestError('fs/writeFile', {
      path: join(w, 'no', 'such', 'dir'),
      dataBase64: b64('z'),
    });
    assert.equal(failed.code, -32004);
    await committed();
    const r = await query({ type: 'fs', sessionId: as.publicId(agent) });
    const rows = (r.items as AuditFsItem[])
      .reverse()
      .map((i) => [i.op, i.path, i.outcome, i.bytes, i.destination]);
    assert.deepEqual(rows, [
      ['createDirectory', w, 'allowed', null, null],
      ['createDirectory', outside, 'allowed', null, null],
      ['writeFile', join(w, 'a.txt'), 'allowed', 11, null],
      ['copy', join(w, 'a.txt'), 'allowed', null, join(w, 'b.txt')],
      ['remove', join(w, 'b.txt'), 'allowed', null, null],
      ['writeFile', join(outside, 'x'), 'refused', 4, null],
      ['readFile', join(outside, 'secret'), 'refused', null, null],
      ['writeFile', join(w, 'no', 'such', 'dir'), 'failed', 1, null],
    ]);
    const refusals = await query({ type: 'fs', sessionId: as.publicId(agent), decision: 'refused' });
    assert.equal(refusals.items.length, 2);
    assert.match(
      (refusals.items[1] as AuditFsItem).error!,
      new RegExp(`sandbox denied write to ${join(outside, 'x')}`),
    );
    agent.close();
  });

  test('network: every proxy decision with host, port, protocol, method, reason, source and process', {
    skip: !existsSync(CURL) && 'no curl',
  }, async () => {
    const agent = await as.agent('netter');
    const P = origin.port;
    const script = [
      `curl --noproxy '' -s -o /dev/null -w 'a=%{http_code}\\n' http://localhost:${P}/ok`,
      `curl --noproxy '' -s -o /dev/null -w 'd=%{http_code}\\n' http://denied.test/`,
    ].join('; ');
    await run(agent, 'net', ['/bin/sh', '-c', script], {
      managedNetwork: {
        config: { network: { enabled: true, domains: { localhost: 'allow', 'denied.test': 'deny' } } },
        auditMetadata: { conversationId: 'conv-audit' },
      },
    });
    assert.match(agent.output('net'), /a=200[\s\S]*d=403/);
    await committed();
    const d = await detail(as.publicId(agent), 'net');
    const byHost = new Map(d.network.map((n) => [n.host, n]));
    const allowed = byHost.get('localhost')!;
    assert.deepEqual(
      [allowed.decision, allowed.port, allowed.protocol, allowed.method, allowed.reason, allowed.processId],
      ['allow', P, 'http', 'GET', 'allow', 'net'],
    );
    const denied = byHost.get('denied.test')!;
    assert.deepEqual(
      [denied.decision, denied.reason, denied.source, denied.port],
      ['deny', 'denied', 'baseline_policy', 80],
    );
    assert.deepEqual(d.process!.network!.deniedDomains, ['denied.test']);
    const listed = await query({ type: 'network', decision: 'deny', text: 'denied' });
    assert.deepEqual(
      listed.items.map((i) => (i as AuditNetworkItem).host),
      ['denied.test'],
    );
    agent.close();
  });

  test('approvals: the prompt, the decision, its scope, who decided and when; a timeout too', {
    skip: !existsSync(CURL) && 'no curl',
  }, async () => {
    await panel.request('approvals/subscribe', {});
    const agent = await as.agent('asker');
    const P = origin.port;
    const decided = panel.waitFor((n) => n.method === 'approvals/requested');
    const started = run(
      agent,
      'ask',
      ['/bin/sh', '-c', `curl --noproxy '' -s -o /dev/null -w 'x=%{http_code}\\n' http://127.0.0.1:${P}/a`],
      {
        managedNetwork: asking(10_000),
      },
    );
    const prompt = (await decided).params.prompt as ApprovalPrompt;
    await panel.request('approvals/decide', { id: prompt.id, decision: 'allowSession' });
    await started;
    assert.match(agent.output('ask'), /x=200/);
    // Nobody answers this one (port 9: nothing is dialled before a decision).
    const timedOut = run(
      agent,
      'ask2',
      ['/bin/sh', '-c', "curl --noproxy '' -s -o /dev/null -w 'y=%{http_code}\\n' http://127.0.0.1:9/b"],
      {
        managedNetwork: asking(300),
      },
    );
    await timedOut;
    await committed();
    const r = await query({ type: 'approval', sessionId: as.publicId(agent) });
    const items = (r.items as AuditApprovalItem[]).reverse();
    const first = items.filter((i) => i.promptId === prompt.id);
    assert.deepEqual(
      first.map((i) => i.kind),
      ['requested', 'decided'],
    );
    const d = first[1]!;
    assert.deepEqual(
      [d.decision, d.scope, d.decidedBy, d.host, d.port, d.protocol, d.processId],
      ['allowSession', 'session', 'panel', '127.0.0.1', P, 'http', 'ask'],
    );
    assert.deepEqual(d.command, [
      '/bin/sh',
      '-c',
      `curl --noproxy '' -s -o /dev/null -w 'x=%{http_code}\\n' http://127.0.0.1:${P}/a`,
    ]);
    assert.ok(d.time >= first[0]!.time);
    const timeouts = items.filter((i) => i.kind === 'timeout');
    assert.ok(timeouts.length >= 1, JSON.stringify(items));
    assert.equal(timeouts[0]!.decidedBy, 'timeout');
    assert.equal(timeouts[0]!.processId, 'ask2');
    const byOutcome = await query({ type: 'approval', decision: 'allowSession' });
    assert.ok(byOutcome.items.some((i) => (i as AuditApprovalItem).promptId === prompt.id));
    agent.close();
  });

  test('audit/* is for privileged clients only; bad params name the field', async () => {
    const agent = await as.agent('nosy');
    for (const m of ['audit/query', 'audit/process', 'audit/info']) {
      const e = await agent.requestError(m, m === 'audit/process' ? { sessionId: 's', processId: 'p' } : {});
      assert.equal(e.code, -32600, m);
      assert.equal(e.message, NOT_PRIVILEGED);
    }
    const bad = await panel.requestError('audit/query', { type: 'process', limit: 0 });
    assert.equal(bad.code, -32602);
    assert.match(bad.message, /limit/);
    const badType = await panel.requestError('audit/query', { type: 'everything' });
    assert.equal(badType.code, -32602);
    assert.match(badType.message, /type/);
    const info = await panel.request<AuditInfoResult>('audit/info', {});
    assert.equal(info.enabled, true);
    assert.equal(info.path, dbPath);
    assert.equal(info.retentionDays, 30);
    assert.equal(info.maxBytes, 1024 ** 3);
    assert.equal(info.outputBytes, 1024);
    assert.ok(info.counts.process >= 4 && info.sizeBytes > 0, JSON.stringify(info));
    assert.equal(statSync(dbPath).mode & 0o777, 0o600);
    agent.close();
  });
});
