// History: the audit trail the host keeps on disk (audit/query, audit/process, audit/info), so it survives
// restarts. Search and filters over processes, network decisions, approvals, file changes and sessions; a process's
// detail with its stored output, its network decisions and the files its session changed while it ran; what the
// database keeps (retention). Everything shown comes from the server: this view only formats it.
import type {
  AuditApprovalItem,
  AuditEventType,
  AuditFsItem,
  AuditInfoResult,
  AuditItem,
  AuditNetworkItem,
  AuditProcessItem,
  AuditProcessResult,
  AuditQueryParams,
  AuditQueryResult,
  AuditSessionItem,
} from '../../src/protocol/audit.js';
import { fmtBytes, h, replace, shellJoin } from '../dom.js';
import type { AppContext, View } from '../view.js';
import { exitText, processDetail, when } from './historyDetail.js';
import { ReplayView } from './replay.js';
import { byCpu, cpuCell } from './usage.js';

const PAGE = 100;

const SINCE: [string, string, number | null][] = [
  ['all', 'All kept', null],
  ['1h', 'Last hour', 3_600_000],
  ['24h', 'Last 24 hours', 86_400_000],
  ['7d', 'Last 7 days', 7 * 86_400_000],
];

function option(value: string, label: string): HTMLOptionElement {
  return h('option', { value }, label);
}

function exitClass(p: AuditProcessItem): string {
  if (p.exitedAt === null) return 'unknown';
  return p.exitCode === 0 ? 'ok' : 'failed';
}

export class HistoryView implements View {
  readonly el = h('section', { 'aria-label': 'History' });
  private readonly search = h('input', {
    class: 'input grow',
    type: 'search',
    placeholder: 'Search command, cwd, host or path…',
    'aria-label': 'Search the history',
    'data-testid': 'history-search',
  });
  private readonly type = h(
    'select',
    { class: 'input', 'aria-label': 'What to list', 'data-testid': 'history-type' },
    option('process', 'Processes'),
    option('network', 'Network decisions'),
    option('approval', 'Approvals'),
    option('fs', 'File changes'),
    option('session', 'Sessions'),
  );
  private readonly since = h(
    'select',
    { class: 'input', 'aria-label': 'Time range', 'data-testid': 'history-since' },
    ...SINCE.map(([v, l]) => option(v, l)),
  );
  private readonly status = h(
    'select',
    { class: 'input', 'aria-label': 'Exit status', 'data-testid': 'history-status' },
    option('', 'Any exit'),
    option('success', 'Succeeded'),
    option('failure', 'Failed'),
    option('signal', 'Killed by a signal'),
    option('denied', 'Sandbox denied'),
    option('running', 'No exit recorded'),
  );
  private readonly decision = h('select', {
    class: 'input',
    'aria-label': 'Decision',
    'data-testid': 'history-decision',
  });
  private readonly client = h('input', {
    class: 'input',
    type: 'search',
    placeholder: 'Client',
    'aria-label': 'Client name',
    'data-testid': 'history-client',
    size: 10,
  });
  private readonly retention = h('div', {
    class: 'muted small history-retention',
    'data-testid': 'history-retention',
  });
  private readonly notice = h('div', { class: 'notice', hidden: true, 'data-testid': 'history-notice' });
  /** Set by following a receipt's link: only the rows of that approval prompt (network and approval lists). */
  private correlation: string | null = null;
  private readonly correlationChip = h('span', {
    class: 'badge',
    hidden: true,
    'data-testid': 'history-correlation',
  });
  private readonly head = h('thead');
  private readonly body = h('tbody');
  private readonly more = h(
    'button',
    { class: 'btn small', hidden: true, 'data-testid': 'history-more', onclick: () => void this.load(true) },
    'Load older',
  );
  private readonly split = h('div', { class: 'split' });
  private readonly detail = h('div', { class: 'detail', hidden: true, 'data-testid': 'history-detail' });
  private replayView: ReplayView | null = null;
  private items: AuditItem[] = [];
  /** The process list ordered by CPU used (the CPU header toggles it). */
  private cpuOrder = false;
  private cursor: string | null = null;
  private selected: string | null = null;
  private generation = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private visible = false;
  private connected = false;

  constructor(private readonly ctx: AppContext) {
    const refresh = () => this.refreshSoon(0);
    this.search.addEventListener('input', () => this.refreshSoon(250));
    this.client.addEventListener('input', () => this.refreshSoon(250));
    for (const s of [this.since, this.status, this.decision]) s.addEventListener('change', refresh);
    this.type.addEventListener('change', () => {
      this.setCorrelation(null);
      this.selected = null;
      this.detail.hidden = true;
      this.split.classList.remove('with-detail');
      this.decisionOptions();
      refresh();
    });
    this.decisionOptions();
    this.split.append(
      h(
        'div',
        { class: 'table-wrap' },
        h('table', { class: 'table proc-table', 'data-testid': 'history-table' }, this.head, this.body),
        h('div', { class: 'history-more' }, this.more),
      ),
      this.detail,
    );
    this.el.append(
      h(
        'div',
        { class: 'toolbar' },
        h('h2', null, 'History'),
        this.search,
        this.type,
        this.since,
        this.status,
        this.decision,
        this.client,
        this.correlationChip,
        h('button', { class: 'btn small', onclick: refresh, 'data-testid': 'history-refresh' }, 'Refresh'),
      ),
      this.retention,
      this.notice,
      this.split,
    );
    ctx.store.on((c) => {
      if (c !== 'connection') return;
      const now = ctx.conn.state === 'connected';
      if (now && !this.connected && this.visible) this.refreshSoon(0);
      this.connected = now;
    });
  }

  show(): void {
    this.visible = true;
    this.refreshSoon(0);
  }

  hide(): void {
    this.visible = false;
  }

  private decisionOptions(): void {
    const t = this.type.value as AuditEventType;
    const opts: [string, string][] =
      t === 'network'
        ? [
            ['', 'Any decision'],
            ['allow', 'Allowed'],
            ['deny', 'Denied'],
            ['ask', 'Asked, unanswered'],
          ]
        : t === 'approval'
          ? [
              ['', 'Any outcome'],
              ['allowOnce', 'Allowed once'],
              ['allowProcess', 'Allowed for the process'],
              ['allowSession', 'Allowed for the session'],
              ['deny', 'Denied'],
              ['timeout', 'Timed out'],
              ['requested', 'Requested'],
            ]
          : t === 'fs'
            ? [
                ['', 'Any outcome'],
                ['allowed', 'Done'],
                ['refused', 'Refused by the sandbox'],
                ['failed', 'Failed'],
              ]
            : [];
    replace(this.decision, ...opts.map(([v, l]) => option(v, l)));
    this.decision.hidden = opts.length === 0;
    this.status.hidden = t !== 'process';
  }

  /** Shows only the rows tied to one approval prompt (null: all), with a chip that clears it. */
  private setCorrelation(id: string | null): void {
    this.correlation = id;
    this.correlationChip.hidden = id === null;
    replace(
      this.correlationChip,
      ...(id === null
        ? []
        : [
            `prompt ${id.slice(0, 8)} `,
            h(
              'button',
              { class: 'btn small', title: 'Show every row', onclick: () => this.follow(null, null) },
              '×',
            ),
          ]),
    );
  }

  /** Follows a receipt's link: the other list (network ↔ approval) filtered to the same correlation id. */
  private follow(type: 'network' | 'approval' | null, id: string | null): void {
    if (type !== null) {
      this.type.value = type;
      this.selected = null;
      this.detail.hidden = true;
      this.split.classList.remove('with-detail');
      this.decisionOptions();
    }
    this.setCorrelation(id);
    this.refreshSoon(0);
  }

  private refreshSoon(ms: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.load(false);
      void this.loadInfo();
    }, ms);
  }

  private params(): AuditQueryParams {
    const type = this.type.value as AuditEventType;
    const range = SINCE.find(([v]) => v === this.since.value)?.[2] ?? null;
    const p: AuditQueryParams = { type, limit: PAGE };
    if (this.search.value.trim()) p.text = this.search.value.trim();
    if (this.client.value.trim()) p.clientName = this.client.value.trim();
    if (range !== null) p.since = Date.now() - range;
    if (type === 'process' && this.status.value)
      p.exitStatus = this.status.value as AuditQueryParams['exitStatus'];
    if (!this.decision.hidden && this.decision.value) p.decision = this.decision.value;
    if (this.correlation !== null && (type === 'network' || type === 'approval'))
      p.correlationId = this.correlation;
    return p;
  }

  private async load(older: boolean): Promise<void> {
    if (!this.ctx.conn.api) return;
    const gen = ++this.generation;
    const params = this.params();
    if (older && this.cursor) params.cursor = this.cursor;
    let r: AuditQueryResult;
    try {
      r = await this.ctx.conn.request('audit/query', params);
    } catch (e) {
      if (gen !== this.generation) return;
      this.items = [];
      this.cursor = null;
      // In place of the list: why there is none (the trail is off, or unavailable and why).
      this.renderTable((e as Error).message);
      return;
    }
    if (gen !== this.generation) return;
    this.items = older ? [...this.items, ...r.items] : r.items;
    this.cursor = r.nextCursor;
    this.renderTable();
  }

  private async loadInfo(): Promise<void> {
    if (!this.ctx.conn.api) return;
    let info: AuditInfoResult;
    try {
      info = await this.ctx.conn.request('audit/info', {});
    } catch {
      return;
    }
    if (!info.enabled) {
      replace(
        this.retention,
        info.unavailable
          ? 'The audit trail is unavailable on this host: nothing is stored (why, below).'
          : 'The audit trail is off on this host (started with --no-audit).',
      );
      return;
    }
    const counts = `${info.counts.process} processes, ${info.counts.network} network decisions, ${info.counts.fs} file changes`;
    replace(
      this.retention,
      `Keeps the last ${info.retentionDays} days, at most ${fmtBytes(info.maxBytes)} (oldest first out); `,
      `now ${fmtBytes(info.sizeBytes)}: ${counts}`,
      info.oldest !== null ? `, since ${when(info.oldest)}` : '',
      `. Output: the first and last ${fmtBytes(info.outputBytes)} of each process. `,
      h(
        'span',
        { class: 'mono', title: 'The database (mode 600, hidden from every sandbox)' },
        info.path ?? '',
      ),
      info.otlpEndpoint ? ` · exported to ${info.otlpEndpoint}` : '',
    );
    this.showNotice(info.notices.join(' '));
  }

  private showNotice(text: string): void {
    this.notice.hidden = text === '';
    replace(this.notice, text);
  }

  // ---- the list ------------------------------------------------------------------------------------------------

  private renderTable(empty = 'Nothing recorded matches.'): void {
    const type = this.type.value as AuditEventType;
    const cols: Record<AuditEventType, string[]> = {
      process: ['Started', 'Command', 'Client', 'Sandbox', 'Exit', 'CPU', 'Output'],
      network: ['Time', 'Decision', 'Host', 'Method', 'Process'],
      approval: ['Time', 'Event', 'Host', 'Decided by', 'Command'],
      fs: ['Time', 'Operation', 'Path', 'Outcome', 'Client'],
      session: ['Time', 'Event', 'Client', 'Session'],
    };
    const optional = new Set(['Client', 'Sandbox', 'Output']);
    replace(
      this.head,
      h(
        'tr',
        null,
        ...cols[type].map((c) =>
          c === 'CPU'
            ? // Sortable: the loaded rows by CPU used (usage.ts), again for their time order.
              h(
                'th',
                {
                  class: 'sortable',
                  'data-testid': 'history-sort-cpu',
                  title: 'Sort the rows shown by CPU used',
                  onclick: () => {
                    this.cpuOrder = !this.cpuOrder;
                    this.renderTable();
                  },
                },
                this.cpuOrder ? 'CPU ▾' : 'CPU',
              )
            : h('th', { class: optional.has(c) ? 'col-opt' : '' }, c),
        ),
      ),
    );
    this.more.hidden = this.cursor === null;
    if (this.items.length === 0) {
      replace(
        this.body,
        h('tr', null, h('td', { colspan: String(cols[type].length), class: 'empty-cell' }, empty)),
      );
      return;
    }
    replace(this.body, ...(this.cpuOrder ? byCpu(this.items) : this.items).map((i) => this.row(i)));
  }

  private row(i: AuditItem): HTMLElement {
    switch (i.type) {
      case 'process':
        return this.processRow(i);
      case 'network':
        return this.networkRow(i);
      case 'approval':
        return this.approvalRow(i);
      case 'fs':
        return this.fsRow(i);
      case 'session':
        return this.sessionRow(i);
    }
  }

  private processRow(p: AuditProcessItem): HTMLElement {
    const key = `${p.sessionId}/${p.processId}`;
    return h(
      'tr',
      {
        class: key === this.selected ? 'selected' : '',
        'data-process-id': p.processId,
        'data-session-id': p.sessionId,
        onclick: () => void this.open(p),
      },
      h('td', { class: 'small' }, when(p.startedAt)),
      h('td', { class: 'cmd mono', title: shellJoin(p.argv) }, shellJoin(p.argv)),
      h('td', { class: 'small col-opt' }, p.clientName),
      h(
        'td',
        { class: 'col-opt' },
        h(
          'span',
          { class: `badge badge-${p.sandboxType === 'none' ? 'none' : 'linux-seccomp'}` },
          p.sandboxType === 'none' ? 'no sandbox' : p.sandboxType,
        ),
        p.sandboxDenied ? h('span', { class: 'badge badge-denied' }, 'denied') : null,
      ),
      h(
        'td',
        null,
        h('span', { class: `state state-${exitClass(p)}`, 'data-exit': String(p.exitCode) }, exitText(p)),
      ),
      h('td', { class: 'small num', 'data-testid': 'history-cpu' }, cpuCell(p.usage)),
      h('td', { class: 'small num col-opt' }, fmtBytes(p.outputBytes)),
    );
  }

  private networkRow(n: AuditNetworkItem): HTMLElement {
    return h(
      'tr',
      { 'data-host': n.host },
      h('td', { class: 'small' }, when(n.time)),
      h(
        'td',
        null,
        h('span', { class: `decision decision-${n.decision}` }, n.decision),
        n.decision !== 'allow' ? h('div', { class: 'muted small' }, n.reason) : null,
        // The receipt: what decided it (origin: rule id), and a link to the prompt it is tied to.
        n.ruleOrigin
          ? h(
              'div',
              { class: 'muted small mono', 'data-testid': 'history-rule', title: n.ruleId ?? '' },
              `${n.ruleOrigin}: ${n.ruleId ?? '–'}`,
            )
          : null,
        n.correlationId ? this.link('approval', n.correlationId, 'prompt →') : null,
      ),
      h('td', { class: 'mono' }, `${n.host}:${n.port}`),
      h('td', { class: 'small' }, n.method ?? '–', h('div', { class: 'muted small' }, n.protocol)),
      h('td', { class: 'mono small' }, n.processId ?? '–'),
    );
  }

  /** A link to the rows of the other list tied to the same approval prompt. */
  private link(type: 'network' | 'approval', id: string, text: string): HTMLElement {
    return h(
      'button',
      {
        class: 'btn small link',
        'data-testid': `history-link-${type}`,
        'data-correlation-id': id,
        onclick: (e: Event) => {
          e.stopPropagation();
          this.follow(type, id);
        },
      },
      text,
    );
  }

  private approvalRow(a: AuditApprovalItem): HTMLElement {
    return h(
      'tr',
      { 'data-host': a.host },
      h('td', { class: 'small' }, when(a.time)),
      h(
        'td',
        null,
        a.kind,
        a.decision ? h('div', { class: 'muted small' }, `${a.decision} (${a.scope})`) : null,
        a.promptId ? this.link('network', a.promptId, 'requests →') : null,
      ),
      h('td', { class: 'mono' }, `${a.host}:${a.port}`),
      h('td', { class: 'small' }, a.decidedBy ?? '–'),
      h('td', { class: 'cmd mono small' }, a.command ? shellJoin(a.command) : '–'),
    );
  }

  private fsRow(f: AuditFsItem): HTMLElement {
    return h(
      'tr',
      { 'data-path': f.path },
      h('td', { class: 'small' }, when(f.time)),
      h('td', null, f.op, f.bytes !== null ? h('div', { class: 'muted small' }, fmtBytes(f.bytes)) : null),
      h('td', { class: 'mono small' }, f.path, f.destination ? ` → ${f.destination}` : ''),
      h(
        'td',
        null,
        h('span', { class: `decision decision-${f.outcome === 'allowed' ? 'allow' : 'deny'}` }, f.outcome),
        f.error ? h('div', { class: 'muted small' }, f.error) : null,
      ),
      h('td', { class: 'small' }, f.clientName ?? '–'),
    );
  }

  private sessionRow(s: AuditSessionItem): HTMLElement {
    return h(
      'tr',
      null,
      h('td', { class: 'small' }, when(s.time)),
      h('td', null, s.event),
      h('td', { class: 'small' }, s.clientName),
      h('td', { class: 'mono small' }, s.sessionId),
    );
  }

  // ---- a process's detail --------------------------------------------------------------------------------------

  private async open(p: AuditProcessItem): Promise<void> {
    this.selected = `${p.sessionId}/${p.processId}`;
    this.renderTable();
    this.split.classList.add('with-detail');
    this.detail.hidden = false;
    replace(this.detail, h('div', { class: 'detail-bar' }, 'Loading…'));
    let d: AuditProcessResult;
    try {
      d = await this.ctx.conn.request('audit/process', {
        sessionId: p.sessionId,
        processId: p.processId,
      });
    } catch (e) {
      replace(this.detail, h('div', { class: 'detail-bar' }, (e as Error).message));
      return;
    }
    if (this.selected !== `${p.sessionId}/${p.processId}`) return;
    this.renderDetail(d);
  }

  private renderDetail(d: AuditProcessResult): void {
    this.replayView?.dispose();
    this.replayView = null;
    if (!d.process) {
      replace(this.detail, h('div', { class: 'detail-bar' }, 'This process is no longer kept.'));
      return;
    }
    replace(
      this.detail,
      ...processDetail(
        d,
        d.process,
        () => {
          this.selected = null;
          this.detail.hidden = true;
          this.split.classList.remove('with-detail');
          this.renderTable();
        },
        (into) => void this.replay(d.process!, into),
      ),
    );
  }

  /** Loads the process's timed output (audit/replay) and shows it in `into`, replacing a replay shown before. */
  private async replay(p: AuditProcessItem, into: HTMLElement): Promise<void> {
    this.replayView?.dispose();
    this.replayView = null;
    replace(into, h('div', { class: 'muted small' }, 'Loading the replay…'));
    try {
      const r = await this.ctx.conn.request('audit/replay', {
        sessionId: p.sessionId,
        processId: p.processId,
      });
      if (!into.isConnected) return;
      this.replayView = new ReplayView(r);
      replace(into, this.replayView.el);
    } catch (e) {
      replace(into, h('div', { class: 'muted small' }, (e as Error).message));
    }
  }
}
