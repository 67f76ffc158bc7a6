// The selected process: its facts, sandbox and policy, live output (the retained tail first, then live; earlier
// output on demand), a stdin box and Terminate. On a fleet host every action names the process's server, and the
// host forwards it there.
import type { MonitorOutputNotification } from '../../src/protocol/monitor.js';
import { b64ToBytes, fmtAgo, fmtBytes, fmtDuration, fmtTime, h, replace, textToB64 } from '../dom.js';
import { commandOf, type Row } from '../processTable.js';
import type { AppContext } from '../view.js';
import { badges, policyView, statePill } from './badges.js';
import { type OutputSink, PipeSink, TerminalSink } from './output.js';
import { usageText } from './usage.js';

/** How much earlier output one click reads back. */
const EARLIER_BYTES = 64 * 1024;

export class DetailPane {
  readonly el = h('div', { class: 'detail', 'data-testid': 'process-detail' });
  private readonly head = h('div', { class: 'detail-head' });
  private readonly facts = h('div', { class: 'detail-facts' });
  private readonly policy = h('div', { class: 'detail-policy' });
  private readonly outputBox = h('div', { class: 'output-box' });
  private readonly stdinRow: HTMLElement;
  private readonly sink: OutputSink;
  private lastSeq = 0;
  /** Live output was skipped (too fast): what is shown has gaps. */
  private gapped = false;
  private shown = -1;
  private disposed = false;
  private loading = true;
  private pending: MonitorOutputNotification[] = [];
  private readonly offOutput: () => void;
  private readonly stdinInput: HTMLInputElement;
  private readonly newline: HTMLInputElement;
  private readonly termBtn: HTMLButtonElement;

  constructor(
    private readonly ctx: AppContext,
    private proc: Row,
    onClose: () => void,
  ) {
    this.sink = proc.tty ? new TerminalSink((d) => void this.send(d, true)) : new PipeSink();
    this.termBtn = h(
      'button',
      { class: 'btn danger', 'data-testid': 'terminate', onclick: () => void this.terminate() },
      'Terminate',
    );
    this.stdinInput = h('input', {
      class: 'input mono',
      type: 'text',
      placeholder: proc.tty ? 'Type a line for the terminal…' : 'Text for stdin…',
      'aria-label': 'stdin',
      'data-testid': 'stdin',
      onkeydown: (e: KeyboardEvent) => {
        if (e.key === 'Enter') {
          e.preventDefault();
          void this.sendLine();
        }
      },
    });
    this.newline = h('input', { type: 'checkbox', checked: true });
    this.stdinRow = h(
      'div',
      { class: 'stdin-row' },
      this.stdinInput,
      h('label', { class: 'check small' }, this.newline, 'newline'),
      h('button', { class: 'btn', onclick: () => void this.sendLine() }, 'Send'),
      proc.tty
        ? h('button', { class: 'btn ghost', title: 'Ctrl-C', onclick: () => void this.send('\x03') }, '^C')
        : null,
      h(
        'button',
        { class: 'btn ghost', title: 'Ctrl-D (end of input)', onclick: () => void this.send('\x04') },
        '^D',
      ),
    );
    this.el.append(
      h(
        'div',
        { class: 'detail-bar' },
        h('button', { class: 'btn ghost small', onclick: onClose, title: 'Close' }, '✕'),
        this.head,
        this.termBtn,
      ),
      this.facts,
      this.policy,
      this.outputBox,
      this.stdinRow,
    );
    this.outputBox.appendChild(this.sink.el);
    this.offOutput = ctx.store.onOutput((n) => this.onOutput(n));
    this.update(proc);
    void this.load();
  }

  get key(): string {
    return this.proc.key;
  }

  /** The process as the host names it: its server (absent for the host's own), session and id. */
  private ref(): { server?: string; sessionId: string; processId: string } {
    const r = { sessionId: this.proc.sessionId, processId: this.proc.processId };
    return this.proc.server ? { server: this.proc.server, ...r } : r;
  }

  private async load(): Promise<void> {
    if (!this.proc.retained) {
      this.sink.note('(output no longer retained: the session expired)');
      this.loading = false;
      return;
    }
    try {
      // The tail comes with the answer; live chunks after it (higher seqs) are queued meanwhile.
      const r = await this.ctx.conn.request('monitor/follow', { ...this.ref(), follow: true });
      let chunks = r.chunks;
      if (!chunks) {
        // A server that does not send the tail with monitor/follow: read it.
        chunks = (await this.ctx.conn.request('monitor/read', { ...this.ref(), afterSeq: 0 })).chunks;
      }
      for (const c of chunks) {
        this.sink.write(c.stream, b64ToBytes(c.chunk), c.seq);
        this.lastSeq = c.seq;
      }
      this.earlier(r.earlier === true || (chunks[0] !== undefined && chunks[0].seq > 1));
    } catch (e) {
      this.sink.note(`(could not load output: ${(e as Error).message})`);
    }
    this.loading = false;
    for (const n of this.pending) this.onOutput(n);
    this.pending = [];
  }

  private earlier(available: boolean): void {
    this.sink.setEarlier(available, available ? () => void this.loadEarlier() : null);
  }

  /**
   * Earlier output, read back from what the server retains: if live output had gaps (too fast to send it all), the
   * view is first replaced by the newest retained stretch, without gaps; then each call pages back before it.
   */
  private async loadEarlier(): Promise<void> {
    const first = this.sink.firstSeq();
    const reset = this.gapped || first === null;
    const beforeSeq = reset ? this.lastSeq + 1 : first;
    if (beforeSeq <= 1) {
      this.earlier(false);
      return;
    }
    try {
      const r = await this.ctx.conn.request('monitor/read', {
        ...this.ref(),
        beforeSeq,
        maxBytes: EARLIER_BYTES,
      });
      if (r.chunks.length === 0) {
        this.earlier(false);
        this.sink.note('(no earlier output is retained)');
        return;
      }
      const pieces = r.chunks.map((c) => ({ seq: c.seq, stream: c.stream, bytes: b64ToBytes(c.chunk) }));
      if (reset) {
        this.gapped = false;
        this.sink.reset(pieces);
      } else this.sink.prepend(pieces);
      this.earlier(r.earlier === true);
    } catch (e) {
      this.ctx.toast(`Could not read earlier output: ${(e as Error).message}`, 'error');
    }
  }

  private onOutput(n: MonitorOutputNotification): void {
    if (this.disposed) return;
    const p = this.proc;
    if ((n.server ?? '') !== p.server || n.sessionId !== p.sessionId || n.processId !== p.processId) return;
    if (this.loading) {
      this.pending.push(n);
      return;
    }
    if (n.seq <= this.lastSeq) return;
    this.lastSeq = n.seq;
    if (n.skippedBytes) {
      this.gapped = true;
      this.sink.skipped(n.skippedBytes);
      this.earlier(true);
    }
    this.sink.write(n.stream, b64ToBytes(n.chunk), n.firstSeq ?? n.seq);
  }

  update(p: Row): void {
    const version = p.version + (this.ctx.store.isStale(p) ? 0.5 : 0);
    if (p === this.proc && version === this.shown) return;
    this.shown = version;
    this.proc = p;
    const running = p.state === 'running' && !this.ctx.store.isStale(p);
    const stdinOk = running && (p.tty || p.pipeStdin);
    this.termBtn.disabled = !running;
    this.stdinRow.classList.toggle('disabled', !stdinOk);
    this.stdinInput.disabled = !stdinOk;
    this.stdinInput.title = !p.tty && !p.pipeStdin ? 'stdin is /dev/null (started without pipeStdin)' : '';
    replace(
      this.head,
      h('div', { class: 'detail-title mono', title: commandOf(p) }, commandOf(p)),
      h(
        'div',
        { class: 'detail-sub' },
        statePill(p),
        ...badges(p),
        p.sandboxDenied ? h('span', { class: 'badge badge-denied' }, 'sandbox denied') : null,
        p.limitHit
          ? h(
              'span',
              { class: 'badge badge-denied', title: 'the command ran into its cgroup limit' },
              `${p.limitHit} limit hit`,
            )
          : null,
        p.usage
          ? h('span', { class: 'muted small', 'data-testid': 'process-usage' }, usageText(p.usage))
          : null,
        this.ctx.store.isStale(p)
          ? h(
              'span',
              { class: 'badge badge-stale', title: 'Its server is not reachable: last known state' },
              'stale',
            )
          : null,
      ),
    );
    const end = p.closedAt ?? p.exitedAt;
    const rows: [string, string | HTMLElement][] = [];
    if (this.ctx.store.fleet) rows.push(['Server', this.ctx.store.serverName(p.server)]);
    rows.push(
      ['Client', p.clientName],
      ['Session', h('code', { title: p.sessionId }, p.sessionId.slice(0, 8))],
      ['Process id', h('code', null, p.processId)],
      ['PID', String(p.pid || '–')],
      ['cwd', h('code', null, p.cwd)],
      ['Mode', p.tty ? 'PTY' : p.pipeStdin ? 'pipes, stdin open' : 'pipes'],
      ['Started', `${fmtTime(p.startedAt)} (${fmtAgo(p.startedAt)})`],
      ['Duration', end ? fmtDuration(end - p.startedAt) : 'running'],
      ['Exit code', p.exitCode === null ? '–' : String(p.exitCode)],
      ['Output', fmtBytes(p.bytesOut)],
    );
    if (p.metadata)
      for (const [k, v] of Object.entries(p.metadata))
        rows.push([k, typeof v === 'string' ? v : JSON.stringify(v)]);
    replace(
      this.facts,
      h(
        'dl',
        { class: 'kv kv4' },
        rows.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]),
      ),
      p.envKeys.length > 0
        ? h(
            'details',
            { class: 'env' },
            h(
              'summary',
              null,
              `Environment: ${p.envKeys.length} variable${p.envKeys.length === 1 ? '' : 's'} (values hidden)`,
            ),
            h('div', { class: 'env-keys mono' }, p.envKeys.join('  ')),
          )
        : null,
    );
    replace(this.policy, policyView(p));
  }

  private async terminate(): Promise<void> {
    try {
      const r = await this.ctx.conn.request('monitor/terminate', this.ref());
      this.ctx.toast(
        r.running ? `Terminated ${this.proc.processId}` : `${this.proc.processId} had already exited`,
      );
    } catch (e) {
      this.ctx.toast(`Terminate failed: ${(e as Error).message}`, 'error');
    }
  }

  private async sendLine(): Promise<void> {
    const text = this.stdinInput.value + (this.newline.checked ? (this.proc.tty ? '\r' : '\n') : '');
    if (text === '') return;
    if (await this.send(text)) this.stdinInput.value = '';
  }

  private async send(text: string, quiet = false): Promise<boolean> {
    try {
      const r = await this.ctx.conn.request('monitor/write', {
        ...this.ref(),
        chunk: textToB64(text),
      });
      if (r.status !== 'accepted') {
        if (!quiet) this.ctx.toast(`stdin: ${r.status}`, 'error');
        return false;
      }
      return true;
    } catch (e) {
      if (!quiet) this.ctx.toast(`Write failed: ${(e as Error).message}`, 'error');
      return false;
    }
  }

  dispose(): void {
    this.disposed = true;
    this.offOutput();
    this.sink.dispose();
    this.ctx.conn.request('monitor/follow', { ...this.ref(), follow: false }).catch(() => {});
  }
}
