// Servers: the Corral servers this host watches (a fleet host), with the state of the link to each, its readiness,
// its rows, what the host refused from it, and a form to join another by URL and its panel credential.

import type { MethodParams } from '../../src/protocol/methods.js';
import type { MonitorServer } from '../../src/protocol/monitor.js';
import { fmtAgo, fmtBytes, h, paced, replace } from '../dom.js';
import type { AppContext, View } from '../view.js';

const STATE_TEXT: Record<MonitorServer['state'], string> = {
  local: 'this host',
  connecting: 'connecting…',
  connected: 'connected',
  disconnected: 'disconnected',
};

/** `Name: Value` lines → headers (blank lines ignored). */
export function parseHeaderLines(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const i = line.indexOf(':');
    if (i <= 0) throw new Error(`not a header (Name: Value): ${line.trim()}`);
    out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return out;
}

export class ServersView implements View {
  readonly el = h('section', { 'aria-label': 'Servers' });
  private readonly body = h('tbody');
  private readonly url = h('input', {
    class: 'input mono',
    type: 'text',
    placeholder: 'ws://host:port/  (a ?token= in it is used as the credential)',
    'aria-label': 'Server URL',
    'data-testid': 'join-url',
  });
  private readonly token = h('input', {
    class: 'input mono',
    type: 'password',
    placeholder: "the server's panel token",
    'aria-label': 'Panel token',
    autocomplete: 'off',
    'data-testid': 'join-token',
  });
  private readonly name = h('input', {
    class: 'input',
    type: 'text',
    placeholder: 'name (optional)',
    'aria-label': 'Name',
    'data-testid': 'join-name',
  });
  private readonly headers = h('textarea', {
    class: 'input mono',
    rows: '2',
    placeholder: 'X-Sandbox-ID: pod-2\nX-Sandbox-Namespace: default',
    'aria-label': 'Headers',
    'data-testid': 'join-headers',
  });
  private readonly result = h('div', { class: 'result', 'data-testid': 'join-result' });

  constructor(private readonly ctx: AppContext) {
    const form = h(
      'form',
      {
        class: 'card form',
        'data-testid': 'join-form',
        onsubmit: (e: Event) => {
          e.preventDefault();
          void this.join();
        },
      },
      h('h3', null, 'Add a server'),
      h(
        'p',
        { class: 'muted small' },
        'A Corral server started with a panel credential (',
        h('code', null, 'corral exec-server --panel-token-file'),
        ' or ',
        h('code', null, 'corral serve'),
        "). Its processes, network decisions and approvals join these views; actions on them use that server's credential.",
      ),
      h('label', { class: 'field' }, h('span', null, 'URL'), this.url),
      h('label', { class: 'field' }, h('span', null, 'Panel token'), this.token),
      h(
        'label',
        { class: 'field' },
        h('span', null, 'Headers (one per line, e.g. for a router)'),
        this.headers,
      ),
      h('label', { class: 'field' }, h('span', null, 'Name'), this.name),
      h(
        'div',
        { class: 'btn-row' },
        h('button', { class: 'btn primary', type: 'submit', 'data-testid': 'join-submit' }, 'Add server'),
      ),
      this.result,
    );
    this.el.append(
      h('div', { class: 'toolbar' }, h('h2', null, 'Servers'), h('div', { class: 'grow' })),
      h(
        'div',
        { class: 'card' },
        h(
          'div',
          { class: 'table-wrap' },
          h(
            'table',
            { class: 'table', 'data-testid': 'servers-table' },
            h(
              'thead',
              null,
              h(
                'tr',
                null,
                ['Server', 'State', 'Ready', 'Processes', 'Refused', 'Since', 'Last problem', ''].map((t) =>
                  h('th', null, t),
                ),
              ),
            ),
            this.body,
          ),
        ),
      ),
      form,
    );
    ctx.store.on((c) => {
      if (c === 'servers' || c === 'connection' || c === 'snapshot') this.schedule();
    });
    setInterval(() => {
      if (!this.el.hidden) this.render();
    }, 1000);
  }

  show(): void {
    this.render();
  }

  /** Paced (dom.ts), and nothing while the view is hidden: show() draws what it missed. */
  private readonly schedule = paced(() => {
    if (!this.el.hidden) this.render();
  });

  private render(): void {
    const store = this.ctx.store;
    const list = store.servers.size > 0 ? [...store.servers.values()] : [];
    const now = Date.now() + store.skew;
    replace(
      this.body,
      list.map((s) =>
        h(
          'tr',
          { 'data-server': s.id, 'data-state': s.state },
          h(
            'td',
            null,
            h('strong', null, s.name),
            s.url ? h('div', { class: 'muted small mono' }, s.url) : null,
          ),
          h(
            'td',
            null,
            h('span', { class: 'status-dot', 'data-state': s.state === 'local' ? 'connected' : s.state }),
            ` ${STATE_TEXT[s.state]}`,
            s.state === 'disconnected' && s.retryAt
              ? h(
                  'span',
                  { class: 'muted small' },
                  ` · retry in ${Math.max(0, Math.round((s.retryAt - now) / 1000))}s`,
                )
              : null,
          ),
          h('td', null, s.ready === null ? '–' : s.ready ? 'ready' : 'not ready'),
          h('td', { class: 'num' }, String(store.processes.byServer.get(s.id)?.total ?? 0)),
          h('td', { class: s.rejected > 0 ? 'num bad' : 'num' }, String(s.rejected)),
          h('td', null, s.since ? fmtAgo(s.since, now) : '–'),
          h(
            'td',
            { class: 'small' },
            s.lastError ?? '',
            s.dropped
              ? h(
                  'div',
                  { class: 'bad', 'data-testid': 'dropped' },
                  `dropped ${fmtAgo(s.dropped.at, now)}: ${s.dropped.reason}`,
                )
              : null,
            s.overBudget
              ? h(
                  'div',
                  { class: 'bad', 'data-testid': 'over-budget' },
                  `over budget: rows forgotten to keep ${fmtBytes(s.keptBytes ?? 0)} of ${fmtBytes(s.budgetBytes ?? 0)}`,
                )
              : null,
          ),
          h(
            'td',
            null,
            s.id === ''
              ? null
              : h(
                  'button',
                  {
                    class: 'btn small ghost',
                    'data-testid': 'leave',
                    onclick: () =>
                      this.ctx.conn
                        .request('fleet/leave', { server: s.id })
                        .then(() => this.ctx.toast(`Removed ${s.name}`))
                        .catch((e: Error) => this.ctx.toast(`Remove failed: ${e.message}`, 'error')),
                  },
                  'Remove',
                ),
          ),
        ),
      ),
    );
  }

  private async join(): Promise<void> {
    let headers: Record<string, string>;
    try {
      headers = parseHeaderLines(this.headers.value);
    } catch (e) {
      replace(this.result, h('div', { class: 'result-head bad' }, (e as Error).message));
      return;
    }
    const params: MethodParams<'fleet/join'> = { url: this.url.value.trim(), headers };
    if (this.token.value !== '') params.token = this.token.value;
    if (this.name.value.trim() !== '') params.name = this.name.value.trim();
    try {
      const r = await this.ctx.conn.request('fleet/join', params);
      replace(this.result, h('div', { class: 'result-head ok' }, `Joined ${r.server.name}`));
      this.token.value = '';
      this.url.value = '';
    } catch (e) {
      replace(
        this.result,
        h('div', { class: 'result-head bad', 'data-testid': 'join-error' }, (e as Error).message),
      );
    }
  }
}
