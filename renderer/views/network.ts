// Network: blocked requests and audit events of the managed proxies, live, with the process that made them, and
// counts per host.
import type { MonitorAudit, MonitorBlocked } from '../../src/protocol/monitor.js';
import { h, replace } from '../dom.js';
import { commandOf } from '../processTable.js';
import { procKey } from '../store.js';
import type { AppContext, View } from '../view.js';

/** The server filter's "all" (a server id is never this). */
const ALL = '\u0001all';

const REASON_TEXT: Record<string, string> = {
  not_allowed: 'not in the allowlist',
  not_allowed_local: 'local/private address',
  denied: 'on the denylist',
  method_not_allowed: 'method not allowed (limited mode)',
  mitm_required: 'HTTPS needs MITM (limited mode)',
  proxy_disabled: 'proxy disabled',
};

function time(ts: number | string): string {
  const d = typeof ts === 'number' ? new Date(ts * 1000) : new Date(ts);
  return Number.isNaN(d.getTime()) ? String(ts) : d.toLocaleTimeString(undefined, { hour12: false });
}

export class NetworkView implements View {
  readonly el = h('section', { 'aria-label': 'Network' });
  private readonly blockedBody = h('tbody');
  private readonly auditBody = h('tbody');
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
  private scheduled = false;
  private visible = false;

  constructor(private readonly ctx: AppContext) {
    this.filter.addEventListener('change', () => this.render());
    this.serverSel.addEventListener('change', () => this.render());
    const blockedTable = h(
      'table',
      { class: 'table', 'data-testid': 'blocked-table' },
      h(
        'thead',
        null,
        h(
          'tr',
          null,
          this.serverHead(),
          h('th', null, 'Time'),
          h('th', null, 'Host'),
          h('th', null, 'Reason'),
          h('th', null, 'Method'),
          h('th', null, 'Process'),
        ),
      ),
      this.blockedBody,
    );
    const auditTable = h(
      'table',
      { class: 'table', 'data-testid': 'audit-table' },
      h(
        'thead',
        null,
        h(
          'tr',
          null,
          this.serverHead(),
          h('th', null, 'Time'),
          h('th', null, 'Decision'),
          h('th', null, 'Host'),
          h('th', null, 'Method'),
          h('th', null, 'Process'),
          h('th', null, 'Audit metadata'),
        ),
      ),
      this.auditBody,
    );
    const hostsTable = h(
      'table',
      { class: 'table compact', 'data-testid': 'hosts-table' },
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
        h(
          'div',
          { class: 'card' },
          h('h3', null, 'Blocked requests'),
          h('div', { class: 'table-wrap' }, blockedTable),
        ),
        h('div', { class: 'card' }, h('h3', null, 'Per host'), h('div', { class: 'table-wrap' }, hostsTable)),
        h(
          'div',
          { class: 'card span2' },
          h('div', { class: 'card-head' }, h('h3', null, 'Policy decisions (audit)'), this.filter),
          h('div', { class: 'table-wrap' }, auditTable),
        ),
      ),
    );
    ctx.store.on((c) => {
      if (c === 'network' || c === 'dropped' || c === 'servers' || c === 'snapshot') this.schedule();
    });
  }

  show(): void {
    this.visible = true;
    this.render();
  }

  hide(): void {
    this.visible = false;
  }

  private serverHead(): HTMLElement {
    return h('th', { class: 'srv-head' }, 'Server');
  }

  /** The server filter (a fleet host only) and the server column's visibility. */
  private renderServers(): void {
    const s = this.ctx.store;
    this.serverSel.hidden = !s.fleet;
    this.el.classList.toggle('fleet', s.fleet);
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

  private schedule(): void {
    if (this.scheduled || !this.visible) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      this.render();
    });
  }

  private serverCell(server: string | undefined): HTMLElement | null {
    return this.ctx.store.fleet
      ? h('td', { class: 'small srv' }, this.ctx.store.serverName(server ?? ''))
      : null;
  }

  private processCell(server: string | undefined, processId: string, sessionId: string | null): HTMLElement {
    const p = this.ctx.store.processFor(server ?? '', processId, sessionId);
    if (!p) return h('td', { class: 'mono small' }, processId);
    return h(
      'td',
      { class: 'proc-link' },
      h(
        'a',
        {
          href: '#',
          onclick: (e: Event) => {
            e.preventDefault();
            this.ctx.go('processes', procKey(p));
          },
        },
        h('span', { class: 'mono small' }, commandOf(p).slice(0, 60)),
      ),
      h('div', { class: 'muted small' }, `${p.clientName} · ${p.processId}`),
    );
  }

  private render(): void {
    const s = this.ctx.store;
    const d = s.dropped;
    const notes: string[] = [];
    if (!s.networkWired) notes.push('No managed proxy is wired into this host yet: the lists stay empty.');
    if (d.network > 0)
      notes.push(`${d.network} network events were skipped because the panel read too slowly.`);
    if (d.evicted > 0) notes.push(`${d.evicted} older events were evicted from the host's rings.`);
    this.notice.hidden = notes.length === 0;
    replace(this.notice, notes.join(' '));

    this.renderServers();
    const server = this.serverSel.hidden || this.serverSel.value === ALL ? null : this.serverSel.value;
    const mine = (e: { server?: string | undefined }) => server === null || (e.server ?? '') === server;
    const blocked = [...s.blocked].reverse().filter(mine);
    replace(
      this.blockedBody,
      blocked.length === 0
        ? h('tr', null, h('td', { colspan: '6', class: 'empty-cell' }, 'No blocked requests.'))
        : blocked.map((b: MonitorBlocked) =>
            h(
              'tr',
              { 'data-host': b.host, 'data-reason': b.reason, 'data-server': b.server ?? '' },
              this.serverCell(b.server),
              h('td', { class: 'small' }, time(b.timestamp)),
              h('td', { class: 'mono' }, b.port ? `${b.host}:${b.port}` : b.host),
              h(
                'td',
                null,
                h(
                  'span',
                  { class: `reason reason-${b.reason}`, title: REASON_TEXT[b.reason] ?? '' },
                  b.reason,
                ),
                h('div', { class: 'muted small' }, REASON_TEXT[b.reason] ?? ''),
              ),
              h('td', { class: 'small' }, b.method ?? b.protocol, b.mode ? ` · ${b.mode}` : ''),
              this.processCell(b.server, b.processId, b.sessionId),
            ),
          ),
    );
    const hosts = [...s.hosts.values()].sort((a, b) => b.blocked + b.allowed - (a.blocked + a.allowed));
    replace(
      this.hostsBody,
      hosts.length === 0
        ? h('tr', null, h('td', { colspan: '3', class: 'empty-cell' }, 'No traffic yet.'))
        : hosts.map((c) =>
            h(
              'tr',
              { 'data-host': c.host },
              h('td', { class: 'mono' }, c.host),
              h('td', { class: 'num' }, String(c.allowed)),
              h('td', { class: `num ${c.blocked > 0 ? 'bad' : ''}` }, String(c.blocked)),
            ),
          ),
    );
    const f = this.filter.value;
    const audit = [...s.audit]
      .reverse()
      .filter(mine)
      .filter((a) => !f || (f === 'allow' ? a.decision === 'allow' : a.decision !== 'allow'));
    replace(
      this.auditBody,
      audit.length === 0
        ? h('tr', null, h('td', { colspan: '7', class: 'empty-cell' }, 'No policy decisions yet.'))
        : audit.slice(0, 300).map((a: MonitorAudit) =>
            h(
              'tr',
              { 'data-server': a.server ?? '' },
              this.serverCell(a.server),
              h('td', { class: 'small' }, time(a.timestamp)),
              h(
                'td',
                null,
                h('span', { class: `decision decision-${a.decision}` }, a.decision),
                a.decision !== 'allow' ? h('div', { class: 'muted small' }, a.reason) : null,
              ),
              h('td', { class: 'mono' }, `${a.host}:${a.port}`),
              h('td', { class: 'small' }, a.method, h('div', { class: 'muted small' }, a.protocol)),
              this.processCell(a.server, a.processId, a.sessionId),
              h(
                'td',
                { class: 'small mono' },
                Object.entries(a.metadata)
                  .map(([k, v]) => `${k}=${String(v)}`)
                  .join(' ') || '–',
              ),
            ),
          ),
    );
  }
}
