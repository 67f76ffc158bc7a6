import { EventEmitter } from 'node:events';
import type { ManagedProcess } from '../../process/managedProcess.js';
import type { ApprovalAuditEvent } from '../../protocol/approvals.js';
import type { OutputStream } from '../../protocol/exec.js';
import type { Session } from './session.js';

export type ProcessEventKind = 'started' | 'exited' | 'closed';

/** One finished fs/* request (emitted only while someone listens). */
export interface FsCallEvent {
  method: string;
  /** When the request began (ms since the epoch). */
  time: number;
  /** The params as sent (validated or not). */
  params: unknown;
  session: Session | null;
  /** null when it succeeded. */
  error: Error | null;
  /** The request's sandbox context refused it (the guard threw `error`). */
  refused: boolean;
}

interface EventMap {
  process: [kind: ProcessEventKind, proc: ManagedProcess];
  output: [proc: ManagedProcess, seq: number, stream: OutputStream, data: Buffer];
  session: [kind: 'created' | 'attached' | 'detached' | 'expired', session: Session];
  fs: [event: FsCallEvent];
  /** Every record of the approval broker's audit (requested, decided, timeout, cancelled, revoked). */
  approval: [event: ApprovalAuditEvent];
}

/**
 * In-process bus of everything the exec server does, for observers such as the panel's monitor feed.
 * Output events are emitted only while someone listens (they are the hot path).
 */
export class ServerEvents extends EventEmitter<EventMap> {
  hasOutputListeners(): boolean {
    return this.listenerCount('output') > 0;
  }

  emitOutput(proc: ManagedProcess, seq: number, stream: OutputStream, data: Buffer): void {
    this.emit('output', proc, seq, stream, data);
  }

  emitProcess(kind: ProcessEventKind, proc: ManagedProcess): void {
    if (this.listenerCount('process') > 0) this.emit('process', kind, proc);
  }

  hasFsListeners(): boolean {
    return this.listenerCount('fs') > 0;
  }

  emitSession(kind: 'created' | 'attached' | 'detached' | 'expired', session: Session): void {
    if (this.listenerCount('session') > 0) this.emit('session', kind, session);
  }
}
