// Processes: a live table of every session's processes, and a detail pane with live output (xterm.js for PTYs,
// stdout/stderr-coloured text for pipes), stdin, Terminate, the sandbox badge and the effective policy.
import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import type {
  MonitorOutputNotification,
  MonitorProcess,
  MonitorReadResult,
} from '../../src/protocol/monitor.js';
import {
  b64ToBytes,
  fmtAgo,
  fmtBytes,
  fmtDuration,
  fmtTime,
  h,
  replace,
  shellJoin,
  textToB64,
} from '../dom.js';
import { procKey } from '../store.js';
import type { AppContext, View } from '../view.js';

const BADGE_LABEL: Record<string, [string, string]> = {
  none: ['no sandbox', 'Runs with the full rights of the Corral host'],
  'linux-seccomp': ['linux-seccomp', 'Confined by Corral: bubblewrap + seccomp'],
  'macos-seatbelt': ['macos-seatbelt', 'Confined by Corral: Seatbelt profile'],
  'client-wrapped': ['client-wrapped', 'The client wrapped its own sandbox (codex-linux-sandbox launcher)'],
};

export function badge(b: string): HTMLElement {
  const [label, title] = BADGE_LABEL[b] ?? [b, ''];
  return h('span', { class: `badge badge-${b}`, title, 'data-badge': b }, label);
}

/** True when a 0.120–0.130 client wrapped the command and Corral unwrapped it into its own sandbox. */
function clientUnwrapped(p: MonitorProcess): boolean {
  return p.policy?.clientWrapped === true && p.policy?.unwrapped === true;
}

/**
 * The sandbox badge, plus a "client-wrapped, unwrapped" one when Corral unwrapped the client's launcher (`compact`:
 * a shorter label for the table).
 */
export function badges(p: MonitorProcess, compact = false): HTMLElement[] {
  const out = [badge(p.badge)];
  if (clientUnwrapped(p) && p.badge !== 'client-wrapped') {
    out.push(
      h(
        'span',
        {
          class: 'badge badge-client-wrapped',
          title:
            "The client wrapped the command in its codex-linux-sandbox launcher; Corral unwrapped it and enforces the client's policy itself",
          'data-badge-extra': 'client-unwrapped',
        },
        compact ? 'unwrapped' : 'client-wrapped, unwrapped',
      ),
    );
  }
  return out;
}

export function statePill(p: MonitorProcess): HTMLElement {
  const cls =
    p.state === 'running' ? 'running' : p.exitCode === 0 ? 'ok' : p.exitCode === null ? 'unknown' : 'failed';
  const text =
    p.state === 'running'
      ? 'running'
      : `${p.state === 'closed' ? 'exited' : 'exiting'} ${p.exitCode ?? ''}`.trim();
  return h('span', { class: `state state-${cls}`, 'data-state': p.state }, text);
}

/** Where an output chunk is shown: a terminal for PTYs, coloured text for pipes. */
interface OutputSink {
  readonly el: HTMLElement;
  write(stream: string, bytes: Uint8Array): void;
  note(text: string): void;
  dispose(): void;
}

const PTY_COLS = 80;

class TerminalSink implements OutputSink {
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
    this.term.write(bytes);
  }

  note(text: string): void {
    this.term.write(`\r\n\x1b[2m${text}\x1b[0m\r\n`);
  }

  dispose(): void {
    this.ro.disconnect();
    this.term.dispose();
  }
}

const MAX_PIPE_NODES = 4000;

class PipeSink implements OutputSink {
  readonly el = h('pre', { class: 'pipe-output', 'data-testid': 'pipe-output', tabindex: '0' });
  private readonly decoders = new Map<string, TextDecoder>();

  write(stream: string, bytes: Uint8Array): void {
    let d = this.decoders.get(stream);
    if (!d) {
      d = new TextDecoder('utf-8');
      this.decoders.set(stream, d);
    }
    const text = d.decode(bytes, { stream: true });
    if (text === '') return;
    const stick = this.el.scrollTop + this.el.clientHeight >= this.el.scrollHeight - 8;
    const last = this.el.lastElementChild as HTMLElement | null;
    if (last && last.dataset.stream === stream && (last.textContent?.length ?? 0) < 4096) last.append(text);
    else this.el.appendChild(h('span', { class: `out-${stream}`, 'data-stream': stream }, text));
    while (this.el.childElementCount > MAX_PIPE_NODES) this.el.firstElementChild?.remove();
    if (stick) this.el.scrollTop = this.el.scrollHeight;
  }

  note(text: string): void {
    this.el.appendChild(h('span', { class: 'out-note' }, `\n${text}\n`));
  }

  dispose(): void {}
}

class DetailPane {
  readonly el = h('div', { class: 'detail', 'data-testid': 'process-detail' });
  private readonly head = h('div', { class: 'detail-head' });
  private readonly facts = h('div', { class: 'detail-facts' });
  private readonly policy = h('div', { class: 'detail-policy' });
  private readonly outputBox = h('div', { class: 'output-box' });
  private readonly stdinRow: HTMLElement;
  private readonly sink: OutputSink;
  private lastSeq = 0;
  private sig = '';
  private disposed = false;
  private loading = true;
  private pending: MonitorOutputNotification[] = [];
  private readonly offOutput: () => void;
  private readonly stdinInput: HTMLInputElement;
  private readonly newline: HTMLInputElement;
  private readonly termBtn: HTMLButtonElement;

  constructor(
    private readonly ctx: AppContext,
    private proc: MonitorProcess,
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
    return procKey(this.proc);
  }

  private follow(on: boolean): Promise<unknown> {
    return this.ctx.conn.request('monitor/follow', {
      sessionId: this.proc.sessionId,
      processId: this.proc.processId,
      follow: on,
    });
  }

  private async load(): Promise<void> {
    if (!this.proc.retained) {
      this.sink.note('(output no longer retained: the session expired)');
      this.loading = false;
      return;
    }
    try {
      // Live chunks first (queued while loading), then the retained history: no gap, duplicates skipped by seq.
      await this.follow(true);
      const r = await this.ctx.conn.request<MonitorReadResult>('monitor/read', {
        sessionId: this.proc.sessionId,
        processId: this.proc.processId,
        afterSeq: 0,
      });
      if (r.chunks.length > 0 && r.chunks[0]!.seq > 1)
        this.sink.note('(older output was dropped: showing the last 1 MiB)');
      for (const c of r.chunks) {
        this.sink.write(c.stream, b64ToBytes(c.chunk));
        this.lastSeq = c.seq;
      }
    } catch (e) {
      this.sink.note(`(could not load output: ${(e as Error).message})`);
    }
    this.loading = false;
    for (const n of this.pending) this.onOutput(n);
    this.pending = [];
  }

  private onOutput(n: MonitorOutputNotification): void {
    if (this.disposed) return;
    if (n.sessionId !== this.proc.sessionId || n.processId !== this.proc.processId) return;
    if (this.loading) {
      this.pending.push(n);
      return;
    }
    if (n.seq <= this.lastSeq) return;
    this.lastSeq = n.seq;
    this.sink.write(n.stream, b64ToBytes(n.chunk));
  }

  update(p: MonitorProcess): void {
    const sig = JSON.stringify(p);
    if (sig === this.sig) return;
    this.sig = sig;
    this.proc = p;
    const running = p.state === 'running';
    this.termBtn.disabled = !running;
    this.stdinRow.classList.toggle('disabled', !running || (!p.tty && !p.pipeStdin));
    this.stdinInput.disabled = !running || (!p.tty && !p.pipeStdin);
    this.stdinInput.title = !p.tty && !p.pipeStdin ? 'stdin is /dev/null (started without pipeStdin)' : '';
    replace(
      this.head,
      h('div', { class: 'detail-title mono', title: shellJoin(p.argv) }, shellJoin(p.argv)),
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
      ),
    );
    const end = p.closedAt ?? p.exitedAt;
    const rows: [string, string | HTMLElement][] = [
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
    ];
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
      const r = await this.ctx.conn.request<{ running: boolean }>('monitor/terminate', {
        sessionId: this.proc.sessionId,
        processId: this.proc.processId,
      });
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
      const r = await this.ctx.conn.request<{ status: string }>('monitor/write', {
        sessionId: this.proc.sessionId,
        processId: this.proc.processId,
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
    this.follow(false).catch(() => {});
  }
}

/** The effective policy: writable roots (with their read-only carve-outs), network mode, and the rest. */
export function policyView(p: MonitorProcess): HTMLElement {
  if (p.badge === 'client-wrapped') {
    const flags: [string, string][] = [];
    for (let i = 1; i < p.argv.length; i++) {
      const a = p.argv[i]!;
      if (a === '--') break;
      if (a.startsWith('--') && i + 1 < p.argv.length) flags.push([a.slice(2), p.argv[++i]!]);
    }
    return h(
      'div',
      { class: 'policy-card' },
      h('h4', null, 'Sandbox applied by the client'),
      h(
        'p',
        { class: 'muted small' },
        'The client started its own codex-linux-sandbox launcher; Corral runs it as sent.',
      ),
      typeof p.policy?.unwrapReason === 'string'
        ? h(
            'p',
            { class: 'muted small', 'data-testid': 'unwrap-reason' },
            `Not unwrapped: ${p.policy.unwrapReason}`,
          )
        : null,
      h(
        'dl',
        { class: 'kv' },
        flags.map(([k, v]) => [h('dt', null, k), h('dd', { class: 'mono wrap' }, v)]),
      ),
    );
  }
  const s = p.policy;
  const proxy = s?.proxy as { httpPort?: number; socksPort?: number | null } | undefined;
  const warnings = Array.isArray(s?.warnings) ? (s.warnings as unknown[]).map(String) : [];
  if (!s || p.sandboxType === 'none') {
    // No sandbox: the process has the host's rights; a managed proxy (if any) is advisory for it.
    return h(
      'div',
      { class: 'policy-card', 'data-testid': 'policy' },
      h('h4', null, 'Policy'),
      warnings.length > 0
        ? h(
            'ul',
            { class: 'warnings' },
            warnings.map((w) => h('li', null, w)),
          )
        : null,
      h(
        'p',
        { class: 'muted small' },
        proxy?.httpPort
          ? `No sandbox: full access to the disk. Network through the managed proxy (HTTP 127.0.0.1:${proxy.httpPort}${
              proxy.socksPort ? `, SOCKS5 127.0.0.1:${proxy.socksPort}` : ''
            }), which the process could bypass.`
          : 'No sandbox: full access to the disk and the network.',
      ),
    );
  }
  const wr = Array.isArray(s.writableRoots) ? (s.writableRoots as unknown[]) : null;
  const roots = wr
    ? h(
        'ul',
        { class: 'roots' },
        wr.map((w) => {
          const o = (typeof w === 'string' ? { root: w } : w) as { root?: string; readOnly?: string[] };
          return h(
            'li',
            null,
            h('code', null, o.root ?? JSON.stringify(w)),
            o.readOnly && o.readOnly.length > 0
              ? h('span', { class: 'muted small' }, ` read-only: ${o.readOnly.join(', ')}`)
              : null,
          );
        }),
      )
    : null;
  const net = s.network ?? s.networkMode ?? null;
  const rest = Object.entries(s).filter(
    ([k]) =>
      k !== 'writableRoots' && k !== 'network' && k !== 'networkMode' && k !== 'warnings' && k !== 'proxy',
  );
  return h(
    'div',
    { class: 'policy-card', 'data-testid': 'policy' },
    h('h4', null, 'Effective policy'),
    clientUnwrapped(p)
      ? h(
          'p',
          { class: 'muted small', 'data-testid': 'client-unwrapped' },
          "The client wrapped this command in its own codex-linux-sandbox launcher; Corral unwrapped it and enforces the client's policy in its own sandbox.",
        )
      : null,
    warnings.length > 0
      ? h(
          'ul',
          { class: 'warnings' },
          warnings.map((w) => h('li', null, w)),
        )
      : null,
    h(
      'dl',
      { class: 'kv' },
      h('dt', null, 'Writable roots'),
      h('dd', null, roots ?? (s.fullWrite ? 'everything' : 'none')),
      h('dt', null, 'Network'),
      h(
        'dd',
        null,
        h('span', { class: `net net-${String(net)}` }, net === null ? '–' : String(net)),
        s.managedNetwork || proxy?.httpPort
          ? h(
              'span',
              { class: 'muted small' },
              proxy?.httpPort
                ? ` (through the managed proxy, 127.0.0.1:${proxy.httpPort})`
                : ' (through the managed proxy)',
            )
          : null,
      ),
      rest.map(([k, v]) => [
        h('dt', null, k),
        h('dd', { class: 'mono wrap' }, typeof v === 'string' ? v : JSON.stringify(v)),
      ]),
    ),
  );
}

export class ProcessesView implements View {
  readonly el = h('section', { 'aria-label': 'Processes' });
  private readonly tbody = h('tbody');
  private readonly empty = h('div', { class: 'empty' });
  private readonly clientSel = h('select', {
    class: 'input',
    'aria-label': 'Filter by client',
    'data-testid': 'filter-client',
  });
  private readonly stateSel = h(
    'select',
    { class: 'input', 'aria-label': 'Filter by state', 'data-testid': 'filter-state' },
    h('option', { value: '' }, 'All states'),
    h('option', { value: 'running' }, 'Running'),
    h('option', { value: 'exited' }, 'Finished'),
    h('option', { value: 'failed' }, 'Failed (non-zero)'),
  );
  private readonly search = h('input', {
    class: 'input',
    type: 'search',
    placeholder: 'Search command, cwd, id…',
    'aria-label': 'Search',
  });
  private readonly sortBtn: HTMLButtonElement;
  private readonly droppedNote = h('span', { class: 'muted small' });
  private readonly split = h('div', { class: 'split' });
  private readonly sessionsStrip = h('div', { class: 'sessions-strip', 'data-testid': 'detached-sessions' });
  private newestFirst = true;
  private detail: DetailPane | null = null;
  private selected: string | null = null;
  private scheduled = false;

  constructor(private readonly ctx: AppContext) {
    this.sortBtn = h(
      'button',
      { class: 'btn ghost', onclick: () => this.toggleSort(), 'data-testid': 'sort' },
      'Newest first ↓',
    );
    for (const el of [this.clientSel, this.stateSel]) el.addEventListener('change', () => this.render());
    this.search.addEventListener('input', () => this.render());
    const table = h(
      'table',
      { class: 'table proc-table', 'data-testid': 'process-table' },
      h(
        'thead',
        null,
        h(
          'tr',
          null,
          h('th', null, 'State'),
          h('th', null, 'Command'),
          h('th', null, 'Client'),
          h('th', null, 'Sandbox'),
          h('th', { class: 'num col-opt' }, 'PID'),
          h('th', { class: 'col-opt' }, 'Started'),
          h('th', { class: 'num col-opt' }, 'Output'),
        ),
      ),
      this.tbody,
    );
    this.split.append(h('div', { class: 'table-wrap' }, table, this.empty));
    this.el.append(
      h(
        'div',
        { class: 'toolbar' },
        h('h2', null, 'Processes'),
        h('div', { class: 'grow' }),
        this.droppedNote,
        this.search,
        this.clientSel,
        this.stateSel,
        this.sortBtn,
      ),
      this.sessionsStrip,
      this.split,
    );
    setInterval(() => this.renderSessions(), 1000);
    ctx.store.on((c) => {
      if (c === 'processes' || c === 'sessions' || c === 'connection' || c === 'output-bytes')
        this.schedule();
      if (c === 'sessions' || c === 'processes') this.renderSessions();
      if (c === 'dropped') this.renderDropped();
      // After a reconnect the new subscription follows nothing: reopen the shown process.
      if (c === 'snapshot' && this.selected) {
        const key = this.selected;
        this.selected = null;
        this.select(key);
      }
    });
    setInterval(() => this.schedule(), 5000);
    this.render();
  }

  private toggleSort(): void {
    this.newestFirst = !this.newestFirst;
    this.sortBtn.textContent = this.newestFirst ? 'Newest first ↓' : 'Oldest first ↑';
    this.render();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      this.render();
    });
  }

  /** Detached sessions: their countdown to the kill, and a button to kill them now (protocol.md §8). */
  private renderSessions(): void {
    const store = this.ctx.store;
    const detached = [...store.sessions.values()].filter((s) => !s.attached);
    this.sessionsStrip.hidden = detached.length === 0;
    if (detached.length === 0) return;
    const now = Date.now() + store.skew;
    replace(
      this.sessionsStrip,
      detached.map((s) => {
        let running = 0;
        for (const p of store.processes.values())
          if (p.sessionId === s.sessionId && p.state === 'running') running++;
        const left = s.expiresAt !== null ? Math.max(0, Math.round((s.expiresAt - now) / 1000)) : null;
        return h(
          'div',
          { class: 'session-chip', 'data-session': s.sessionId },
          h('span', { class: 'status-dot', 'data-state': 'disconnected' }),
          h('strong', null, s.clientName),
          h(
            'span',
            { class: 'muted' },
            ` disconnected · ${running} running · `,
            left !== null ? `killed in ${left}s unless it resumes` : 'waiting for resume',
          ),
          h(
            'button',
            {
              class: 'btn small danger',
              onclick: () =>
                this.ctx.conn
                  .request<{ killed: number }>('monitor/killSession', { sessionId: s.sessionId })
                  .then((r) => this.ctx.toast(`Killed ${r.killed} process(es) of ${s.clientName}`))
                  .catch((e: Error) => this.ctx.toast(`Kill failed: ${e.message}`, 'error')),
            },
            'Kill now',
          ),
        );
      }),
    );
  }

  private renderDropped(): void {
    const d = this.ctx.store.dropped;
    this.droppedNote.textContent =
      d.output > 0
        ? `${d.output} live output chunks skipped (slow connection): reopen a process to reload`
        : '';
  }

  select(key: string | null): void {
    if (key === this.selected && this.detail) return;
    this.detail?.dispose();
    this.detail?.el.remove();
    this.detail = null;
    this.selected = key;
    const p = key ? this.ctx.store.processes.get(key) : undefined;
    if (p) {
      this.detail = new DetailPane(this.ctx, p, () => this.select(null));
      this.split.appendChild(this.detail.el);
    }
    this.split.classList.toggle('with-detail', this.detail !== null);
    this.render();
  }

  private render(): void {
    const store = this.ctx.store;
    const all = [...store.processes.values()];
    // client filter options
    const clients = [...new Set(all.map((p) => p.clientName))].sort();
    const cur = this.clientSel.value;
    const opts = ['', ...clients];
    if (
      this.clientSel.options.length !== opts.length ||
      opts.some((c, i) => this.clientSel.options[i]?.value !== c)
    ) {
      replace(
        this.clientSel,
        opts.map((c) => h('option', { value: c, selected: c === cur }, c === '' ? 'All clients' : c)),
      );
    }
    const q = this.search.value.trim().toLowerCase();
    const state = this.stateSel.value;
    const rows = all.filter((p) => {
      if (this.clientSel.value && p.clientName !== this.clientSel.value) return false;
      if (state === 'running' && p.state !== 'running') return false;
      if (state === 'exited' && p.state === 'running') return false;
      if (state === 'failed' && (p.exitCode === null || p.exitCode === 0)) return false;
      if (q && !`${p.argv.join(' ')} ${p.cwd} ${p.processId} ${p.clientName}`.toLowerCase().includes(q))
        return false;
      return true;
    });
    rows.sort((a, b) => (this.newestFirst ? b.startedAt - a.startedAt : a.startedAt - b.startedAt));
    const now = Date.now() + store.skew;
    replace(
      this.tbody,
      rows.map((p) => {
        const key = procKey(p);
        return h(
          'tr',
          {
            class: key === this.selected ? 'selected' : '',
            'data-key': key,
            'data-process-id': p.processId,
            tabindex: '0',
            onclick: () => this.select(key),
            onkeydown: (e: KeyboardEvent) => {
              if (e.key === 'Enter') this.select(key);
            },
          },
          h('td', null, statePill(p)),
          h('td', { class: 'cmd mono', title: shellJoin(p.argv) }, shellJoin(p.argv)),
          h(
            'td',
            null,
            p.clientName,
            store.selfSession === p.sessionId
              ? h('span', { class: 'muted small self-tag' }, ' (panel)')
              : null,
          ),
          h('td', null, ...badges(p, true)),
          h('td', { class: 'num mono col-opt' }, p.pid ? String(p.pid) : '–'),
          h(
            'td',
            { class: 'col-opt', title: new Date(p.startedAt).toLocaleString() },
            fmtAgo(p.startedAt, now),
          ),
          h('td', { class: 'num col-opt' }, fmtBytes(p.bytesOut)),
        );
      }),
    );
    this.empty.hidden = rows.length > 0;
    replace(
      this.empty,
      all.length === 0
        ? [
            h('div', { class: 'empty-title' }, 'No processes yet'),
            h(
              'div',
              { class: 'muted' },
              'Point an agent at the exec-server URL above, or use “Run a command”.',
            ),
          ]
        : h('div', { class: 'muted' }, 'No process matches the filters.'),
    );
    if (this.detail) {
      const p = store.processes.get(this.detail.key);
      if (p) this.detail.update(p);
    }
  }
}
