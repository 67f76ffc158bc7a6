// A process's output in the detail pane: xterm.js for PTYs, stdout/stderr-coloured text for pipes. Live output is
// written once per frame; the pipe view keeps a bounded amount of text in the DOM (the newest), shows earlier
// output on demand (read back from the server's retained output), and stops following while the user reads above.
import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import { fmtBytes, h, perFrame } from '../dom.js';

export interface OutputPiece {
  seq: number;
  stream: string;
  bytes: Uint8Array;
}

export interface OutputSink {
  readonly el: HTMLElement;
  /** Live output, in order (`seq`: of its first chunk). */
  write(stream: string, bytes: Uint8Array, seq: number): void;
  /** Older output read back, in order, to go above what is shown. */
  prepend(chunks: OutputPiece[]): void;
  /** Shows these chunks instead of what is shown (a contiguous stretch, read back), then live output after them. */
  reset(chunks: OutputPiece[]): void;
  /** The seq of the oldest output shown, if known. */
  firstSeq(): number | null;
  /** Live output that was not sent (too fast): a marker where it would be. */
  skipped(bytes: number): void;
  /** Whether an "earlier output" control is shown, and what it does. */
  setEarlier(available: boolean, load: (() => void) | null): void;
  note(text: string): void;
  dispose(): void;
}

const PTY_COLS = 80;

export class TerminalSink implements OutputSink {
  readonly el = h('div', { class: 'term', 'data-testid': 'xterm' });
  private readonly term: Terminal;
  private readonly fit = new FitAddon();
  private readonly ro: ResizeObserver;

  constructor(onInput: (data: string) => void) {
    const dark = matchMedia('(prefers-color-scheme: dark)').matches;
    this.term = new Terminal({
      cols: PTY_COLS,
      convertEol: false,
      scrollback: 5000,
      fontSize: 13,
      fontFamily: 'ui-monospace, "SFMono-Regular", "JetBrains Mono", Menlo, Consolas, monospace',
      cursorBlink: false,
      theme: dark
        ? { background: '#0b0d12', foreground: '#d7dae0', cursor: '#8ab4ff', selectionBackground: '#2a3550' }
        : { background: '#fbfbfd', foreground: '#1d2330', cursor: '#3559c7', selectionBackground: '#c9d6ff' },
    });
    this.term.loadAddon(this.fit);
    this.term.open(this.el);
    this.term.onData(onInput);
    // The server's PTYs are 80 columns wide (the protocol has no resize): keep that width so wrapping and
    // full-screen programs render as the process drew them; only the height follows the pane.
    this.ro = new ResizeObserver(() => {
      const d = this.fit.proposeDimensions();
      if (d && Number.isFinite(d.rows) && d.rows > 0) this.term.resize(PTY_COLS, Math.max(5, d.rows));
    });
    this.ro.observe(this.el);
  }

  write(_stream: string, bytes: Uint8Array): void {
    // xterm parses in time slices of its own: a flood does not block the page.
    this.term.write(bytes);
  }

  prepend(): void {}

  reset(): void {}

  firstSeq(): null {
    return null;
  }

  skipped(bytes: number): void {
    this.term.write(`\r\n\x1b[2m⋯ ${fmtBytes(bytes)} not shown live ⋯\x1b[0m\r\n`);
  }

  setEarlier(): void {}

  note(text: string): void {
    this.term.write(`\r\n\x1b[2m${text}\x1b[0m\r\n`);
  }

  dispose(): void {
    this.ro.disconnect();
    this.term.dispose();
  }
}

/** Text kept in the DOM of a pipe view (the newest). */
const MAX_CHARS = 160 * 1024;
const SPAN_CHARS = 4096;

interface Piece {
  stream: string;
  text: string;
  /** The seq of the chunk it starts with (none for markers). */
  seq: number | null;
}

export class PipeSink implements OutputSink {
  readonly el = h('div', { class: 'pipe-box' });
  private readonly pre = h('pre', { class: 'pipe-output live', 'data-testid': 'pipe-output', tabindex: '0' });
  private readonly earlierBtn = h(
    'button',
    { class: 'btn small ghost pipe-earlier', hidden: true, 'data-testid': 'output-earlier' },
    '⇡ Earlier output',
  );
  private readonly latestBtn = h(
    'button',
    { class: 'btn small pipe-latest', hidden: true, 'data-testid': 'output-latest' },
    '⇣ Latest output',
  );
  private readonly decoders = new Map<string, TextDecoder>();
  /** Live text not yet in the DOM (flushed once per frame). */
  private queue: Piece[] = [];
  private queued = 0;
  /** While the user reads above the bottom: the newest live text, held back (bounded). */
  private held: Piece[] = [];
  private heldChars = 0;
  private chars = 0;
  private following = true;
  /** Where the view last scrolled itself (to the bottom). */
  private autoTop = 0;
  private loadEarlier: (() => void) | null = null;

  constructor() {
    this.el.append(this.earlierBtn, this.pre, this.latestBtn);
    this.earlierBtn.addEventListener('click', () => this.loadEarlier?.());
    this.latestBtn.addEventListener('click', () => this.jumpToLatest());
    // Following stops when the user scrolls up (above where the view last put itself), not when output that grew
    // meanwhile leaves the bottom below the view: scroll events come after the writes that caused them.
    this.pre.addEventListener('scroll', () => {
      const top = this.pre.scrollTop;
      const atBottom = top + this.pre.clientHeight >= this.pre.scrollHeight - 8;
      if (atBottom && !this.following && this.held.length === 0) this.following = true;
      else if (!atBottom && this.following && top < this.autoTop - 4) this.following = false;
      this.latestBtn.hidden = this.following && this.held.length === 0;
    });
  }

  private decode(stream: string, bytes: Uint8Array): string {
    let d = this.decoders.get(stream);
    if (!d) {
      d = new TextDecoder('utf-8');
      this.decoders.set(stream, d);
    }
    return d.decode(bytes, { stream: true });
  }

  write(stream: string, bytes: Uint8Array, seq: number): void {
    const text = this.decode(stream, bytes);
    if (text === '') return;
    this.queue.push({ stream, text, seq });
    this.queued += text.length;
    // Only the newest MAX_CHARS can end up shown: drop older queued text at once.
    while (this.queued > MAX_CHARS && this.queue.length > 1) this.queued -= this.queue.shift()!.text.length;
    this.schedule();
  }

  skipped(bytes: number): void {
    this.queue.push({ stream: 'skip', text: `⋯ ${fmtBytes(bytes)} not shown live ⋯\n`, seq: null });
    this.schedule();
  }

  setEarlier(available: boolean, load: (() => void) | null): void {
    this.loadEarlier = load;
    this.earlierBtn.hidden = !available;
  }

  private readonly schedule = perFrame(() => this.flush());

  private flush(): void {
    const pieces = this.queue;
    this.queue = [];
    this.queued = 0;
    if (!this.following) {
      for (const p of pieces) {
        this.held.push(p);
        this.heldChars += p.text.length;
      }
      while (this.heldChars > MAX_CHARS && this.held.length > 1)
        this.heldChars -= this.held.shift()!.text.length;
      this.latestBtn.hidden = false;
      this.latestBtn.textContent = `⇣ Latest output (${fmtBytes(this.heldChars)} new)`;
      return;
    }
    this.append(pieces);
    this.trimTop();
    this.toBottom();
  }

  private toBottom(): void {
    this.pre.scrollTop = this.pre.scrollHeight;
    this.autoTop = this.pre.scrollTop;
  }

  private append(pieces: Piece[]): void {
    for (const p of pieces) {
      const last = this.pre.lastElementChild as HTMLElement | null;
      if (p.stream === 'skip' && last?.dataset.stream === 'skip') {
        last.textContent = p.text;
        continue;
      }
      if (
        last &&
        last.dataset.stream === p.stream &&
        (last.textContent?.length ?? 0) + p.text.length <= SPAN_CHARS
      )
        last.append(p.text);
      else this.pre.appendChild(this.span(p));
      this.chars += p.text.length;
    }
  }

  /** Keeps the DOM within MAX_CHARS: the oldest text goes (it can be read back with "Earlier output"). */
  private trimTop(): void {
    let trimmed = false;
    while (this.chars > MAX_CHARS && this.pre.childElementCount > 1) {
      const first = this.pre.firstElementChild!;
      this.chars -= first.textContent?.length ?? 0;
      first.remove();
      trimmed = true;
    }
    if (trimmed && this.loadEarlier) this.earlierBtn.hidden = false;
  }

  private jumpToLatest(): void {
    const held = this.held;
    this.held = [];
    this.heldChars = 0;
    if (held.length > 0) {
      this.pre.replaceChildren();
      this.chars = 0;
      this.append(held);
      if (this.loadEarlier) this.earlierBtn.hidden = false;
    }
    this.following = true;
    this.latestBtn.hidden = true;
    this.toBottom();
  }

  private span(p: Piece): HTMLElement {
    return h(
      'span',
      { class: `out-${p.stream}`, 'data-stream': p.stream, 'data-seq': p.seq ?? null },
      p.text,
    );
  }

  firstSeq(): number | null {
    for (const el of this.pre.children) {
      const seq = (el as HTMLElement).dataset.seq;
      if (seq !== undefined) return Number(seq);
    }
    return null;
  }

  reset(chunks: OutputPiece[]): void {
    this.queue = [];
    this.queued = 0;
    this.held = [];
    this.heldChars = 0;
    this.pre.replaceChildren();
    this.chars = 0;
    this.append(
      chunks.map((c) => ({ stream: c.stream, text: new TextDecoder('utf-8').decode(c.bytes), seq: c.seq })),
    );
    this.following = true;
    this.latestBtn.hidden = true;
    this.toBottom();
  }

  prepend(chunks: OutputPiece[]): void {
    const frag = document.createDocumentFragment();
    let added = 0;
    for (const c of chunks) {
      const text = new TextDecoder('utf-8').decode(c.bytes);
      frag.appendChild(this.span({ stream: c.stream, text, seq: c.seq }));
      added += text.length;
    }
    const before = this.pre.scrollHeight;
    this.pre.insertBefore(frag, this.pre.firstChild);
    this.chars += added;
    // Stay on what the user was reading; keep the DOM bounded by dropping the newest, held back for "Latest".
    this.pre.scrollTop += this.pre.scrollHeight - before;
    this.autoTop = this.pre.scrollTop;
    if (this.chars > MAX_CHARS) {
      this.following = false;
      while (this.chars > MAX_CHARS && this.pre.childElementCount > 1) {
        const last = this.pre.lastElementChild as HTMLElement;
        this.chars -= last.textContent?.length ?? 0;
        this.held.unshift({
          stream: last.dataset.stream ?? 'stdout',
          text: last.textContent ?? '',
          seq: last.dataset.seq !== undefined ? Number(last.dataset.seq) : null,
        });
        this.heldChars += last.textContent?.length ?? 0;
        last.remove();
      }
      while (this.heldChars > MAX_CHARS && this.held.length > 1)
        this.heldChars -= this.held.shift()!.text.length;
      this.latestBtn.hidden = false;
      this.latestBtn.textContent = `⇣ Latest output (${fmtBytes(this.heldChars)})`;
    }
  }

  note(text: string): void {
    this.pre.appendChild(h('span', { class: 'out-note' }, `\n${text}\n`));
  }

  dispose(): void {}
}
