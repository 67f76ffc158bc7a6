// Live export of the audit trail to an OpenTelemetry collector (issue 15): a small OTLP/HTTP logs receiver on
// loopback takes what `corral exec-server --otlp-endpoint` sends through the official SDK's exporter.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CORRAL_BIN } from '../helpers/cli.js';
import { b64, RpcClient } from '../helpers/client.js';
import { shellStart } from '../helpers/registry-contract.js';
import { tempDir, until } from '../helpers/server.js';

const CLI = CORRAL_BIN;

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  arrayValue?: { values: OtlpValue[] };
}
interface LogRecord {
  eventName?: string;
  timeUnixNano: string;
  attributes: { key: string; value: OtlpValue }[];
}
interface Received {
  resource: Record<string, unknown>;
  scope: string;
  record: LogRecord;
}

function plain(v: OtlpValue): unknown {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.arrayValue) return v.arrayValue.values.map(plain);
  return v;
}
const attrs = (r: LogRecord) => Object.fromEntries(r.attributes.map((a) => [a.key, plain(a.value)]));

/** An OTLP/HTTP collector stand-in: POST /v1/logs with the JSON encoding, answered 200 `{}`. */
async function startReceiver() {
  const received: Received[] = [];
  const paths: string[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => {
      body += d;
    });
    req.on('end', () => {
      paths.push(`${req.method} ${req.url} ${req.headers['content-type']}`);
      const msg = JSON.parse(body) as {
        resourceLogs: {
          resource: { attributes: { key: string; value: OtlpValue }[] };
          scopeLogs: { scope: { name: string }; logRecords: LogRecord[] }[];
        }[];
      };
      for (const rl of msg.resourceLogs) {
        const resource = Object.fromEntries(rl.resource.attributes.map((a) => [a.key, plain(a.value)]));
        for (const sl of rl.scopeLogs) {
          for (const record of sl.logRecords) received.push({ resource, scope: sl.scope.name, record });
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    paths,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

describe('OTLP export', () => {
  const dir = tempDir('corral-audit-otlp-');
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let child: ChildProcess;
  let url = '';
  before(async () => {
    receiver = await startReceiver();
    child = spawn(
      process.execPath,
      [CLI, 'exec-server', '--audit-db', join(dir.path, 'audit.db'), '--otlp-endpoint', receiver.url],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    url = await new Promise<string>((r) => child.stdout!.once('data', (d: Buffer) => r(d.toString().trim())));
  });
  after(async () => {
    child?.kill('SIGKILL');
    await receiver?.close();
    dir.cleanup();
  });

  const named = (name: string) => receiver.received.filter((r) => r.record.eventName === name);

  test('processes, network decisions, fs changes and sessions arrive as OTLP/HTTP logs with OTel and Codex attribute names', async () => {
    const c = await RpcClient.open(url, 'codex-otlp');
    await c.request('process/start', {
      ...shellStart('o1', 'echo hi; exit 4', '/tmp'),
      env: { PATH: '/usr/bin:/bin', SECRET_TOKEN: 'never-exported' },
      metadata: { threadId: 'thread-9', toolCallId: 'call-9' },
    });
    await c.collect('o1');
    // A proxy decision without any dial: the host is denied by policy.
    await c.request('process/start', {
      ...shellStart('o2', "curl --noproxy '' -s -o /dev/null http://denied.test/ || true", '/tmp'),
      env: { PATH: '/usr/bin:/bin' },
      managedNetwork: {
        config: { network: { enabled: true, domains: { 'denied.test': 'deny' } } },
        auditMetadata: { conversationId: 'thread-9' },
      },
    });
    await c.collect('o2', 20_000);
    await c.request('fs/writeFile', { path: join(dir.path, 'f.txt'), dataBase64: b64('12345') });
    c.close();
    await until(
      () =>
        named('codex.exec_server.process_exit').length >= 2 &&
        named('codex.network_proxy.policy_decision').length >= 1 &&
        named('corral.fs').length >= 1 &&
        named('corral.session').some((r) => attrs(r.record)['corral.session.event'] === 'detach'),
      15_000,
      'the collector to receive the events',
    );
    assert.ok(
      receiver.paths.every((p) => p === 'POST /v1/logs application/json'),
      receiver.paths.join('\n'),
    );
    const first = receiver.received[0]!;
    assert.equal(first.resource['service.name'], 'corral');
    assert.equal(first.scope, 'corral.audit');

    const start = named('codex.exec_server.process_start')
      .map((r) => attrs(r.record))
      .find((a) => a['corral.process.id'] === 'o1')!;
    assert.equal(start['event.name'], 'codex.exec_server.process_start');
    assert.equal(start['conversation.id'], 'thread-9');
    assert.equal(start['tool.call_id'], 'call-9');
    assert.equal(start['sandbox.type'], 'none');
    assert.deepEqual(start['process.command_args'], ['/bin/sh', '-c', 'echo hi; exit 4']);
    assert.equal(start['process.working_directory'], '/tmp');
    assert.equal(typeof start['process.pid'], 'number');
    assert.equal(start['corral.client.name'], 'codex-otlp');
    assert.deepEqual(start['corral.process.env_names'], ['PATH', 'SECRET_TOKEN']);
    assert.ok(!JSON.stringify(receiver.received).includes('never-exported'), 'env values are never exported');
    assert.ok(!JSON.stringify(receiver.received).includes('hi\\n'), 'output is never exported');

    const exit = named('codex.exec_server.process_exit')
      .map((r) => attrs(r.record))
      .find((a) => a['corral.process.id'] === 'o1')!;
    assert.equal(exit['process.exit_code'], 4);
    assert.equal(exit['process.exit.code'], 4);
    assert.equal(exit['process.termination_requested'], false);

    const net = attrs(named('codex.network_proxy.policy_decision')[0]!.record);
    assert.equal(net['network.policy.decision'], 'deny');
    assert.equal(net['network.policy.reason'], 'denied');
    assert.equal(net['network.policy.source'], 'baseline_policy');
    assert.equal(net['network.policy.rule_id'], 'deny:denied.test');
    assert.equal(net['network.policy.rule_origin'], 'config');
    assert.equal(net['network.transport.protocol'], 'http');
    assert.equal(net['server.address'], 'denied.test');
    assert.equal(net['server.port'], 80);
    assert.equal(net['http.request.method'], 'GET');
    assert.equal(net['conversation.id'], 'thread-9');
    assert.equal(net['corral.process.id'], 'o2');

    const fs = attrs(named('corral.fs')[0]!.record);
    assert.deepEqual(
      [fs['corral.fs.operation'], fs['file.path'], fs['file.size'], fs['corral.fs.outcome']],
      ['writeFile', join(dir.path, 'f.txt'), 5, 'allowed'],
    );
    // Record times are the events' own (ns), not the export's.
    const t = Number(BigInt(named('corral.fs')[0]!.record.timeUnixNano) / 1_000_000n);
    assert.ok(Math.abs(t - Date.now()) < 60_000);
  });
});
