/**
 * Decision receipts under hostile input (issue 37, item 2). A rule id and a correlation id come from places a
 * hostile party shapes: a configured pattern, a decider's answer, a host name. Stored, each is capped (1 KiB, the cut
 * recorded in `truncated`), the chain over the row still verifies, and the export escapes every control character.
 * The policy names the list entry that matched even among thousands of patterns and for a huge host.
 *
 * On the old code (cca01b7) nothing wrote the receipt columns and the policy had no `match`: every case here fails.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { exportAudit, verifyCommand } from '../../src/audit/cli.js';
import type { AuditRecord } from '../../src/audit/events.js';
import { openAuditStore } from '../../src/audit/openStore.js';
import { sqliteProblem } from '../../src/audit/sqliteDriver.js';
import { admit } from '../../src/network/admission.js';
import { defaultSettings } from '../../src/network/config.js';
import { NetworkEvents } from '../../src/network/events.js';
import { compilePatterns } from '../../src/network/patterns.js';
import { PolicyEngine } from '../../src/network/policy.js';
import { Recorder } from '../../src/network/recorder.js';
import { AuditQueryParams } from '../../src/protocol/audit.js';
import { NetworkAuditEventSchema } from '../../src/protocol/network.js';
import { textSink as sink } from '../helpers/textSink.js';

const skip = sqliteProblem() ?? false;
const CONTROLS = 'a\u0000b\u001b[31m\r\n\u2028\u007f"\\';
const HUGE = `deny:${CONTROLS}${'x'.repeat(64 * 1024)}`;

function networkRecord(i: number, ruleId: string, correlationId: string): AuditRecord {
  return {
    kind: 'network',
    time: Date.parse('2026-01-01T00:00:00Z') + i,
    sessionId: 's',
    processId: 'p',
    host: 'h.test',
    port: 80,
    protocol: 'http',
    method: 'GET',
    decision: 'deny',
    reason: 'denied',
    source: 'baseline_policy',
    scope: 'domain',
    override: false,
    clientAddress: null,
    metadata: null,
    ruleId,
    ruleOrigin: 'config',
    correlationId,
  };
}

describe('decision receipts: hostile rule and correlation ids', { skip }, () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'corral-receipts-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('a 64 KiB id with controls is stored capped, the cut recorded, the chain holds, the export escapes it', async () => {
    const db = join(dir, 'huge', 'audit.db');
    const store = openAuditStore(db, { sign: true });
    // Huge, then wide (many rows in one batch), then empty ids.
    store.write([networkRecord(0, HUGE, `${CONTROLS}${'c'.repeat(70_000)}`)]);
    store.write(
      Array.from({ length: 2000 }, (_, i) => networkRecord(i + 1, `allow:${i}${CONTROLS}`, `${i}`)),
    );
    store.write([networkRecord(3000, '', '')]);
    store.checkpoint();
    store.close();

    const out = sink();
    assert.equal(verifyCommand(['--db', db], { out, err: sink() } as never), 0, out.text);

    const exported = sink();
    await exportAudit({ dbPath: db, since: null, sessionId: null, out: exported as never });
    // Control characters never appear raw: each line is one JSON object.
    const lines = exported.text.split('\n').filter((l) => l !== '');
    for (const l of lines) assert.doesNotMatch(l, /[\u0000-\u001f\u007f]/);
    const rows = lines
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((r) => r.type === 'network');
    assert.equal(rows.length, 2002);
    const first = rows.find((r) => (r.ruleId as string).startsWith('deny:a'))!;
    assert.ok(Buffer.byteLength(first.ruleId as string) <= 1024);
    assert.ok((first.ruleId as string).startsWith(`deny:${CONTROLS}`));
    assert.ok(Buffer.byteLength(first.correlationId as string) <= 1024);
    assert.deepEqual(first.truncated, {
      ruleId: { originalBytes: Buffer.byteLength(HUGE) },
      correlationId: { originalBytes: Buffer.byteLength(CONTROLS) + 70_000 },
    });
    assert.equal(first.ruleOrigin, 'config');
    assert.ok(rows.some((r) => r.ruleId === `allow:1999${CONTROLS}` && r.correlationId === '1999'));
    assert.ok(rows.some((r) => r.ruleId === '' && r.truncated === undefined));
  });

  test('the list entry that matched: first of 5000 patterns, wildcards, a huge or malformed host', () => {
    const many = Array.from({ length: 5000 }, (_, i) => `h${i}.test`);
    const p = compilePatterns([...many, '*.wide.test', '**.deep.test', 'exact.test']);
    assert.equal(p.match('h4999.test'), 'h4999.test');
    assert.equal(p.match('a.wide.test'), '*.wide.test');
    assert.equal(p.match(`${'a.'.repeat(100)}deep.test`), '**.deep.test');
    assert.equal(p.match('EXACT.test'), 'exact.test');
    assert.equal(p.match('fe80::1%eth0'), null);
    for (const bad of ['', '\u0000', 'a'.repeat(64 * 1024), '.'.repeat(10_000), '%', 'exact.test\n'])
      assert.equal(p.match(bad), null, JSON.stringify(bad.slice(0, 20)));
    assert.equal(compilePatterns([]).match('x.test'), null);
    // Past the memo's bound (1024 hosts) the answers stay right.
    for (let i = 0; i < 3000; i++) assert.equal(p.match(`n${i}.wide.test`), '*.wide.test');
    assert.equal(p.match('h17.test'), 'h17.test');
  });

  test('a decider receipt of 64 KiB with controls reaches the audit event as given (the store caps it)', async () => {
    const events = new NetworkEvents();
    const seen: unknown[] = [];
    events.on('audit', (e) => seen.push(e));
    const recorder = new Recorder({ processId: 'p', auditMetadata: {}, events, log: () => {}, mode: 'full' });
    const policy = new PolicyEngine(
      { ...defaultSettings(), enabled: true, allowed_domains: [], denied_domains: ['*.no.test'] },
      {
        resolver: async () => ['127.0.0.1'],
        decider: async () => ({
          type: 'deny',
          reason: 'r',
          receipt: { ruleId: HUGE, origin: 'panel', correlationId: CONTROLS },
        }),
      },
    );
    const req = { protocol: 'http' as const, port: 80, method: 'GET', client: null };
    for (const host of ['asked.test', 'x.no.test']) {
      const d = await policy.evaluate(host, 80, { protocol: 'http', client: null, method: 'GET' });
      assert.equal(d.allowed, false);
      recorder.record({ ...req, host }, { ...(d as Extract<typeof d, { allowed: false }>), scope: 'domain' });
    }
    const [asked, denied] = seen.map((e) => NetworkAuditEventSchema.parse(e));
    assert.equal(asked!['network.policy.rule_id'], HUGE);
    assert.equal(asked!['network.policy.rule_origin'], 'panel');
    assert.equal(asked!['correlation.id'], CONTROLS);
    assert.equal(denied!['network.policy.rule_id'], 'deny:*.no.test');
    assert.equal(denied!['network.policy.rule_origin'], 'config');
    assert.equal(denied!['correlation.id'], undefined);
  });

  test('audit/query correlationId: huge, deep, wide, empty and non-string values are refused naming the field', () => {
    const bad: unknown[] = [
      'x'.repeat(1025),
      '',
      { a: { b: { c: 1 } } },
      Array.from({ length: 10_000 }, () => 'x'),
      42,
      true,
    ];
    for (const correlationId of bad) {
      const r = AuditQueryParams.safeParse({ type: 'network', correlationId });
      assert.equal(r.success, false);
      assert.deepEqual(r.error!.issues[0]!.path, ['correlationId']);
    }
    assert.equal(
      AuditQueryParams.parse({ type: 'approval', correlationId: CONTROLS }).correlationId,
      CONTROLS,
    );
  });

  test('limited mode, the local guard and nothing allowing: each refusal names its own origin', async () => {
    const settings = { ...defaultSettings(), enabled: true, allowed_domains: ['ok.test'] };
    const limited = new PolicyEngine(
      { ...settings, mode: 'limited', allow_local_binding: true },
      { resolver: async () => ['127.0.0.1'] },
    );
    const full = new PolicyEngine(settings, { resolver: async () => ['127.0.0.1'] });
    const r = (protocol: 'http' | 'socks5_tcp', host: string, method: string | null) => ({
      protocol,
      host,
      port: 80,
      method,
      client: null,
    });
    const post = await admit(limited, r('http', 'ok.test', 'POST'));
    assert.deepEqual(post.receipt, { ruleId: 'method_not_allowed', origin: 'limited_mode' });
    assert.ok(!post.allowed && post.hostAllowed?.receipt?.ruleId === 'allow:ok.test');
    const socks = await admit(limited, r('socks5_tcp', 'ok.test', null));
    assert.deepEqual(socks.receipt, { ruleId: 'method_not_allowed', origin: 'limited_mode' });
    assert.deepEqual((await admit(full, r('http', '127.0.0.1', 'GET'))).receipt, {
      ruleId: 'not_allowed_local',
      origin: 'local_guard',
    });
    assert.deepEqual((await admit(full, r('http', 'other.test', 'GET'))).receipt, {
      ruleId: 'not_allowed',
      origin: 'default',
    });
  });
});
