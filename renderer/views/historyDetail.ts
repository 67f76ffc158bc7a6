// The detail of a process kept in the audit trail (History): its facts, its policy, its stored output (head and tail),
// its network decisions and the files its session changed while it ran. Formatting only: it all comes from the server.
import type { AuditProcessItem, AuditProcessResult } from '../../src/protocol/audit.js';
import { b64ToBytes, fmtBytes, fmtDuration, h, shellJoin } from '../dom.js';
import { usageFacts } from './usage.js';

export function when(ms: number | null): string {
  if (ms === null) return '–';
  const d = new Date(ms);
  return `${d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })} ${d.toLocaleTimeString(undefined, { hour12: false })}`;
}

export function exitText(p: AuditProcessItem): string {
  if (p.exitedAt === null) return p.closedAt === null ? 'no exit recorded' : 'closed';
  if (p.signal) return `killed (${p.signal})`;
  return `exit ${p.exitCode}`;
}

/** Output bytes as text (invalid UTF-8 shows as U+FFFD; the export keeps the exact bytes). */
function decode(b64: string): string {
  return new TextDecoder('utf-8').decode(b64ToBytes(b64));
}

/** The detail of a stored process: its facts, policy, stored output, network decisions and file changes. */
export function processDetail(
  d: AuditProcessResult,
  p: NonNullable<AuditProcessResult['process']>,
  onClose: () => void,
  onReplay: (into: HTMLElement) => void,
): HTMLElement[] {
  const replayBox = h('div', { class: 'replay-box' });
  const replayBtn = h(
    'button',
    {
      class: 'btn small',
      'data-testid': 'history-replay',
      title: p.tty ? 'Replay the terminal session as it ran' : 'Replay the output with its times',
      onclick: () => onReplay(replayBox),
    },
    'Replay',
  );
  const close = h('button', { class: 'btn small ghost', onclick: onClose }, 'Close');
  const ran = p.closedAt !== null ? fmtDuration(p.closedAt - p.startedAt) : '–';
  const facts = h(
    'dl',
    { class: 'kv kv4' },
    h('dt', null, 'Client'),
    h('dd', null, p.clientName),
    h('dt', null, 'Session'),
    h('dd', { class: 'mono small' }, p.sessionId),
    h('dt', null, 'Started'),
    h('dd', null, when(p.startedAt)),
    h('dt', null, 'Ran'),
    h('dd', null, ran),
    h('dt', null, 'Exit'),
    h('dd', { 'data-testid': 'history-exit' }, exitText(p)),
    h('dt', null, 'PID'),
    h('dd', null, String(p.pid ?? '–')),
    h('dt', null, 'Sandbox'),
    h('dd', null, p.sandboxType, p.sandboxDenied ? ' (denied something)' : ''),
    h('dt', null, 'Terminal'),
    h('dd', null, p.tty ? 'yes' : 'no'),
    h('dt', null, 'Directory'),
    h('dd', { class: 'mono small' }, p.cwd),
    h('dt', null, 'Limit hit'),
    h('dd', null, p.limitHit ?? '–'),
    ...usageFacts(p.usage),
  );
  const pre = (v: unknown) => h('pre', { class: 'pipe-output small' }, JSON.stringify(v, null, 2));
  return [
    h(
      'div',
      { class: 'detail-bar' },
      h(
        'div',
        { class: 'detail-head' },
        h('div', { class: 'detail-title mono', title: shellJoin(p.argv) }, shellJoin(p.argv)),
        h('div', { class: 'muted small' }, `process ${p.processId}`),
      ),
      close,
    ),
    h('div', { class: 'detail-facts' }, facts),
    h(
      'div',
      { class: 'detail-policy' },
      h(
        'details',
        { class: 'env' },
        h('summary', null, `Environment: ${p.envNames.length} names (values are never stored)`),
        h('div', { class: 'env-keys mono small' }, p.envNames.join(' ')),
      ),
      p.policy ? h('details', { class: 'env' }, h('summary', null, 'Sandbox policy'), pre(p.policy)) : null,
      p.network
        ? h('details', { class: 'env' }, h('summary', null, 'Managed network'), pre(p.network))
        : null,
      p.metadata ? h('details', { class: 'env' }, h('summary', null, 'Metadata'), pre(p.metadata)) : null,
      h('h4', null, 'Output ', p.outputBytes > 0 ? replayBtn : null),
      replayBox,
      storedOutput(d, p.outputBytes),
      h('h4', null, `Network decisions (${d.network.length})`),
      miniTable(
        'history-network',
        ['Time', 'Decision', 'Host', 'Reason', 'Rule'],
        d.network.map((n) => [
          when(n.time),
          h('span', { class: `decision decision-${n.decision}` }, n.decision),
          h('span', { class: 'mono' }, `${n.host}:${n.port}`),
          n.reason,
          // What decided it (issue 37, item 2).
          n.ruleOrigin
            ? h('span', { class: 'mono small', title: n.ruleId ?? '' }, `${n.ruleOrigin}: ${n.ruleId ?? '–'}`)
            : '–',
        ]),
        'No network decisions.',
      ),
      h('h4', null, `Files changed by its session while it ran (${d.files.length})`),
      miniTable(
        'history-files',
        ['Time', 'Operation', 'Path', 'Outcome'],
        d.files.map((f) => [
          when(f.time),
          f.op,
          h('span', { class: 'mono small' }, f.path, f.destination ? ` → ${f.destination}` : ''),
          f.outcome,
        ]),
        'No fs/* changes.',
      ),
    ),
  ];
}

function storedOutput(d: AuditProcessResult, total: number): HTMLElement {
  const box = h('pre', { class: 'pipe-output', 'data-testid': 'history-output', tabindex: '0' });
  if (!d.output) {
    box.append(
      h(
        'span',
        { class: 'out-note' },
        total === 0 ? 'No output.' : `${fmtBytes(total)} of output, none stored.`,
      ),
    );
    return box;
  }
  box.append(decode(d.output.head));
  if (d.output.omittedBytes > 0) {
    box.append(h('span', { class: 'out-note' }, `\n… ${fmtBytes(d.output.omittedBytes)} not stored …\n`));
  }
  if (d.output.tail) box.append(decode(d.output.tail));
  return box;
}

function miniTable(testid: string, cols: string[], rows: (string | Node)[][], empty: string): HTMLElement {
  return h(
    'table',
    { class: 'table compact', 'data-testid': testid },
    h('thead', null, h('tr', null, ...cols.map((c) => h('th', null, c)))),
    h(
      'tbody',
      null,
      rows.length === 0
        ? h('tr', null, h('td', { colspan: String(cols.length), class: 'empty-cell' }, empty))
        : rows.map((r) => h('tr', null, ...r.map((c) => h('td', null, c)))),
    ),
  );
}
