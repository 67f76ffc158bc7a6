// Processes: every process the panel has seen (all sessions, all servers of a fleet host), as a virtualized table
// that patches rows instead of rebuilding — counts per state, client and server, filters and search over the whole
// list — and the selected process's detail pane.

import { h, type Paced, paced, perFrame, replace, setText } from '../dom.js';
import type { Row, StateFilter } from '../processTable.js';
import type { AppContext, View } from '../view.js';
import { VirtualRows } from '../virtualRows.js';
import { DetailPane } from './processDetail.js';
import { bindRow, COLS, type Col, type Shown } from './processRow.js';

export { badge, badges, policyView, statePill } from './badges.js';

const ROW_HEIGHT = 32;
/** How often relative times ("12s ago") move on: a slow tick, not a frame. */
const RELATIVE_TIME_MS = 5000;
/** The server filter's "all" (a server id is never this). */
const ALL = '\u0001all';

/** `12 345` (thin spaces between thousands; no Intl: this runs every frame). */
export function n(x: number): string {
  const s = String(Math.trunc(x));
  let out = '';
  for (let i = s.length; i > 0; i -= 3) out = (i > 3 ? '\u202f' : '') + s.slice(Math.max(0, i - 3), i) + out;
  return x < 0 ? `-${out.replace(/^-\u202f?/, '')}` : out;
}

/** Set by a measuring harness (the panel bench): told which rows each frame committed to the table. */
type Probe = (rows: { processId: string; state: string; server: string }[]) => void;

export class ProcessesView implements View {
  readonly el = h('section', { 'aria-label': 'Processes' });
  private readonly table = h('table', { class: 'table proc-table', 'data-testid': 'process-table' });
  private readonly colgroup = h('colgroup');
  private readonly thead = h('thead');
  private readonly tbody = h('tbody');
  private readonly scroller = h('div', { class: 'proc-scroll' });
  private readonly clip = h('div', { class: 'vclip' });
  private readonly empty = h('div', { class: 'empty' });
  private readonly counts = h('div', { class: 'proc-counts muted small', 'data-testid': 'process-counts' });
  private readonly serverSel = h('select', {
    class: 'input',
    'aria-label': 'Filter by server',
    'data-testid': 'filter-server',
    hidden: true,
  });
  private readonly clientSel = h('select', {
    class: 'input',
    'aria-label': 'Filter by client',
    'data-testid': 'filter-client',
  });
  private readonly stateSel = h('select', {
    class: 'input',
    'aria-label': 'Filter by state',
    'data-testid': 'filter-state',
  });
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
  private readonly rows: VirtualRows<Row>;
  private newestFirst = true;
  private detail: DetailPane | null = null;
  private selected: string | null = null;
  private cols: Col[] = [];
  private readonly shownIn = new WeakMap<HTMLTableRowElement, Shown>();
  private clientNames = '';
  private emptyWhy = '';
  private serverIds = '';

  constructor(private readonly ctx: AppContext) {
    const table = ctx.store.processes;
    this.sortBtn = h(
      'button',
      { class: 'btn ghost', onclick: () => this.toggleSort(), 'data-testid': 'sort' },
      'Newest first ↓',
    );
    for (const [v, label] of [
      ['', 'All states'],
      ['running', 'Running'],
      ['exited', 'Finished'],
      ['failed', 'Failed (non-zero)'],
    ] as const)
      this.stateSel.appendChild(h('option', { value: v, 'data-label': label }, label));
    this.clientSel.appendChild(h('option', { value: '' }, 'All clients'));
    this.serverSel.appendChild(h('option', { value: ALL }, 'All servers'));
    const refilter = () => {
      table.setFilter({
        server: this.serverSel.value === ALL ? null : this.serverSel.value,
        client: this.clientSel.value === '' ? null : this.clientSel.value,
        state: this.stateSel.value as StateFilter,
        text: this.search.value,
      });
      this.scroller.scrollTop = 0;
      this.render();
    };
    // Keys typed within a frame are one filter and one render, in that frame (a key and the key that undoes it
    // cost nothing).
    const refilterInFrame = perFrame(refilter);
    for (const el of [this.serverSel, this.clientSel, this.stateSel])
      el.addEventListener('change', refilterInFrame);
    this.search.addEventListener('input', refilterInFrame);
    this.table.append(this.colgroup, this.thead, this.tbody);
    this.clip.append(this.table);
    this.scroller.append(this.clip, this.empty);
    // The scroller and the toolbar each sit in a box of a size that never depends on what they hold (styles.css
    // .proc-frame, .toolbar-box): rows, counts and keys typed in the search box lay out that box alone (issue 38).
    this.split.append(h('div', { class: 'table-wrap proc-frame' }, this.scroller));
    this.el.append(
      h(
        'div',
        { class: 'toolbar-box' },
        h(
          'div',
          { class: 'toolbar' },
          h('h2', null, 'Processes'),
          h('div', { class: 'proc-counts-box' }, this.counts),
          this.droppedNote,
          this.search,
          this.serverSel,
          this.clientSel,
          this.stateSel,
          this.sortBtn,
        ),
      ),
      this.sessionsStrip,
      this.split,
    );
    this.rows = new VirtualRows<Row>({
      scroller: this.scroller,
      clip: this.clip,
      tbody: this.tbody,
      rowHeight: ROW_HEIGHT,
      columns: () => this.cols.length,
      count: () => table.viewSize,
      at: (i) => table.at(i, this.newestFirst),
      indexOf: (r) => table.indexOf(r, this.newestFirst),
      key: (r) => r.key,
      version: (r) => r.version,
      bind: (tr, r) => this.bind(tr, r),
    });
    const pick = (e: Event) => {
      const tr = (e.target as HTMLElement).closest('tr[data-key]') as HTMLElement | null;
      if (tr?.dataset.key) this.select(tr.dataset.key);
    };
    this.tbody.addEventListener('click', pick);
    this.tbody.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') pick(e);
    });
    setInterval(() => {
      if (this.visible) this.renderSessions();
    }, 1000);
    ctx.store.on((c) => {
      // Nothing is drawn while the view is hidden: show() draws what it missed.
      if ((c === 'processes' || c === 'connection' || c === 'servers') && this.visible) this.schedule();
      if (c === 'snapshot') this.prepareSearchWhenIdle();
      if (c === 'sessions') this.renderSessions();
      if (c === 'dropped') this.renderDropped();
      // After a reconnect the new subscription follows nothing: reopen the shown process.
      if (c === 'snapshot' && this.selected) {
        const key = this.selected;
        this.close();
        this.select(key);
      }
    });
    // "Started … ago" moves on.
    setInterval(() => {
      if (!this.visible) return;
      this.rows.rebind();
      this.schedule();
    }, RELATIVE_TIME_MS);
    this.render();
  }

  private visible = false;

  show(): void {
    this.visible = true;
    this.render();
    this.renderSessions();
  }

  hide(): void {
    this.visible = false;
  }

  private preparing = false;

  /** While the page is idle, the table builds its rows' search text (a first search is then one scan). */
  private prepareSearchWhenIdle(): void {
    if (this.preparing) return;
    this.preparing = true;
    const step = (d: IdleDeadline) => {
      if (this.ctx.store.processes.prepareSearch(() => d.timeRemaining() < 1)) this.preparing = false;
      else requestIdleCallback(step);
    };
    requestIdleCallback(step);
  }

  private toggleSort(): void {
    this.newestFirst = !this.newestFirst;
    this.sortBtn.textContent = this.newestFirst ? 'Newest first ↓' : 'Oldest first ↑';
    this.rows.invalidate();
    this.scroller.scrollTop = 0;
    this.render();
  }

  /**
   * A render for new data, paced (dom.ts `paced`: in the next frame after a quiet spell, a few times a second while
   * rows stream in). Filters, sorting and selection render at once; scrolling renders every frame (virtualRows.ts).
   */
  private readonly schedule: Paced = paced(() => this.render());

  /** Opens a process's detail (now, or as soon as its row arrives). */
  select(key: string | null): void {
    if (key === this.selected && (this.detail || key === null)) return;
    this.close();
    this.selected = key;
    this.rows.invalidate();
    this.render();
  }

  private close(): void {
    this.detail?.dispose();
    this.detail?.el.remove();
    this.detail = null;
    this.selected = null;
    this.split.classList.remove('with-detail');
  }

  private columns(): Col[] {
    const cols: Col[] = [];
    if (this.ctx.store.fleet) cols.push('server');
    cols.push('state', 'command', 'client', 'sandbox');
    if (!this.detail) cols.push('pid', 'started', 'output');
    return cols;
  }

  private setColumns(cols: Col[]): void {
    if (cols.join() === this.cols.join()) return;
    this.cols = cols;
    replace(
      this.colgroup,
      cols.map((c) => h('col', { style: COLS[c].width === 'auto' ? null : `width:${COLS[c].width}` })),
    );
    replace(
      this.thead,
      h(
        'tr',
        null,
        cols.map((c) => h('th', { class: COLS[c].cls ?? null }, COLS[c].label)),
      ),
    );
    this.rows.invalidate();
  }

  private bind(tr: HTMLTableRowElement, r: Row): void {
    bindRow(tr, r, { store: this.ctx.store, cols: this.cols, selected: this.selected, shown: this.shownIn });
  }

  private render(): void {
    this.schedule.ran();
    const store = this.ctx.store;
    const table = store.processes;
    const changed = table.takeChanged();
    if (this.selected && !this.detail) {
      const p = table.get(this.selected);
      if (p) {
        this.detail = new DetailPane(this.ctx, p, () => this.select(null));
        this.split.appendChild(this.detail.el);
        this.split.classList.add('with-detail');
      }
    } else if (this.detail && (changed.has(this.detail.key) || changed.size === 0)) {
      const p = table.get(this.detail.key);
      if (p) this.detail.update(p);
    }
    this.setColumns(this.columns());
    this.rows.render();
    this.renderFilters();
    const c = table.counts;
    const shown = table.viewSize;
    setText(
      this.counts,
      `${n(c.total)} process${c.total === 1 ? '' : 'es'} · ${n(c.running)} running · ${n(c.ok)} ok · ` +
        `${n(c.failed)} failed${c.stale > 0 ? ` · ${n(c.stale)} stale` : ''}` +
        `${shown !== c.total ? ` · showing ${n(shown)}` : ''}${store.pending > 0 ? ` · loading ${n(store.pending)}…` : ''}`,
    );
    this.empty.hidden = shown > 0;
    // Which message the empty table shows: made again only when it changes (an emptying key makes nothing).
    const emptyWhy = shown > 0 ? '' : c.total === 0 ? 'none' : 'filtered';
    if (emptyWhy !== this.emptyWhy && emptyWhy !== '') {
      replace(
        this.empty,
        c.total === 0
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
    }
    if (emptyWhy !== '') this.emptyWhy = emptyWhy;
    // New rows' search text is built while the page is idle: asked once per render, not once per feed batch.
    if (changed.size > 0) this.prepareSearchWhenIdle();
    const probe = (window as unknown as { corralPanelProbe?: Probe }).corralPanelProbe;
    if (probe && changed.size > 0) {
      const rows: { processId: string; state: string; server: string }[] = [];
      for (const k of changed) {
        const r = table.get(k);
        if (r) rows.push({ processId: r.processId, state: r.state, server: r.server });
      }
      probe(rows);
    }
  }

  /** The filter lists, with their counts. */
  private renderFilters(): void {
    const store = this.ctx.store;
    const table = store.processes;
    const names = [...table.byClient.keys()].sort();
    if (names.join('\u0000') !== this.clientNames) {
      this.clientNames = names.join('\u0000');
      const cur = this.clientSel.value;
      replace(
        this.clientSel,
        h('option', { value: '', selected: cur === '' }, 'All clients'),
        names.map((c) => h('option', { value: c, selected: c === cur, 'data-label': c }, c)),
      );
    }
    for (const o of this.clientSel.options) {
      if (o.value === '') continue;
      const e = table.byClient.get(o.value);
      const text = `${o.value} (${n(e?.total ?? 0)})`;
      if (o.textContent !== text) o.textContent = text;
    }
    const c = table.counts;
    const stateCounts: Record<string, number> = {
      '': c.total,
      running: c.running,
      exited: c.total - c.running,
      failed: c.failed,
    };
    for (const o of this.stateSel.options) {
      const text = `${o.dataset.label} (${n(stateCounts[o.value] ?? 0)})`;
      if (o.textContent !== text) o.textContent = text;
    }
    this.serverSel.hidden = !store.fleet;
    const ids = [...store.servers.keys()];
    if (ids.join('\u0000') !== this.serverIds) {
      this.serverIds = ids.join('\u0000');
      const cur = this.serverSel.value;
      replace(
        this.serverSel,
        h('option', { value: ALL, selected: cur === ALL }, 'All servers'),
        ids.map((id) => h('option', { value: id, selected: id === cur }, store.serverName(id))),
      );
    }
    for (const o of this.serverSel.options) {
      if (o.value === ALL) continue;
      const sv = store.servers.get(o.value);
      const text = `${store.serverName(o.value)} (${n(table.byServer.get(o.value)?.total ?? 0)})${
        sv?.state === 'disconnected' ? ' · down' : ''
      }`;
      if (o.textContent !== text) o.textContent = text;
    }
  }

  /** Detached sessions: their countdown to the kill, and a button to kill them now (protocol.md §8). */
  private renderSessions(): void {
    const store = this.ctx.store;
    const detached = [...store.sessions.entries()].filter(([, s]) => !s.attached);
    this.sessionsStrip.hidden = detached.length === 0;
    if (detached.length === 0) {
      if (this.sessionsStrip.firstChild) replace(this.sessionsStrip);
      return;
    }
    const now = Date.now() + store.skew;
    replace(
      this.sessionsStrip,
      detached.slice(0, 50).map(([k, s]) => {
        const running = store.processes.runningBySession.get(k) ?? 0;
        const left = s.expiresAt !== null ? Math.max(0, Math.round((s.expiresAt - now) / 1000)) : null;
        const server = s.server ?? '';
        return h(
          'div',
          { class: 'session-chip', 'data-session': s.sessionId },
          h('span', { class: 'status-dot', 'data-state': 'disconnected' }),
          h('strong', null, s.clientName),
          store.fleet ? h('span', { class: 'muted' }, ` on ${store.serverName(server)}`) : null,
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
                  .request('monitor/killSession', {
                    ...(server ? { server } : {}),
                    sessionId: s.sessionId,
                  })
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
    this.droppedNote.textContent = d.output > 0 ? 'live output sampled' : '';
    this.droppedNote.title =
      d.output > 0
        ? `${n(d.output)} output chunks were not sent live (too fast to show, or a slow connection): ` +
          'a process’s “Earlier output” reads back what the server retains'
        : '';
  }
}
