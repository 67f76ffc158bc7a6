// Replay of a stored process's output (audit/replay, issue 37 item 4): a terminal session in xterm.js, pipes as text
// with their times; play at 1x or faster, and a scrubber to any point. Seeking back resets the terminal and writes
// every chunk up to that point again (the screen is what the bytes make of it; there is no other state to restore).
import { Terminal } from '@xterm/xterm';
import type { AuditReplayResult } from '../../src/protocol/audit.js';
import { b64ToBytes, h, setText } from '../dom.js';

const PTY_COLS = 80;
const PTY_ROWS = 24;
const SPEEDS = [1, 2, 5, 10, 50];

interface Chunk {
  /** ms since the first moment of the replay (the process's start). */
  t: number;
  stream: string;
  bytes: Uint8Array;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(3)}s`;

export class ReplayView {
  readonly el: HTMLElement;
  private readonly chunks: Chunk[];
  private readonly duration: number;
  private readonly scrubber: HTMLInputElement;
  private readonly clock = h('span', { class: 'mono small', 'data-testid': 'replay-clock' });
  private readonly playBtn = h('button', { class: 'btn small', 'data-testid': 'replay-play' }, 'Play');
  private readonly speed = h(
    'select',
    { class: 'small', 'data-testid': 'replay-speed', title: 'Speed' },
    ...SPEEDS.map((s) => h('option', { value: String(s) }, `${s}×`)),
  );
  private readonly screen: HTMLElement;
  private readonly term: Terminal | null = null;
  private readonly pre: HTMLElement | null = null;
  private readonly decoders = new Map<string, TextDecoder>();
  /** How many chunks are on the screen, and the position (ms) shown. */
  private shown = 0;
  private pos = 0;
  private playing = false;
  private frame = 0;
  private last = 0;
  /** Writes to xterm still being parsed (it parses in slices of its own). */
  private pending = 0;

  constructor(r: AuditReplayResult) {
    const origin = r.startedAt ?? r.chunks[0]?.at ?? 0;
    let prev = 0;
    this.chunks = r.chunks.map((c) => {
      prev = Math.max(prev, c.at - origin);
      return { t: prev, stream: c.stream, bytes: b64ToBytes(c.data) };
    });
    this.duration = prev;
    this.scrubber = h('input', {
      type: 'range',
      min: '0',
      max: String(this.duration),
      step: '1',
      value: '0',
      class: 'replay-scrubber',
      'data-testid': 'replay-scrubber',
      'aria-label': 'Position in the replay',
    }) as HTMLInputElement;
    if (r.tty) {
      this.screen = h('div', { class: 'term', 'data-testid': 'replay-xterm' });
      this.term = new Terminal({
        cols: PTY_COLS,
        rows: PTY_ROWS,
        scrollback: 5000,
        fontSize: 13,
        disableStdin: true,
      });
      this.term.open(this.screen);
    } else {
      this.pre = h('pre', { class: 'pipe-output', 'data-testid': 'replay-text', tabindex: '0' });
      this.screen = this.pre;
    }
    this.scrubber.addEventListener('input', () => {
      this.pause();
      this.seek(Number(this.scrubber.value));
    });
    this.playBtn.addEventListener('click', () => (this.playing ? this.pause() : this.play()));
    const note =
      r.droppedBytes > 0
        ? h(
            'div',
            { class: 'out-note small' },
            `${r.droppedBytes} bytes after the recording bound are not in the replay.`,
          )
        : r.chunks.length === 0
          ? h('div', { class: 'out-note small' }, 'No timed output was stored for this process.')
          : null;
    this.el = h(
      'div',
      { class: 'replay', 'data-testid': 'replay' },
      h('div', { class: 'replay-bar' }, this.playBtn, this.speed, this.scrubber, this.clock),
      note,
      this.screen,
    );
    this.mark();
  }

  /** Shows the replay as it was `ms` after the start. */
  seek(ms: number): void {
    const to = Math.max(0, Math.min(this.duration, ms));
    if (to < this.pos) this.clear();
    let end = this.shown;
    while (end < this.chunks.length && this.chunks[end]!.t <= to) end++;
    for (let i = this.shown; i < end; i++) this.put(this.chunks[i]!);
    this.shown = end;
    this.pos = to;
    this.scrubber.value = String(Math.round(to));
    this.mark();
  }

  play(): void {
    if (this.pos >= this.duration) this.seek(0);
    this.playing = true;
    setText(this.playBtn, 'Pause');
    this.last = performance.now();
    const step = (now: number) => {
      if (!this.playing) return;
      const speed = Number(this.speed.value) || 1;
      this.seek(this.pos + (now - this.last) * speed);
      this.last = now;
      if (this.pos >= this.duration) this.pause();
      else this.frame = requestAnimationFrame(step);
    };
    this.frame = requestAnimationFrame(step);
  }

  pause(): void {
    this.playing = false;
    cancelAnimationFrame(this.frame);
    setText(this.playBtn, 'Play');
  }

  dispose(): void {
    this.pause();
    this.term?.dispose();
  }

  private clear(): void {
    this.shown = 0;
    this.decoders.clear();
    this.term?.reset();
    if (this.pre) this.pre.textContent = '';
  }

  private put(c: Chunk): void {
    if (this.term) {
      this.pending++;
      this.term.write(c.bytes, () => {
        this.pending--;
        this.mark();
      });
      return;
    }
    let d = this.decoders.get(c.stream);
    if (!d) {
      d = new TextDecoder('utf-8');
      this.decoders.set(c.stream, d);
    }
    this.pre!.append(
      h('span', { class: 'out-note' }, `[${seconds(c.t)} ${c.stream}] `),
      h('span', { class: c.stream === 'stderr' ? 'stderr' : 'stdout' }, d.decode(c.bytes, { stream: true })),
    );
  }

  /** The clock, and what a test waits on: how many chunks are shown and whether the terminal has parsed them. */
  private mark(): void {
    setText(this.clock, `${seconds(this.pos)} / ${seconds(this.duration)}`);
    this.el.dataset.shown = String(this.shown);
    this.el.dataset.total = String(this.chunks.length);
    this.el.dataset.settled = this.pending === 0 ? 'true' : 'false';
  }
}
