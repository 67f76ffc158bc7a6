/**
 * Feeds the audit trail from the server's existing seams, without changing them: the ServerEvents bus (sessions,
 * processes, fs/* calls, approvals) and the proxies' NetworkEvents buses (every policy decision). Each listener
 * builds a plain record and hands it to the sink, which only queues it: nothing here touches the disk.
 *
 * What is recorded never includes an env value (names only); policy summaries and metadata go through the monitor's
 * redaction (secret-looking fields removed). Text a client chose (argv, env names, client names, fs paths) is capped
 * here, before it crosses to the worker (caps.ts), each cut marked in the record's `truncated`.
 */

import type { NetworkEvents } from '../network/events.js';
import type { ManagedNetworkSpec } from '../network/managedNetwork.js';
import type { ManagedProcess } from '../process/managedProcess.js';
import type { ApprovalAuditEvent } from '../protocol/approvals.js';
import type { FsOperation } from '../protocol/audit.js';
import type { OutputStream } from '../protocol/exec.js';
import { redact, redactedJson, redactFixed } from '../protocol/monitor.js';
import { auditMetadataOf, type NetworkAuditEvent } from '../protocol/network.js';
import type { FsCallEvent } from '../server/core/events.js';
import type { Session } from '../server/core/session.js';
import { capList, capText, type Truncation, truncations } from './caps.js';
import type { AuditRecord, FsRecord, SessionRecord } from './events.js';
import { ReplayRecorder } from './replayRecorder.js';
import type { AuditSource } from './source.js';
import type { AuditSink } from './trail.js';

/** fs/* requests that change files: recorded always. Reads are recorded only when the sandbox context refused them. */
const FS_CHANGES = new Set(['fs/writeFile', 'fs/createDirectory', 'fs/copy', 'fs/remove']);

export interface AuditObserver {
  /** Also records the policy decisions of this proxy event bus. */
  attachNetwork(bus: NetworkEvents): void;
  /** Records the end of every session still open (server shutdown), then stops listening. */
  end(): void;
}

/** What the process's managed proxy enforces, for the record (null: no managed network). */
function networkSummary(spec: ManagedNetworkSpec | undefined): Record<string, unknown> | null {
  if (!spec) return null;
  const s = spec.settings;
  return {
    mode: s.mode,
    allowedDomains: s.allowed_domains,
    deniedDomains: s.denied_domains,
    allowLocalBinding: s.allow_local_binding,
    socks5: s.enable_socks5,
    upstreamProxy: s.allow_upstream_proxy,
    approvals: spec.approvals !== undefined,
    ...(spec.warnings.length > 0 ? { warnings: spec.warnings } : {}),
  };
}

/** The last `n` bytes of a process's retained output (the ring holds the newest 1 MiB), as its own buffer. */
function tailOf(proc: ManagedProcess, n: number): Uint8Array | null {
  if (n <= 0) return null;
  const chunks = proc.buffer.since(0);
  let total = 0;
  let i = chunks.length;
  while (i > 0 && total < n) total += chunks[--i]!.data.length;
  const out = new Uint8Array(Math.min(n, total));
  let skip = total - out.length;
  let at = 0;
  for (; i < chunks.length; i++) {
    const d = chunks[i]!.data;
    const from = Math.min(skip, d.length);
    skip -= from;
    out.set(d.subarray(from), at);
    at += d.length - from;
  }
  return out;
}

function own(b: Buffer): Uint8Array | null {
  if (b.length === 0) return null;
  const out = new Uint8Array(b.length);
  out.set(b);
  return out;
}

function fsRecord(e: FsCallEvent): FsRecord | null {
  const read = !FS_CHANGES.has(e.method);
  if (read && !e.refused) return null;
  const p = (e.params ?? {}) as Record<string, unknown>;
  const path = typeof p.path === 'string' ? p.path : typeof p.sourcePath === 'string' ? p.sourcePath : null;
  if (path === null) return null;
  const data = typeof p.dataBase64 === 'string' ? p.dataBase64 : null;
  const cut: Record<string, Truncation> = {};
  const clientName = e.session?.clientName ?? null;
  const destination = typeof p.destinationPath === 'string' ? p.destinationPath : null;
  const error = e.error?.message ?? null;
  return {
    kind: 'fs',
    time: e.time,
    sessionId: e.session?.id ?? null,
    clientName: clientName === null ? null : capText(clientName, 'clientName', cut),
    op: e.method.slice('fs/'.length) as FsOperation,
    path: capText(path, 'path', cut),
    destination: destination === null ? null : capText(destination, 'destination', cut),
    bytes:
      data !== null
        ? Math.floor((data.length * 3) / 4) - (data.endsWith('==') ? 2 : data.endsWith('=') ? 1 : 0)
        : null,
    outcome: e.error === null ? 'allowed' : e.refused ? 'refused' : 'failed',
    error: error === null ? null : capText(error, 'error', cut),
    truncated: truncations(cut),
  };
}

function approvalRecord(e: ApprovalAuditEvent): AuditRecord {
  const cut: Record<string, Truncation> = {};
  const command = e.command === null ? null : capList(e.command, 'command', cut);
  const scope =
    e.decision === null
      ? null
      : e.decision === 'allowOnce'
        ? 'once'
        : e.decision === 'allowProcess'
          ? 'process'
          : 'session';
  const decidedBy =
    e.kind === 'decided' || e.kind === 'revoked'
      ? 'panel'
      : e.kind === 'timeout'
        ? 'timeout'
        : e.kind === 'cancelled'
          ? 'process-exit'
          : null;
  return {
    kind: 'approval',
    time: e.timestamp,
    event: e.kind,
    promptId: e.promptId,
    decision: e.decision,
    scope,
    decidedBy,
    sessionId: e.sessionId,
    processId: e.processId,
    command,
    host: e.host,
    port: e.port,
    protocol: e.protocol,
    method: e.method,
    released: e.released,
    truncated: truncations(cut),
  };
}

function networkRecord(e: NetworkAuditEvent, now: number): AuditRecord {
  const metadata = auditMetadataOf(e);
  const time = Date.parse(e['event.timestamp']);
  return {
    kind: 'network',
    time: Number.isNaN(time) ? now : time,
    sessionId: e.sessionId ?? null,
    processId: e.processId ?? null,
    host: e['server.address'],
    port: e['server.port'],
    protocol: e['network.transport.protocol'],
    method: e['http.request.method'] === 'none' ? null : e['http.request.method'],
    decision: e['network.policy.decision'],
    reason: e['network.policy.reason'],
    source: e['network.policy.source'],
    scope: e['network.policy.scope'],
    override: e['network.policy.override'],
    clientAddress: e['client.address'] === 'unknown' ? null : e['client.address'],
    metadata: Object.keys(metadata).length > 0 ? (redact(metadata) as Record<string, unknown>) : null,
    ruleId: e['network.policy.rule_id'] ?? null,
    ruleOrigin: e['network.policy.rule_origin'] ?? null,
    correlationId: e['correlation.id'] ?? null,
    ...(e['network.transport.transparent'] ? { transport: 'transparent' as const } : {}),
  };
}

/** A session event's record, its client name capped. */
function sessionRecord(s: Session, event: SessionRecord['event'], now: number): SessionRecord {
  const cut: Record<string, Truncation> = {};
  const clientName = capText(s.clientName, 'clientName', cut);
  return {
    kind: 'session',
    time: now,
    sessionId: s.id,
    clientName,
    event,
    truncated: truncations(cut),
  };
}

/** Subscribes the sink to everything the server does. */
export function observeServer(source: AuditSource, sink: AuditSink): AuditObserver {
  const open = new Map<string, Session>();
  const fresh = new Set<string>();
  const offs: (() => void)[] = [];
  const { events, clock } = source;
  // Timed output for replay, only where output is recorded at all (--audit-output-bytes 0 keeps none).
  const replay = sink.replayBytes ? new ReplayRecorder<ManagedProcess>(sink.replayBytes) : null;

  const onSession = (kind: 'created' | 'attached' | 'detached' | 'expired', s: Session) => {
    const record = (event: SessionRecord['event']) => sink.record(sessionRecord(s, event, clock.now()));
    if (kind === 'created') {
      fresh.add(s.id);
      open.set(s.id, s);
      return;
    }
    if (kind === 'attached') {
      record(fresh.delete(s.id) ? 'connect' : 'resume');
      return;
    }
    if (kind === 'detached') record('detach');
    else {
      open.delete(s.id);
      record('end');
    }
  };

  const onProcess = (kind: 'started' | 'exited' | 'closed', p: ManagedProcess) => {
    const { sessionId, processId } = p.info;
    if (kind === 'started') {
      if (sink.outputBytes > 0) p.keepHead(sink.outputBytes);
      // A terminal session replays whole up to the trail's replay bound (1 MiB); a pipe's timed text keeps what its output
      // keeps (the first and the last N bytes: 2 N), so a flood of output-heavy commands costs the trail no more than
      // before replay existed.
      replay?.start(p, p.info.tty ? sink.replayBytes : 2 * sink.outputBytes);
      const summary = p.launch.summary;
      const cut: Record<string, Truncation> = {};
      sink.record({
        kind: 'processStart',
        time: p.startedAt,
        sessionId,
        processId,
        clientName: capText(p.info.clientName, 'clientName', cut),
        argv: capList(p.info.argv, 'argv', cut),
        cwd: p.info.cwd,
        tty: p.info.tty,
        envNames: capList(p.envNames, 'envNames', cut),
        sandboxType: p.sandboxType,
        policy: summary ? redactedJson(summary) : null,
        network: networkSummary(source.networkOf(sessionId, processId)),
        metadata: p.info.metadata ? redactFixed(p.info.metadata) : null,
        pid: p.pid,
        truncated: truncations(cut),
      });
      return;
    }
    if (kind === 'exited') {
      sink.record({
        kind: 'processExit',
        time: p.exitedAt ?? clock.now(),
        sessionId,
        processId,
        exitCode: p.exitCode ?? -1,
        signal: p.exitSignal,
        sandboxDenied: p.sandboxDenied,
        // Which resource limit ended the process (the cgroup's report), or null.
        limitHit: p.limitHit,
        usage: p.usage,
      });
      return;
    }
    const n = sink.outputBytes;
    // Taken, not copied: a finished process must not hold its head for as long as its session keeps it.
    const head = n > 0 ? own(p.takeHead()) : null;
    const headLen = head?.length ?? 0;
    const tail = tailOf(p, Math.min(n, p.bytesOut - headLen));
    const tailLen = tail?.length ?? 0;
    sink.record({
      kind: 'processClose',
      time: p.closedAt ?? clock.now(),
      sessionId,
      processId,
      outputBytes: p.bytesOut,
      head,
      tail,
      omittedBytes: n > 0 ? p.bytesOut - headLen - tailLen : p.bytesOut,
      chunks: replay?.take(p) ?? null,
    });
  };
  const onOutput = (p: ManagedProcess, _seq: number, stream: OutputStream, data: Buffer) =>
    replay?.output(p, clock.now(), stream, data);

  const onFs = (e: FsCallEvent) => {
    const r = fsRecord(e);
    if (r) sink.record(r);
  };
  const onApproval = (e: ApprovalAuditEvent) => sink.record(approvalRecord(e));

  events.on('session', onSession);
  events.on('process', onProcess);
  events.on('fs', onFs);
  events.on('approval', onApproval);
  if (replay) {
    events.on('output', onOutput);
    offs.push(() => events.off('output', onOutput));
  }
  offs.push(
    () => events.off('session', onSession),
    () => events.off('process', onProcess),
    () => events.off('fs', onFs),
    () => events.off('approval', onApproval),
  );
  const buses = new Set<NetworkEvents>();
  const observer: AuditObserver = {
    attachNetwork(bus) {
      if (buses.has(bus)) return;
      buses.add(bus);
      offs.push(bus.on('audit', (e) => sink.record(networkRecord(e, clock.now()))));
    },
    end() {
      for (const s of open.values()) sink.record(sessionRecord(s, 'end', clock.now()));
      open.clear();
      for (const off of offs) off();
      offs.length = 0;
      replay?.clear();
    },
  };
  observer.attachNetwork(source.networkEvents);
  return observer;
}
