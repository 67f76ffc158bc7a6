// Network: blocked requests and audit events of the managed proxies, live, with the process that made them, and
// counts per host. The two event tables are virtualized (virtualRows.ts: only the rows in view are in the DOM, rows of
// one fixed height), so a proxy flood costs the page the rows on screen, a few times a second.
import type { MonitorAudit, MonitorBlocked } from '../../src/protocol/monitor.js';
import { h, type Paced, paced, reconcile, replace, setText } from '../dom.js';
import { commandOf } from '../processTable.js';
import { procKey } from '../store.js';
import type { AppContext, View } from '../view.js';
import { VirtualRows } from '../virtualRows.js';

/** The server filter's "all" (a server id is never this). */
const ALL = '\u0001all';
/** Height of an event row (two lines: styles.css `.net-table`). */
const NET_ROW = 44;

const REASON_TEXT: Record<string, string> = {
  not_allowed: 'not in the allowlist',
  not_allowed_local: 'local/private address',
  denied: 'on the denylist',
  method_not_allowed: 'method not allowed (limited mode)',
  mitm_required: 'HTTPS needs MITM (limited mode)',
  proxy_disabled: 'proxy disabled',
};

/** One formatter (toLocaleTimeString makes one per call: ~40 µs a row under a flood). */
const TIME = new Intl.DateTimeFormat(undefined, {
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  hour12: false,
});

/** A cell as a row draws it: what it shows (one string) and how to make it. */
type Cell = [shows: string, make: () => HTMLTableCellElement];

/** What each row element's cells show now (kept on the JS side: reading the DOM back costs more). */
const drawn = new WeakMap<HTMLTableRowElement, string[]>();

/**
 * Makes a row element show `cells`, remaking only the cells whose text differs: an event row is re-bound to another
 * event each time events stream in above it, and most of its cells (the reason, the method, the process) often show
 * what they showed (issue 38). The same number of cells as before means the same columns.
 */
function patchRow(tr: HTMLTableRowElement, cells: (Cell | null)[]): void {
  const list = cells.filter((c): c is Cell => c !== null);
  const shows = drawn.get(tr);
  if (!shows || shows.length !== list.length) {
    tr.replaceChildren(...list.map(([, make]) => make()));
    drawn.set(
      tr,
      list.map(([s]) => s),
    );
    return;
  }
  for (let i = 0; i < list.length; i++) {
    const [s, make] = list[i]!;
    if (shows[i] === s) continue;
    shows[i] = s;
    tr.replaceChild(make(), tr.children[i]!);
  }
}

function time(ts: number | string): string {
  const d = typeof ts === 'number' ? new Date(ts * 1000) : new Date(ts);
  return Number.isNaN(d.getTime()) ? String(ts) : TIME.format(d);
}

type NetEvent = MonitorBlocked | MonitorAudit;

/**
 * One virtualized table of events, newest first. A row element shows an event until the event in its slot changes,
 * or what the row showed of the fleet or of its process did (`stamp`).
 */
class EventTable<E extends NetEvent> {
  readonly scroller = h('div', { class: 'table-wrap net-scroll' });
  readonly empty: HTMLElement;
  private readonly tbody = h('tbody');
  private list: E[] = [];
  private readonly rows: VirtualRows<E>;

  constructor(
    table: HTMLTableElement,
    emptyText: string,
    columns: () => number,
    version: (e: E) => number,
    bind: (tr: HTMLTableRowElement, e: E) => void,
  ) {
    table.classList.add('net-table');
    table.append(this.tbody);
    this.empty = h('div', { class: 'muted small net-empty' }, emptyText);
    const clip = h('div', { class: 'vclip' }, table);
    this.scroller.append(clip, this.empty);
    this.rows = new VirtualRows<E>({
      scroller: this.scroller,
      clip,
      tbody: this.tbody,
      rowHeight: NET_ROW,
      columns,
      count: () => this.list.length,
      at: (i) => this.list[i],
      indexOf: (e) => this.list.indexOf(e),
      key: (e) => String(e.id),
      version,
      bind,
      overscan: 4,
    });
  }

  /** Reads what the render needs of the layout (every table of the view, before any of them writes). */
  measure(): void {
    this.rows.measure();
  }

  render(list: E[]): void {
    this.list = list;
    this.empty.hidden = list.length > 0;
    this.rows.render();
  }

  invalidate(): void {
    this.rows.invalidate();
  }
}

export class NetworkView implements View {
  readonly el = h('section', { 'aria-label': 'Network' });
  private readonly hostsBody = h('tbody');
  private readonly notice = h('div', { class: 'notice', hidden: true });
  private readonly filter = h(
    'select',
    { class: 'input', 'aria-label': 'Audit decisions' },
    h('option', { value: '' }, 'All decisions'),
    h('option', { value: 'allow' }, 'Allowed'),
    h('option', { value: 'deny' }, 'Denied'),
  );
  private readonly serverSel = h('select', {
    class: 'input',
    'aria-label': 'Filter by server',
    'data-testid': 'network-server',
    hidden: true,
  });
  private serverIds = '';
  private visible = false;
  private fleet = false;
  private readonly blocked: EventTable<MonitorBlocked>;
  private readonly audit: EventTable<MonitorAudit>;
  private readonly hostRows = new Map<
    string,
    { tr: HTMLTableRowElement; allowed: number; blocked: number }
  >();
  private readonly noHosts = h('tr', null, h('td', { colspan: '3', class: 'empty-cell' }, 'No traffic yet.'));
  /** A render while the view is shown, paced (dom.ts): a flood of events is drawn a few times a second. */
  private readonly schedule: Paced = paced(() => {
    if (this.visible) this.render();
  });

  constructor(private readonly ctx: AppContext) {
    this.filter.addEventListener('change', () => this.render());
    this.serverSel.addEventListener('change', () => this.render());
    const cols = (n: number) => () => n + (this.fleet ? 1 : 0);
    this.blocked = new EventTable<MonitorBlocked>(
      this.eventTable(
        'blocked-table',
        ['80px', '25%', '18%', '16%', 'auto'],
        ['Time', 'Host', 'Reason', 'Method', 'Process'],
      ),
      'No blocked requests.',
      cols(5),
      (e) => this.versionOf(e),
      (tr, e) => this.bindBlocked(tr, e),
    );
    this.audit = new EventTable<MonitorAudit>(
      this.eventTable(
        'audit-table',
        ['80px', '11%', '20%', '12%', '20%', 'auto'],
        ['Time', 'Decision', 'Host', 'Method', 'Process', 'Audit metadata'],
      ),
      'No policy decisions yet.',
      cols(6),
      (e) => this.versionOf(e),
      (tr, e) => this.bindAudit(tr, e),
    );
    for (const t of [this.blocked, this.audit]) t.scroller.addEventListener('click', (e) => this.follow(e));
    const hostsTable = h(
      'table',
      { class: 'table compact net-hosts', 'data-testid': 'hosts-table' },
      h(
        'thead',
        null,
        h(
          'tr',
          null,
          h('th', null, 'Host'),
          h('th', { class: 'num' }, 'Allowed'),
          h('th', { class: 'num' }, 'Blocked'),
        ),
      ),
      this.hostsBody,
    );
    this.el.append(
      h('div', { class: 'toolbar' }, h('h2', null, 'Network'), h('div', { class: 'grow' }), this.serverSel),
      this.notice,
      h(
        'div',
        { class: 'net-grid' },
        h('div', { class: 'card' }, h('h3', null, 'Blocked requests'), this.blocked.scroller),
        h(
          'div',
          { class: 'card' },
          h('h3', null, 'Per host'),
          h('div', { class: 'table-wrap net-scroll' }, hostsTable),
        ),
        h(
          'div',
          { class: 'card span2' },
          h('div', { class: 'card-head' }, h('h3', null, 'Policy decisions (audit)'), this.filter),
          this.audit.scroller,
        ),
      ),
    );
    ctx.store.on((c) => {
      if (!this.visible) return;
      if (c === 'network' || c === 'dropped' || c === 'servers' || c === 'snapshot' || c === 'processes')
        this.schedule();
    });
  }

  show(): void {
    this.visible = true;
    this.render();
  }

  hide(): void {
    this.visible = false;
  }

  /** An event table's element: its column widths and headings, after the server column a fleet host shows. */
  private eventTable(testId: string, widths: string[], headings: string[]): HTMLTableElement {
    return h(
      'table',
      { class: 'table', 'data-testid': testId },
      this.colgroup(widths),
      h('thead', null, h('tr', null, this.serverHead(), ...headings.map((t) => h('th', null, t)))),
    ) as HTMLTableElement;
  }

  /** The column widths of the event tables, and of the server column a fleet host shows first. */
  private readonly colgroups: [HTMLTableColElement, string[]][] = [];
  private colgroup(widths: string[]): HTMLTableColElement {
    const g = h('colgroup') as HTMLTableColElement;
    this.colgroups.push([g, widths]);
    this.renderColumns();
    return g;
  }

  private renderColumns(): void {
    for (const [g, widths] of this.colgroups)
      replace(
        g,
        (this.fleet ? ['110px', ...widths] : widths).map((w) =>
          h('col', { style: w === 'auto' ? null : `width:${w}` }),
        ),
      );
  }

  private serverHead(): HTMLElement {
    return h('th', { class: 'srv-head' }, 'Server');
  }

  /** The server filter (a fleet host only) and the server column's visibility. */
  private renderServers(): void {
    const s = this.ctx.store;
    this.serverSel.hidden = !s.fleet;
    this.el.classList.toggle('fleet', s.fleet);
    if (this.fleet !== s.fleet) {
      this.fleet = s.fleet;
      this.renderColumns();
      this.blocked.invalidate();
      this.audit.invalidate();
    }
    const ids = [...s.servers.keys()];
    if (ids.join('\u0000') === this.serverIds) return;
    this.serverIds = ids.join('\u0000');
    // Before its first options the select has no value: that is "all", not the host's own ('').
    const cur = this.serverSel.options.length === 0 ? ALL : this.serverSel.value;
    replace(
      this.serverSel,
      h('option', { value: ALL, selected: cur === ALL }, 'All servers'),
      ids.map((id) => h('option', { value: id, selected: id === cur }, s.serverName(id))),
    );
  }

  /** An event's row is drawn again once its process is known (its cell becomes a link). */
  private versionOf(e: NetEvent): number {
    return this.ctx.store.processFor(e.server ?? '', e.processId, e.sessionId) ? 1 : 0;
  }

  /** A click on a process link (one listener per table, not one per row). */
  private follow(e: Event): void {
    const a = (e.target as HTMLElement).closest('a[data-proc]') as HTMLElement | null;
    if (!a) return;
    e.preventDefault();
    this.ctx.go('processes', a.dataset.proc!);
  }

  private serverCell(server: string | undefined): Cell | null {
    if (!this.fleet) return null;
    const name = this.ctx.store.serverName(server ?? '');
    return [name, () => h('td', { class: 'small srv' }, name)];
  }

  private processCell(server: string | undefined, processId: string, sessionId: string | null): Cell {
    const p = this.ctx.store.processFor(server ?? '', processId, sessionId);
    if (!p) return [`\u0000${processId}`, () => h('td', { class: 'mono small' }, processId)];
    const key = procKey(p);
    const command = commandOf(p).slice(0, 60);
    const who = `${p.clientName} · ${p.processId}`;
    return [
      `${key}\u0000${command}\u0000${who}`,
      () =>
        h(
          'td',
          { class: 'proc-link' },
          h('a', { href: '#', 'data-proc': key }, h('span', { class: 'mono small' }, command)),
          h('div', { class: 'muted small' }, who),
        ),
    ];
  }

  private bindBlocked(tr: HTMLTableRowElement, b: MonitorBlocked): void {
    tr.dataset.host = b.host;
    tr.dataset.reason = b.reason;
    tr.dataset.server = b.server ?? '';
    const at = time(b.timestamp);
    const target = b.port ? `${b.host}:${b.port}` : b.host;
    const how = `${b.method ?? b.protocol}${b.mode ? ` · ${b.mode}` : ''}`;
    patchRow(tr, [
      this.serverCell(b.server),
      [at, () => h('td', { class: 'small' }, at)],
      [target, () => h('td', { class: 'mono' }, target)],
      [
        b.reason,
        () =>
          h(
            'td',
            null,
            h('span', { class: `reason reason-${b.reason}`, title: REASON_TEXT[b.reason] ?? '' }, b.reason),
            h('div', { class: 'muted small' }, REASON_TEXT[b.reason] ?? ''),
          ),
      ],
      [how, () => h('td', { class: 'small' }, how)],
      this.processCell(b.server, b.processId, b.sessionId),
    ]);
  }

  private bindAudit(tr: HTMLTableRowElement, a: MonitorAudit): void {
    tr.dataset.server = a.server ?? '';
    const at = time(a.timestamp);
    const target = `${a.host}:${a.port}`;
    const meta = Object.entries(a.metadata)
      .map(([k, v]) => `${k}=${String(v)}`)
      .join(' ');
    patchRow(tr, [
      this.serverCell(a.server),
      [at, () => h('td', { class: 'small' }, at)],
      [
        `${a.decision}\u0000${a.decision !== 'allow' ? a.reason : ''}`,
        () =>
          h(
            'td',
            null,
            h('span', { class: `decision decision-${a.decision}` }, a.decision),
            a.decision !== 'allow' ? h('div', { class: 'muted small' }, a.reason) : null,
          ),
      ],
      [target, () => h('td', { class: 'mono' }, target)],
      [
        [a.method, a.path ?? '\u0001', a.protocol, a.intercepted, a.credential ?? '\u0001', a.transport].join(
          '\u0000',
        ),
        () =>
          h(
            'td',
            { class: 'small' },
            a.method,
            a.path !== undefined ? h('span', { class: 'mono', title: a.path }, ` ${a.path}`) : null,
            h(
              'div',
              { class: 'muted small' },
              a.protocol,
              a.intercepted
                ? h('span', { class: 'badge', 'data-testid': 'intercepted' }, ' intercepted')
                : null,
              a.credential !== undefined
                ? h('span', { class: 'badge', 'data-testid': 'credential' }, ` credential: ${a.credential}`)
                : null,
              a.transport === 'transparent'
                ? h(
                    'span',
                    {
                      class: 'badge',
                      'data-testid': 'transparent',
                      title: 'a plain TCP connect the sandbox’s connect supervisor asked the proxy for',
                    },
                    ' transparent',
                  )
                : null,
            ),
          ),
      ],
      this.processCell(a.server, a.processId, a.sessionId),
      [meta, () => h('td', { class: 'small mono', title: meta }, meta || '–')],
    ]);
  }

  private render(): void {
    this.schedule.ran();
    this.blocked.measure();
    this.audit.measure();
    const s = this.ctx.store;
    const d = s.dropped;
    const notes: string[] = [];
    if (!s.networkWired) notes.push('No managed proxy is wired into this host yet: the lists stay empty.');
    if (d.network > 0)
      notes.push(`${d.network} network events were skipped because the panel read too slowly.`);
    if (d.evicted > 0) notes.push(`${d.evicted} older events were evicted from the host's rings.`);
    this.notice.hidden = notes.length === 0;
    setText(this.notice, notes.join(' '));

    this.renderServers();
    const server = this.serverSel.hidden || this.serverSel.value === ALL ? null : this.serverSel.value;
    const mine = (e: { server?: string | undefined }) => server === null || (e.server ?? '') === server;
    this.blocked.render(newestFirst(s.blocked, mine));
    const f = this.filter.value;
    this.audit.render(
      newestFirst(
        s.audit,
        (a) => mine(a) && (!f || (f === 'allow' ? a.decision === 'allow' : a.decision !== 'allow')),
      ),
    );
    this.renderHosts();
  }

  /** Per host: a row per host, its counts written when they changed, ordered by traffic. */
  private renderHosts(): void {
    const hosts = [...this.ctx.store.hosts.values()].sort(
      (a, b) => b.blocked + b.allowed - (a.blocked + a.allowed),
    );
    if (hosts.length === 0) {
      reconcile(this.hostsBody, [this.noHosts]);
      return;
    }
    const rows = hosts.map((c) => {
      let r = this.hostRows.get(c.host);
      if (!r) {
        r = {
          tr: h(
            'tr',
            { 'data-host': c.host },
            h('td', { class: 'mono' }, c.host),
            h('td', { class: 'num' }),
            h('td', { class: 'num' }),
          ),
          allowed: -1,
          blocked: -1,
        };
        this.hostRows.set(c.host, r);
      }
      if (r.allowed !== c.allowed) {
        r.allowed = c.allowed;
        r.tr.children[1]!.textContent = String(c.allowed);
      }
      if (r.blocked !== c.blocked) {
        r.blocked = c.blocked;
        const td = r.tr.children[2] as HTMLElement;
        td.textContent = String(c.blocked);
        td.className = `num ${c.blocked > 0 ? 'bad' : ''}`;
      }
      return r.tr;
    });
    reconcile(this.hostsBody, rows);
  }
}

/** The items of `list` (oldest first) that pass `keep`, newest first. */
function newestFirst<T>(list: readonly T[], keep: (x: T) => boolean): T[] {
  const out: T[] = [];
  for (let i = list.length - 1; i >= 0; i--) if (keep(list[i]!)) out.push(list[i]!);
  return out;
}
