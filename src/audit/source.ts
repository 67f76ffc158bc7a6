/**
 * What the audit trail reads of the server, and nothing more: the server's event bus (sessions, processes, fs/*
 * calls, approvals), the bus its managed proxies report policy decisions on, the managed network a process runs
 * under (for its start record), and the time records are stamped with. The exec server implements it.
 */
import type { Clock } from '../clock.js';
import type { NetworkEvents } from '../network/events.js';
import type { ManagedNetworkSpec } from '../network/managedNetwork.js';
import type { ServerEvents } from '../server/core/events.js';

export interface AuditSource {
  /** Subscribed to while the trail observes; unsubscribed at its end. */
  readonly events: Pick<ServerEvents, 'on' | 'off'>;
  /** The proxies of process/start report their policy decisions here. */
  readonly networkEvents: NetworkEvents;
  /** The managed network the process runs under (its live proxy's), or undefined without one. */
  networkOf(sessionId: string, processId: string): ManagedNetworkSpec | undefined;
  /** Stamps records that carry no time of their own. */
  readonly clock: Pick<Clock, 'now'>;
}
