// The Corral panel: processes, network, policy debugger and a run form, over the one client API.
import '@xterm/xterm/css/xterm.css';
import './styles.css';
import type { DoctorReport } from '../src/protocol/doctor.js';
import { type SelftestReport, selftestPointer } from '../src/protocol/selftest.js';
import { Connection } from './client.js';
import { fmtBytes, h, paced, replace, setText } from './dom.js';
import { type HostInfo, Store } from './store.js';
import type { AppContext, View, ViewName } from './view.js';
import { ApprovalsView } from './views/approvals.js';
import { HistoryView } from './views/history.js';
import { NetworkView } from './views/network.js';
import { PolicyView } from './views/policy.js';
import { ProcessesView } from './views/processes.js';
import { RunView } from './views/run.js';
import { ServersView } from './views/servers.js';

/** What bounds each command, or a warning that nothing does (host/info resourceLimits). */
function limitsLine(info: HostInfo): HTMLElement | null {
  const r = info.resourceLimits;
  if (!r) return null;
  if (r.version === 'none')
    return h(
      'div',
      { class: 'small warn', title: r.problem ?? '' },
      '⚠ commands are not bounded (no cgroup)',
    );
  const parts = [
    r.pidsMax !== null ? `${r.pidsMax} pids` : null,
    r.memoryMaxBytes !== null ? fmtBytes(r.memoryMaxBytes) : null,
  ].filter(Boolean);
  return h(
    'div',
    { class: r.problem ? 'small warn' : 'small', title: r.problem ?? `cgroup ${r.version}` },
    `each command: ≤ ${parts.join(', ') || 'no limit'} (cgroup ${r.version})`,
  );
}

const store = new Store();
const views = {} as Record<ViewName, View>;
let current: ViewName = 'processes';

const statusDot = h('span', { class: 'status-dot', 'data-state': 'connecting' });
const statusText = h('span', { class: 'status-text' }, 'connecting…');
const retryBtn = h(
  'button',
  { class: 'btn small', hidden: true, onclick: () => conn.retry() },
  'Reconnect now',
);
const statusBox = h('div', { class: 'status', id: 'conn-status' }, statusDot, statusText, retryBtn);
const banner = h('div', { class: 'banner', hidden: true, id: 'disconnected-banner' });
const toastBox = h('div', { class: 'toasts' });
const connectBox = h('div', { class: 'connect-box' });

const conn = new Connection({
  state(state, detail) {
    statusDot.dataset.state = state;
    document.body.dataset.conn = state;
    statusText.textContent =
      state === 'connected'
        ? `connected · ${conn.transport === 'ipc' ? 'desktop IPC' : 'WebSocket'}`
        : state === 'connecting'
          ? detail
          : 'disconnected';
    retryBtn.hidden = state !== 'disconnected';
    banner.hidden = state !== 'disconnected';
    if (state === 'disconnected') {
      const wait = conn.retryAt ? Math.max(0, Math.round((conn.retryAt - Date.now()) / 1000)) : null;
      replace(
        banner,
        h('strong', null, 'Disconnected from the Corral host. '),
        h('span', null, detail.replace(/[^.]$/, '$&.')),
        h('span', { class: 'retry-in' }, wait !== null ? ` Retrying in ${wait}s.` : ''),
        ' The lists below show the last known state.',
      );
    }
    store.emit('connection');
  },
  async ready(api) {
    // The panel's own session is the one the snapshot marks `self` (the sessionId initialize returned is its resume
    // key, a secret that nothing else shows).
    const [snapshot, info] = await Promise.all([
      api.request('monitor/subscribe', { output: 'followed' }),
      api.request('host/info', {}).catch(() => null),
    ]);
    store.info = info;
    store.loadSnapshot(snapshot);
    store.emit('info');
    // The doctor report takes a few sandboxed starts the first time: it comes when it comes.
    api.request('host/doctor', {}).then(
      (d) => {
        store.doctor = d;
        store.emit('info');
      },
      () => {},
    );
    api.request('monitor/selftest', {}).then(
      (r) => {
        store.selftest = r.last;
        store.emit('info');
      },
      () => {},
    );
    // Network approvals: the prompt stack over every view (issue 7).
    await (views.approvals as ApprovalsView).subscribe(api);
  },
  notification: (m, p) => {
    if (m.startsWith('approvals/')) (views.approvals as ApprovalsView | undefined)?.notification(m, p);
    else store.notification(m, p);
  },
});

const ctx: AppContext = {
  store,
  conn,
  go(view, arg) {
    select(view);
    if (view === 'processes' && arg) (views.processes as ProcessesView).select(arg);
  },
  toast(text, kind = 'info') {
    const t = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
    toastBox.appendChild(t);
    setTimeout(() => t.remove(), kind === 'error' ? 8000 : 4000);
  },
};

const nav = h('nav', { class: 'nav' });
const navItems: Record<ViewName, HTMLButtonElement> = {} as Record<ViewName, HTMLButtonElement>;
const labels: [ViewName, string, string][] = [
  ['processes', 'Processes', '▤'],
  ['network', 'Network', '⇄'],
  ['approvals', 'Approvals', '⚑'],
  ['history', 'History', '⟲'],
  ['servers', 'Servers', '◎'],
  ['policy', 'Policy debugger', '⚖'],
  ['run', 'Run a command', '▶'],
];
const counters: Partial<Record<ViewName, HTMLSpanElement>> = {};
for (const [name, label, icon] of labels) {
  const count = h('span', { class: 'nav-count' });
  counters[name] = count;
  const b = h(
    'button',
    { class: 'nav-item', 'data-view': name, onclick: () => select(name) },
    h('span', { class: 'nav-icon', 'aria-hidden': 'true' }, icon),
    h('span', { class: 'nav-label' }, label),
    count,
  );
  navItems[name] = b;
  nav.appendChild(b);
}

function select(name: ViewName): void {
  if (name === current && views[name].el.isConnected && !views[name].el.hidden) return;
  views[current]?.hide?.();
  views[current].el.hidden = true;
  current = name;
  views[name].el.hidden = false;
  views[name].show?.();
  for (const [n, b] of Object.entries(navItems)) b.classList.toggle('active', n === name);
  location.replace(`${location.pathname}${location.search}${withView(location.hash, name)}`);
}

/** Keeps `token=` in the fragment and records the view next to it. */
function withView(hash: string, view: string): string {
  const parts = hash
    .replace(/^#/, '')
    .split('&')
    .filter((x) => x !== '' && !x.startsWith('view='));
  parts.push(`view=${view}`);
  return `#${parts.join('&')}`;
}

function renderConnectBox(): void {
  const info = store.info;
  if (!info) {
    replace(connectBox);
    return;
  }
  const masked = info.execUrl.replace(/token=[^&]+/, 'token=••••••');
  const urlEl = h('code', { class: 'exec-url', title: 'Exec-server URL for agents' }, masked);
  let shown = false;
  replace(
    connectBox,
    h('span', { class: 'muted' }, 'Agents connect to'),
    urlEl,
    h(
      'button',
      {
        class: 'btn small ghost',
        onclick: (e: Event) => {
          shown = !shown;
          urlEl.textContent = shown ? info.execUrl : masked;
          (e.currentTarget as HTMLButtonElement).textContent = shown ? 'Hide token' : 'Show token';
        },
      },
      'Show token',
    ),
    h(
      'button',
      {
        class: 'btn small ghost',
        onclick: () =>
          navigator.clipboard
            .writeText(`CODEX_EXEC_SERVER_URL=${info.execUrl}`)
            .then(() => ctx.toast('Copied CODEX_EXEC_SERVER_URL=… to the clipboard'))
            .catch(() => ctx.toast('The clipboard is not available here', 'error')),
      },
      'Copy',
    ),
  );
}

/** The host's `corral doctor` report, folded: which sandbox each policy gets, and what is missing with its fix. */
function doctorSummary(d: DoctorReport | null): HTMLElement | null {
  if (!d) return null;
  const missing = d.checks.filter((c) => c.status === 'missing');
  return h(
    'details',
    { class: 'small doctor', 'data-doctor': missing.length > 0 ? 'missing' : 'ok' },
    h('summary', null, missing.length > 0 ? `doctor: ${missing.length} to fix` : 'doctor: all good'),
    ...d.policies.map((p) => h('div', { 'data-policy': p.policy }, `${p.policy}: ${p.sandbox}`)),
    ...missing.map((c) =>
      h('div', { class: 'muted', title: c.detail }, `✗ ${c.title}: ${c.fix ?? c.detail}`),
    ),
  );
}

/** The last `corral selftest` on the host: its time and verdict, folded; each case's status and detail inside. */
function selftestSummary(r: SelftestReport | null | undefined): HTMLElement | null {
  if (r === undefined) return null;
  const broken = r ? r.cases.filter((c) => c.status === 'broken') : [];
  const when = r ? new Date(r.time) : null;
  const at = when && !Number.isNaN(when.getTime()) ? when.toLocaleString() : (r?.time ?? '');
  return h(
    'details',
    {
      class: 'small selftest',
      'data-selftest': r === null ? 'never' : r.ok ? 'held' : 'broken',
      title: selftestPointer(r),
    },
    h(
      'summary',
      broken.length > 0 ? { class: 'warn' } : null,
      r === null
        ? 'self-test: never run here'
        : r.ok
          ? `self-test: held (${at})`
          : `self-test: ${broken.length} broken (${at})`,
    ),
    r === null
      ? h('div', { class: 'muted' }, 'run `corral selftest` on the host')
      : r.cases.map((c) =>
          h(
            'div',
            { 'data-case': c.name, class: c.status === 'broken' ? 'warn' : 'muted', title: c.detail },
            `${c.status === 'held' ? '✓' : c.status === 'broken' ? '✗' : '–'} ${c.name}: ${c.status}`,
          ),
        ),
  );
}

/** The nav's counters: only what differs is written (a write costs the page a style and layout pass). */
function updateCounters(): void {
  const running = store.processes.counts.running;
  setText(counters.processes!, running > 0 ? String(running) : '');
  let down = 0;
  for (const s of store.servers.values()) if (s.state === 'disconnected') down++;
  setText(counters.servers!, down > 0 ? `${down} down` : store.fleet ? String(store.servers.size) : '');
  counters.servers!.classList.toggle('alert', down > 0);
  setText(counters.network!, store.blocked.length > 0 ? String(store.blocked.length) : '');
  counters.network!.classList.toggle('alert', store.blocked.length > 0);
}

/** Counters move on the views' pace (dom.ts `paced`), not once per feed batch. */
const scheduleCounters = paced(updateCounters);

function boot(): void {
  views.processes = new ProcessesView(ctx);
  views.network = new NetworkView(ctx);
  const approvals = new ApprovalsView(ctx);
  approvals.onCount = (n) => {
    counters.approvals!.textContent = n > 0 ? String(n) : '';
    counters.approvals!.classList.toggle('alert', n > 0);
  };
  views.approvals = approvals;
  views.history = new HistoryView(ctx);
  views.servers = new ServersView(ctx);
  views.policy = new PolicyView(ctx);
  views.run = new RunView(ctx);
  const main = h('main', { class: 'main' }, banner);
  for (const name of Object.keys(views) as ViewName[]) {
    views[name].el.hidden = true;
    views[name].el.classList.add('view');
    views[name].el.id = `view-${name}`;
    main.appendChild(views[name].el);
  }
  const header = h(
    'header',
    { class: 'topbar' },
    h('div', { class: 'brand' }, h('span', { class: 'logo', 'aria-hidden': 'true' }, '◆'), 'Corral'),
    connectBox,
    statusBox,
  );
  // The sidebar's content in a box of the sidebar's fixed size (styles.css .sidebar-in): a counter that changes lays
  // out that box alone, not the document.
  const side = h(
    'aside',
    { class: 'sidebar' },
    h('div', { class: 'sidebar-in' }, nav, h('div', { class: 'side-foot muted', id: 'side-foot' })),
  );
  document.body.appendChild(
    h('div', { class: 'shell' }, header, side, main, (views.approvals as ApprovalsView).prompts, toastBox),
  );
  store.on((c) => {
    if (c === 'info') {
      renderConnectBox();
      const foot = document.getElementById('side-foot');
      if (foot && store.info) {
        replace(
          foot,
          `Corral ${store.info.version} · ${store.info.mode}`,
          store.info.logFile
            ? h('div', { class: 'small', title: store.info.logFile }, 'log: ', store.info.logFile)
            : null,
          limitsLine(store.info),
          conn.requireSandbox
            ? h('div', { class: 'small' }, 'sandbox required: starts without one are refused')
            : null,
          doctorSummary(store.doctor),
          selftestSummary(store.selftest),
        );
      }
    }
    if (c === 'processes' || c === 'network' || c === 'servers') scheduleCounters();
  });
  const m = /(?:^#|&)view=(\w+)/.exec(location.hash);
  const initial = (m && m[1]! in views ? m[1] : 'processes') as ViewName;
  current = initial;
  select(initial);
  conn.start();
  // The disconnected banner counts down.
  setInterval(() => {
    if (conn.state === 'disconnected' && conn.retryAt) {
      const wait = Math.max(0, Math.round((conn.retryAt - Date.now()) / 1000));
      const el = banner.querySelector('.retry-in');
      if (el) el.textContent = ` Retrying in ${wait}s.`;
    }
  }, 1000);
}

boot();
