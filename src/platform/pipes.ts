/**
 * The read end of a child's stdout or stderr. Native (src/platform/native/pipes.c): one fd in the addon's epoll set,
 * read into one scratch buffer, one JS call per read and no allocation; else a net.Socket on the fd (a stream object
 * and its state machine per pipe, ~60 µs more per child).
 */
import { closeSync } from 'node:fs';
import { Socket } from 'node:net';
import type { Readable } from 'node:stream';
import { type Addon, addon, type NativeHandle } from './addon.js';

/**
 * Reading starts when the first 'data' listener is added (or on resume); 'close' follows the last data, once the pipe
 * is at EOF or destroyed. A 'data' Buffer is only valid during the callback (the native reader reuses its memory):
 * copy what you keep.
 */
export interface OutputPipe {
  on(event: 'data', cb: (data: Buffer) => void): this;
  on(event: 'close', cb: () => void): this;
  pause(): void;
  resume(): void;
  /** Stops reading and closes the pipe now; 'close' still fires. */
  destroy(): void;
}

/** Where every native pipe reads into; its callbacks run one at a time on the loop. */
const PIPE_SCRATCH = Buffer.allocUnsafeSlow(256 * 1024);

class NativePipe implements OutputPipe {
  private handle: NativeHandle | null = null;
  private dataCb: ((data: Buffer) => void) | null = null;
  private extraDataCbs: ((data: Buffer) => void)[] = [];
  private closeCbs: (() => void)[] = [];
  private paused = false;
  private closed = false;
  private readonly onChunk = (n: number) => {
    if (n === 0) this.finish();
    else {
      const data = PIPE_SCRATCH.subarray(0, n);
      this.dataCb?.(data);
      for (const cb of this.extraDataCbs) cb(data);
    }
  };

  constructor(
    private readonly a: Addon,
    private readonly fd: number,
  ) {}

  on(event: 'data' | 'close', cb: ((data: Buffer) => void) | (() => void)): this {
    if (event === 'close') {
      if (this.closed) queueMicrotask(cb as () => void);
      else this.closeCbs.push(cb as () => void);
      return this;
    }
    if (this.dataCb) this.extraDataCbs.push(cb);
    else this.dataCb = cb;
    if (!this.paused) this.open();
    return this;
  }

  pause(): void {
    this.paused = true;
    if (this.handle) this.a.pipePause(this.handle);
  }

  resume(): void {
    this.paused = false;
    if (this.handle) this.a.pipeResume(this.handle);
    else this.open();
  }

  destroy(): void {
    if (this.closed) return;
    if (this.handle) this.a.pipeClose(this.handle);
    else closeSync(this.fd);
    this.finish();
  }

  private open(): void {
    if (this.handle || this.closed) return;
    this.handle = this.a.pipeOpen(this.fd, PIPE_SCRATCH, this.onChunk);
  }

  private finish(): void {
    if (this.closed) return;
    this.closed = true;
    const cbs = this.closeCbs;
    this.closeCbs = [];
    for (const cb of cbs) cb();
  }
}

/** A Readable (child_process's pipes, a socket) behind the OutputPipe interface. */
export function readablePipe(r: Readable): OutputPipe {
  const pipe: OutputPipe = {
    on(event: 'data' | 'close', cb: ((data: Buffer) => void) | (() => void)) {
      if (event === 'close') r.once('close', cb as () => void);
      else r.on('data', cb);
      return pipe;
    },
    pause: () => r.pause(),
    resume: () => r.resume(),
    destroy: () => r.destroy(),
  } as OutputPipe;
  r.on('error', () => {});
  return pipe;
}

/** The read end `fd` (ours to close) as an OutputPipe. */
export const openOutputPipe: (fd: number) => OutputPipe = addon
  ? (fd) => new NativePipe(addon!, fd)
  : (fd) => readablePipe(new Socket({ fd, readable: true, writable: false }));
