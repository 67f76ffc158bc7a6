// One row of the processes table: which columns there are, and how a row element shows a process. A row element is
// reused for other processes as they stream past; its cells are made once and then only what differs is changed.
import { fmtAgo, fmtBytes, h, replace } from '../dom.js';
import { commandOf, type Row } from '../processTable.js';
import { type Store, sessionKey } from '../store.js';
import { badges, statePill, stateText } from './badges.js';

export type Col = 'server' | 'state' | 'command' | 'client' | 'sandbox' | 'pid' | 'started' | 'output';

export const COLS: Record<Col, { label: string; width: string; cls?: string; cell?: string }> = {
  server: { label: 'Server', width: '130px', cell: 'srv' },
  state: { label: 'State', width: '160px' },
  command: { label: 'Command', width: 'auto', cell: 'cmd mono' },
  client: { label: 'Client', width: '150px' },
  sandbox: { label: 'Sandbox', width: '168px' },
  pid: { label: 'PID', width: '80px', cls: 'num', cell: 'num mono' },
  started: { label: 'Started', width: '90px' },
  output: { label: 'Output', width: '90px', cls: 'num', cell: 'num' },
};

/** What a row element shows now (kept on the JS side: reading the DOM back costs more than comparing strings). */
export interface Shown {
  cols: Col[];
  key: string;
  cls: string;
  cells: string[];
}

/** What a render passes to bindRow. */
export interface RowContext {
  store: Store;
  cols: Col[];
  selected: string | null;
  shown: WeakMap<HTMLTableRowElement, Shown>;
}

/**
 * Fills a row element for a process. The cells are made once per element (and per set of columns); a bind only
 * changes what differs, since rows move through the elements as processes stream in.
 */
export function bindRow(tr: HTMLTableRowElement, r: Row, o: RowContext): void {
  const store = o.store;
  const stale = store.isStale(r);
  let shown = o.shown.get(tr);
  if (!shown || shown.cols !== o.cols) {
    shown = { cols: o.cols, key: '', cls: '', cells: o.cols.map(() => '') };
    o.shown.set(tr, shown);
    tr.tabIndex = 0;
    tr.replaceChildren(...o.cols.map((c) => h('td', { class: COLS[c].cell ?? null })));
  }
  if (shown.key !== r.key) {
    shown.key = r.key;
    tr.dataset.key = r.key;
    tr.dataset.processId = r.processId;
    tr.dataset.server = r.server;
  }
  const cls = `${r.key === o.selected ? 'selected' : ''}${stale ? ' stale' : ''}`;
  if (shown.cls !== cls) {
    shown.cls = cls;
    tr.className = cls;
  }
  const now = Date.now() + store.skew;
  const cells = shown.cells;
  for (let i = 0; i < o.cols.length; i++) {
    const c = o.cols[i]!;
    const td = tr.children[i] as HTMLTableCellElement;
    // What the cell shows, as one string: the cell is only touched when it changed.
    let sig: string;
    switch (c) {
      case 'server':
        sig = store.serverName(r.server);
        if (sig !== cells[i]) {
          setCellText(td, sig);
          td.title = sig;
        }
        break;
      case 'state':
        sig = `${r.state}|${r.exitCode}|${stale}`;
        if (sig === cells[i]) break;
        // A process moving on (running → exiting → exited) changes the pill it has; a pill is made only when the
        // cell had none or the stale badge comes or goes.
        if (!stale && td.childNodes.length === 1 && cells[i]!.endsWith('|false')) {
          const pill = td.firstChild as HTMLElement;
          const { cls, text } = stateText(r);
          const want = `state state-${cls}`;
          if (pill.className !== want) pill.className = want;
          pill.dataset.state = r.state;
          setCellText(pill, text);
        } else
          replace(
            td,
            statePill(r),
            stale ? h('span', { class: 'badge badge-stale', title: 'last known state' }, 'stale') : null,
          );
        break;
      case 'command':
        sig = commandOf(r);
        if (sig !== cells[i]) {
          setCellText(td, sig);
          td.title = sig;
        }
        break;
      case 'client': {
        const self = store.selfSession === sessionKey(r.server, r.sessionId);
        sig = `${r.clientName}|${self}`;
        if (sig !== cells[i])
          replace(td, r.clientName, self ? h('span', { class: 'muted small self-tag' }, ' (panel)') : null);
        break;
      }
      case 'sandbox': {
        const g = r.sandboxGuarantees;
        sig = `${r.badge}|${r.policy?.clientWrapped === true && r.policy?.unwrapped === true}|${g ? `${g.backend}:${g.weaker.join(',')}` : ''}`;
        if (sig !== cells[i]) replace(td, ...badges(r, true));
        break;
      }
      case 'pid':
        sig = r.pid ? String(r.pid) : '–';
        if (sig !== cells[i]) setCellText(td, sig);
        break;
      case 'started':
        sig = fmtAgo(r.startedAt, now);
        if (sig !== cells[i]) {
          setCellText(td, sig);
          td.title = new Date(r.startedAt).toLocaleString();
        }
        break;
      case 'output':
        sig = fmtBytes(r.bytesOut);
        if (sig !== cells[i]) setCellText(td, sig);
        break;
    }
    cells[i] = sig;
  }
}

/**
 * Sets a cell's text. A cell that holds one text node keeps it and only its characters change: the browser then
 * re-measures the text, where `textContent =` removes the node and adds a new one, whose layout object is made anew
 * (every visible row is re-bound in each frame of a flood; issue 38).
 */
export function setCellText(el: HTMLElement, text: string): void {
  const t = el.firstChild;
  if (t !== null && t === el.lastChild && t.nodeType === Node.TEXT_NODE) {
    if ((t as Text).data !== text) (t as Text).data = text;
  } else el.textContent = text;
}
