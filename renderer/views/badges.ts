// The sandbox badges, the state pill and the effective-policy card of a process (the table and the detail pane).
import { WEAKER_GUARANTEE_LABELS } from '../../src/protocol/exec.js';
import type { MonitorProcess } from '../../src/protocol/monitor.js';
import { h } from '../dom.js';

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
  const g = p.sandboxGuarantees;
  if (g?.backend === 'landlock') {
    const weaker = g.weaker.map((w) => WEAKER_GUARANTEE_LABELS[w]);
    out.push(
      h(
        'span',
        {
          class: `badge badge-landlock${weaker.length ? ' badge-weaker' : ''}`,
          title: `Confined by Corral's Landlock backend (ABI ${g.landlockAbi ?? '?'}, ${g.reason === 'fallback' ? 'namespaces unavailable here' : 'asked for by the client'}): ${weaker.length ? `weaker than bubblewrap: ${weaker.join(', ')}` : 'every policy element held exactly'}`,
          'data-badge-extra': 'landlock',
        },
        ['landlock', ...weaker].join(' — '),
      ),
    );
  }
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

/** A process's state as its pill shows it: the pill's colour (`state-<cls>`) and its words. */
export function stateText(p: MonitorProcess): { cls: string; text: string } {
  const cls =
    p.state === 'running' ? 'running' : p.exitCode === 0 ? 'ok' : p.exitCode === null ? 'unknown' : 'failed';
  const text =
    p.state === 'running'
      ? 'running'
      : `${p.state === 'closed' ? 'exited' : 'exiting'} ${p.exitCode ?? ''}`.trim();
  return { cls, text };
}

export function statePill(p: MonitorProcess): HTMLElement {
  const { cls, text } = stateText(p);
  return h('span', { class: `state state-${cls}`, 'data-state': p.state }, text);
}

function warningList(warnings: string[]): HTMLElement | null {
  return warnings.length > 0
    ? h(
        'ul',
        { class: 'warnings' },
        warnings.map((w) => h('li', null, w)),
      )
    : null;
}

/** The effective policy: writable roots (with their read-only carve-outs), network mode, and the rest. */
export function policyView(p: MonitorProcess): HTMLElement {
  if (p.badge === 'client-wrapped') {
    // The server read the launcher's flags (src/sandbox/codexWrapped.ts); the panel only shows them.
    const flags = (p.launcherFlags ?? []).map((f) => [f.name, f.value ?? ''] as const);
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
      warningList(warnings),
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
    warningList(warnings),
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
