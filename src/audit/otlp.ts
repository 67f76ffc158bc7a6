/**
 * Live export of audit events to an OpenTelemetry collector as OTLP/HTTP logs (JSON), through the official
 * @opentelemetry/* SDK (batched, off the server's main thread: it runs in the audit worker).
 *
 * Names: the events Codex's own exec-server and network proxy emit keep Codex's names and attributes
 * (`codex.exec_server.process_start`, `codex.exec_server.process_exit`, `codex.exec_server.sandbox_denied` with
 * `conversation.id`, `tool.call_id`, `sandbox.type`, `process.exit_code`; `codex.network_proxy.policy_decision` with
 * `network.policy.decision`, `network.policy.reason`, `server.address`, …); OpenTelemetry's semantic conventions are
 * added where they exist (`process.pid`, `process.command_args`, `process.exit.code`, `session.id`, `file.path`);
 * everything Corral adds is under `corral.*`. Output is never exported (byte counts only); env values never exist.
 */
import type { AnyValueMap, Logger } from '@opentelemetry/api-logs';
import { SeverityNumber } from '@opentelemetry/api-logs';
import type { LoggerProvider } from '@opentelemetry/sdk-logs';
import type { AuditRecord } from './events.js';

export interface OtlpOptions {
  /** The collector's base URL (`http://127.0.0.1:4318`) or its full logs URL (`…/v1/logs`). */
  endpoint: string;
  serviceVersion: string;
  /** How often batches are sent (ms). */
  scheduledDelayMillis?: number;
}

/** `http://host:4318` → `http://host:4318/v1/logs`; a URL already ending in /v1/logs is used as is. */
export function logsUrl(endpoint: string): string {
  const u = new URL(endpoint);
  if (u.protocol !== 'http:' && u.protocol !== 'https:')
    throw new Error(`--otlp-endpoint: expected an http(s) URL, got ${endpoint}`);
  if (!u.pathname.endsWith('/v1/logs')) u.pathname = `${u.pathname.replace(/\/+$/, '')}/v1/logs`;
  return u.toString();
}

/** The OTel log events (name, attributes, severity) one record becomes. */
export function otelEvents(
  r: AuditRecord,
): { name: string; attributes: AnyValueMap; severity: SeverityNumber }[] {
  const info = SeverityNumber.INFO;
  switch (r.kind) {
    case 'session':
      return [
        {
          name: 'corral.session',
          severity: info,
          attributes: {
            'session.id': r.sessionId,
            'corral.client.name': r.clientName,
            'corral.session.event': r.event,
          },
        },
      ];
    case 'processStart': {
      const meta = r.metadata ?? {};
      return [
        {
          name: 'codex.exec_server.process_start',
          severity: info,
          attributes: {
            ...codexIds(meta),
            'session.id': r.sessionId,
            'corral.process.id': r.processId,
            'corral.client.name': r.clientName,
            'sandbox.type': r.sandboxType,
            'process.pid': r.pid,
            'process.command_args': r.argv,
            'process.executable.path': r.argv[0] ?? '',
            'process.working_directory': r.cwd,
            'process.interactive': r.tty,
            'corral.process.env_names': r.envNames,
          },
        },
      ];
    }
    case 'processExit': {
      const attributes: AnyValueMap = {
        'session.id': r.sessionId,
        'corral.process.id': r.processId,
        'process.exit_code': r.exitCode,
        'process.exit.code': r.exitCode,
        'process.termination_requested': r.signal !== null,
        'corral.sandbox.denied': r.sandboxDenied,
      };
      if (r.signal) attributes['corral.process.signal'] = r.signal;
      if (r.limitHit) attributes['corral.process.limit_hit'] = r.limitHit;
      const u = r.usage;
      if (u) {
        attributes['corral.process.usage.source'] = u.source;
        attributes['corral.process.usage.wall_ms'] = u.wallMs;
        const figures: [string, number | null][] = [
          ['cpu_user_ms', u.cpuUserMs],
          ['cpu_system_ms', u.cpuSystemMs],
          ['peak_memory_bytes', u.peakMemoryBytes],
          ['peak_pids', u.peakPids],
          ['io_read_bytes', u.ioReadBytes],
          ['io_write_bytes', u.ioWriteBytes],
          ['limit_events.memory', u.limitEvents.memory ?? null],
          ['limit_events.pids', u.limitEvents.pids ?? null],
        ];
        for (const [k, v] of figures) if (v !== null) attributes[`corral.process.usage.${k}`] = v;
      }
      const out = [{ name: 'codex.exec_server.process_exit', severity: info, attributes }];
      if (r.sandboxDenied) {
        out.push({
          name: 'codex.exec_server.sandbox_denied',
          severity: SeverityNumber.WARN,
          attributes: {
            'session.id': r.sessionId,
            'corral.process.id': r.processId,
            reason: 'inferred_denial',
          },
        });
      }
      return out;
    }
    case 'processClose':
      return [
        {
          name: 'corral.process.closed',
          severity: info,
          attributes: {
            'session.id': r.sessionId,
            'corral.process.id': r.processId,
            'corral.process.output_bytes': r.outputBytes,
          },
        },
      ];
    case 'network': {
      const attributes: AnyValueMap = {
        'network.policy.scope': r.scope ?? 'domain',
        'network.policy.decision': r.decision,
        'network.policy.source': r.source,
        'network.policy.reason': r.reason,
        'network.transport.protocol': r.protocol,
        'server.address': r.host,
        'server.port': r.port,
        'http.request.method': r.method ?? 'none',
        'client.address': r.clientAddress ?? 'unknown',
        'network.policy.override': r.override,
      };
      if (r.sessionId) attributes['session.id'] = r.sessionId;
      if (r.processId) attributes['corral.process.id'] = r.processId;
      // The receipt (issue 37, item 2), within the store's bound.
      if (r.ruleId != null) attributes['network.policy.rule_id'] = r.ruleId.slice(0, 1024);
      if (r.ruleOrigin != null) attributes['network.policy.rule_origin'] = r.ruleOrigin;
      if (r.correlationId != null) attributes['correlation.id'] = r.correlationId.slice(0, 1024);
      if (r.transport === 'transparent') attributes['network.transport.transparent'] = true;
      for (const [k, v] of Object.entries(r.metadata ?? {})) {
        if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') attributes[k] = v;
      }
      return [{ name: 'codex.network_proxy.policy_decision', severity: info, attributes }];
    }
    case 'approval': {
      const attributes: AnyValueMap = {
        'session.id': r.sessionId,
        'corral.approval.kind': r.event,
        'server.address': r.host,
        'server.port': r.port,
        'network.transport.protocol': r.protocol,
        'http.request.method': r.method ?? 'none',
        'corral.approval.released': r.released,
      };
      const decision =
        r.event === 'decided'
          ? r.decision === 'deny'
            ? 'deny'
            : 'allow'
          : r.event === 'requested'
            ? 'ask'
            : null;
      if (decision) attributes['network.policy.decision'] = decision;
      if (r.processId) attributes['corral.process.id'] = r.processId;
      if (r.promptId) attributes['corral.approval.prompt_id'] = r.promptId;
      if (r.decision) attributes['corral.approval.decision'] = r.decision;
      if (r.scope) attributes['corral.approval.scope'] = r.scope;
      if (r.decidedBy) attributes['corral.approval.decided_by'] = r.decidedBy;
      return [{ name: 'corral.network_approval', severity: info, attributes }];
    }
    case 'fs': {
      const attributes: AnyValueMap = {
        'corral.fs.operation': r.op,
        'file.path': r.path,
        'corral.fs.outcome': r.outcome,
      };
      if (r.sessionId) attributes['session.id'] = r.sessionId;
      if (r.clientName) attributes['corral.client.name'] = r.clientName;
      if (r.destination) attributes['corral.fs.destination'] = r.destination;
      if (r.bytes !== null) attributes['file.size'] = r.bytes;
      if (r.error) attributes['error.message'] = r.error;
      return [
        {
          name: 'corral.fs',
          severity: r.outcome === 'allowed' ? info : SeverityNumber.WARN,
          attributes,
        },
      ];
    }
  }
}

/** `metadata {threadId, toolCallId}` (0.169) as Codex's attribute names. */
function codexIds(meta: Record<string, unknown>): AnyValueMap {
  const out: AnyValueMap = {};
  if (typeof meta.threadId === 'string') out['conversation.id'] = meta.threadId;
  if (typeof meta.toolCallId === 'string') out['tool.call_id'] = meta.toolCallId;
  return out;
}

/**
 * Starts the exporter. The SDK (exporter, logs SDK, resources: ~100 ms of module loading on the audit worker, which
 * every server start waited for) is loaded here, only when an endpoint is configured.
 */
export async function startOtlpExporter(opts: OtlpOptions): Promise<OtlpExporter> {
  const [{ OTLPLogExporter }, { resourceFromAttributes }, { BatchLogRecordProcessor, LoggerProvider }] =
    await Promise.all([
      import('@opentelemetry/exporter-logs-otlp-http'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/sdk-logs'),
    ]);
  const exporter = new OTLPLogExporter({ url: logsUrl(opts.endpoint), timeoutMillis: 10_000 });
  const provider = new LoggerProvider({
    resource: resourceFromAttributes({ 'service.name': 'corral', 'service.version': opts.serviceVersion }),
    processors: [
      new BatchLogRecordProcessor({
        exporter,
        scheduledDelayMillis: opts.scheduledDelayMillis ?? 1000,
        maxQueueSize: 8192,
        maxExportBatchSize: 512,
      }),
    ],
  });
  return new OtlpExporter(provider);
}

export class OtlpExporter {
  private readonly logger: Logger;

  constructor(private readonly provider: LoggerProvider) {
    this.logger = provider.getLogger('corral.audit');
  }

  emit(records: readonly AuditRecord[]): void {
    for (const r of records) {
      for (const e of otelEvents(r)) {
        this.logger.emit({
          eventName: e.name,
          timestamp: r.time,
          severityNumber: e.severity,
          body: e.name,
          attributes: {
            'event.name': e.name,
            'event.timestamp': new Date(r.time).toISOString(),
            ...e.attributes,
          },
        });
      }
    }
  }

  flush(): Promise<void> {
    return this.provider.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.provider.shutdown();
  }
}
