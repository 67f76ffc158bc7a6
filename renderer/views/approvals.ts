// Network approvals (issue 7): a non-modal prompt stack visible from every view (process, command, host, port,
// protocol, method; allow once / for this process / for the session / deny, with the time left), and a view listing
// the pending prompts, the remembered decisions (revocable), the approval audit trail and the config export.
import type {
  ApprovalAuditEvent,
  ApprovalDecision,
  ApprovalPrompt,
  ApprovalRule,
  ExportResult,
  LearningState,
  RememberedDecision,
} from '../../src/protocol/approvals.js';
import { MAX_RULE_NOTE } from '../../src/protocol/approvals.js';
import type { TypedRequests } from '../../src/protocol/client.js';
import {
  h,
  type KeptRows,
  keptRows,
  type Paced,
  paced,
  reconcile,
  replace,
  setText,
  shellJoin,
} from '../dom.js';
import type { AppContext, View } from '../view.js';
import { eachServer, ProjectsCard } from './approvalsProjects.js';

const MAX_AUDIT = 500;
/**
 * Cards the prompt stack shows at once, the oldest (first to time out) first; the others wait behind a line that
 * counts them and opens the Approvals view, which lists every pending prompt. The stack holds about two cards on
 * screen: a burst of prompts made a card for each (~40 elements) a few times a second, most of them out of sight,
 * and their layout and paint were most of what the page spent (issue 38).
 */
const MAX_CARDS = 3;

const pkey = (server: string | undefined, id: string) => `${server ?? ''}\u0000${id}`;
/** The `server` member of a call about a row of that server (none for this host's own). */
const on = (server: string | undefined) => (server ? { server } : {});

/** Each button: its decision, label, class, and what it stores (its title: said before it is pressed). */
const BUTTONS: [ApprovalDecision, string, string, string][] = [
  ['allowOnce', 'Allow once', 'btn small primary', 'Releases the requests held now; stores nothing.'],
  [
    'allowProcess',
    'Allow for this process',
    'btn small',
    'Remembers an allow for this target until this process ends.',
  ],
  [
    'allowSession',
    'Allow for the session',
    'btn small',
    'Remembers an allow for this target for every process of this session, until it ends.',
  ],
  [
    'allowProject',
    'Allow for this project',
    'btn small',
    "Stores a rule for this workspace, kept across restarts: exactly this protocol, host and port (for plain HTTP also the method and the path's first segment).",
  ],
  ['denyOnce', 'Deny once', 'btn small danger', 'Blocks the requests held now; stores nothing.'],
  [
    'deny',
    'Deny for the session',
    'btn small danger',
    'Remembers a deny for this target for every process of this session, until it ends.',
  ],
];

const OUTCOME_TEXT: Record<string, string> = {
  allowOnce: 'allowed once',
  allowProcess: 'allowed for the process',
  allowSession: 'allowed for the session',
  deny: 'denied for the session',
  allowProject: 'allowed for the project (rule stored)',
  denyOnce: 'denied once',
  denyProcess: 'denied for the process',
  denyProject: 'denied for the project (rule stored)',
  timeout: 'timed out (blocked)',
  cancelled: 'cancelled: the process exited (blocked)',
  requested: 'asked',
  revoked: 'decision revoked',
  refused: 'not asked: too many prompts pending (blocked)',
};

function clock(ms: number): string {
  return new Date(ms).toLocaleTimeString(undefined, { hour12: false });
}

function target(p: { host: string; port: number; protocol: string }): string {
  const host = p.host.includes(':') ? `[${p.host}]` : p.host;
  return `${p.protocol} ${host}:${p.port}`;
}

/**
 * Whether the page may show desktop notifications, as last learnt. Asking `Notification.permission` is a synchronous
 * round trip to the browser process (~0.4 ms of the page's main thread here): a burst of 100 prompts a second asked it
 * once each, a third of the page's time (issue 38). It is read once, then kept current by the permission's change
 * event and by the answer to the one request this page makes.
 */
let permission: NotificationPermission | 'unsupported' =
  typeof Notification === 'undefined' ? 'unsupported' : Notification.permission;
if (permission !== 'unsupported')
  navigator.permissions
    ?.query({ name: 'notifications' })
    .then((s) => {
      s.onchange = () => {
        permission = Notification.permission;
      };
    })
    .catch(() => {});

/** Asks once (the Approvals view opened: the person's own gesture) whether prompts may notify. */
function askPermission(): void {
  if (permission !== 'default') return;
  void Notification.requestPermission()
    .then((p) => {
      permission = p;
    })
    .catch(() => {});
}

/**
 * A desktop notification for the prompts that came since the last render while the window is not focused (the
 * browser's Notification API: the served panel, and Electron's renderer, which shows it natively): one for a burst,
 * not one per prompt. Nothing without the person's permission.
 */
function notifyUnfocused(fresh: readonly ApprovalPrompt[]): void {
  const p = fresh[0];
  if (!p || permission !== 'granted' || document.hasFocus()) return;
  try {
    const more = fresh.length > 1 ? ` (and ${fresh.length - 1} more)` : '';
    const n = new Notification('Corral: allow network access?', {
      body: `${p.processId} (${p.clientName}) → ${target(p)}${p.method ? ` ${p.method}` : ''}${more}`,
      tag: `corral-approval-${p.id}`,
    });
    n.onclick = () => window.focus();
  } catch {
    // a browser that refuses page notifications
  }
}

export class ApprovalsView implements View {
  readonly el = h('section', { 'aria-label': 'Approvals' });
  /** The prompt stack: appended once to the shell, shown over whatever view is open. */
  readonly prompts = h('div', {
    class: 'approval-prompts',
    id: 'approval-prompts',
    role: 'region',
    'aria-label': 'Network approval requests',
    'aria-live': 'polite',
  });
  /** Called with the number of pending prompts (the nav counter). */
  onCount: (n: number) => void = () => {};
  /** By server and id (a fleet host relays the prompts of the servers it watches). */
  private readonly pending = new Map<string, ApprovalPrompt>();
  /** Remembered decisions per server ('' is this host). */
  private readonly decisionsBy = new Map<string, RememberedDecision[]>();
  private audit: ApprovalAuditEvent[] = [];
  private skew = 0;
  private readonly pendingBody = h('tbody');
  private readonly decisionsBody = h('tbody');
  /** Project rules (stored, kept across restarts) per server ('' is this host), each server's as it last said. */
  private readonly rulesBy = new Map<string, ApprovalRule[]>();
  private readonly rulesBody = h('tbody');
  private readonly auditBody = h('tbody');
  private readonly exportBox = h('pre', { class: 'code approval-export', 'data-testid': 'approval-export' });
  private readonly exportFormat = h(
    'select',
    { class: 'input', 'aria-label': 'Export format' },
    h('option', { value: 'json' }, 'JSON (managedNetwork.config)'),
    h('option', { value: 'toml' }, 'Codex TOML'),
  );
  private lastExport: ExportResult | null = null;
  private readonly ticker: ReturnType<typeof setInterval>;
  private visible = false;
  /** Keys of the prompts asked since the last render (a desktop notification for them, if the window is away). */
  private readonly fresh: string[] = [];
  /** The prompt cards shown, by prompt key: a card is made once (a click on it is never lost to a redraw). */
  private readonly cards = new Map<string, { card: HTMLElement; prompt: ApprovalPrompt; fleet: boolean }>();
  /** The audit rows made, by event (an event never changes once received). */
  private readonly auditRows = new WeakMap<ApprovalAuditEvent, HTMLTableRowElement>();
  /**
   * The remembered-decision and project-rule rows shown, by key, with what each was made from: a row is made anew only
   * when what it shows changed, so a click on its buttons is never lost to a row made anew under the pointer by a
   * render that changed nothing in it (every notification renders, and a render used to remake every row).
   */
  private readonly decisionRows: KeptRows<HTMLTableRowElement> = new Map();
  private readonly ruleRows: KeptRows<HTMLTableRowElement> = new Map();
  /**
   * Renders are paced (dom.ts): a burst of prompts and audit events is drawn a few times a second, not once per
   * notification; the view's tables only while it is shown.
   */
  private readonly schedule: Paced = paced(() => this.render());
  /** Learning mode and the repository file, per workspace (approvalsProjects.ts). */
  private readonly projects: ProjectsCard;

  constructor(private readonly ctx: AppContext) {
    this.projects = new ProjectsCard(
      ctx,
      () => [
        ...this.rules.map((r) => ({ server: r.server ?? '', workspace: r.workspace })),
        ...[...this.pending.values()].flatMap((p) =>
          p.workspace ? [{ server: p.server ?? '', workspace: p.workspace }] : [],
        ),
      ],
      () => this.schedule(),
    );
    const table = (testid: string, heads: string[], body: HTMLElement) =>
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          { class: 'table compact', 'data-testid': testid },
          h('thead', null, h('tr', null, ...heads.map((x) => h('th', null, x)))),
          body,
        ),
      );
    this.exportFormat.addEventListener('change', () => this.renderExport());
    replace(
      this.el,
      h('div', { class: 'toolbar' }, h('h2', null, 'Network approvals')),
      h(
        'p',
        { class: 'muted' },
        'Requests to hosts that a managed network neither allows nor denies wait here when the config sets ',
        h('code', null, 'hard_deny_allowlist_misses: false'),
        '. Unanswered requests are blocked when their time runs out.',
      ),
      h(
        'div',
        { class: 'card' },
        h('div', { class: 'card-head' }, h('h3', null, 'Pending')),
        table(
          'approvals-pending',
          ['Requested', 'Process', 'Command', 'Target', 'Method', 'Held', ''],
          this.pendingBody,
        ),
      ),
      h(
        'div',
        { class: 'card' },
        h('div', { class: 'card-head' }, h('h3', null, 'Remembered decisions')),
        table(
          'approvals-decisions',
          ['Decided', 'Decision', 'Scope', 'Target', 'Session / process', ''],
          this.decisionsBody,
        ),
      ),
      h(
        'div',
        { class: 'card' },
        h('div', { class: 'card-head' }, h('h3', null, 'Project rules')),
        h(
          'p',
          { class: 'muted small' },
          'Stored for a workspace (its git top-level, else the cwd) and kept across restarts; each matches exactly one protocol, host and port (and for plain HTTP the method and a path prefix, on segment boundaries). A deny wins.',
        ),
        table(
          'approvals-rules',
          ['Made', 'Rule', 'Target', 'Project', 'Origin', 'Hits', 'Last hit', ''],
          this.rulesBody,
        ),
      ),
      this.projects.el,
      h(
        'div',
        { class: 'card' },
        h(
          'div',
          { class: 'card-head' },
          h('h3', null, 'Export as policy'),
          h(
            'div',
            { class: 'btn-row' },
            this.exportFormat,
            h('button', { class: 'btn small', onclick: () => this.refreshExport() }, 'Refresh'),
            h(
              'button',
              {
                class: 'btn small ghost',
                onclick: () =>
                  navigator.clipboard
                    .writeText(this.exportBox.textContent ?? '')
                    .then(() => this.ctx.toast('Copied the domains snippet'))
                    .catch(() => this.ctx.toast('The clipboard is not available here', 'error')),
              },
              'Copy',
            ),
          ),
        ),
        h(
          'p',
          { class: 'muted small' },
          'The remembered decisions as ',
          h('code', null, 'domains'),
          ' entries to paste into a policy.',
        ),
        this.exportBox,
      ),
      h(
        'div',
        { class: 'card' },
        h('div', { class: 'card-head' }, h('h3', null, 'Audit')),
        table('approvals-audit', ['Time', 'Event', 'Target', 'Process', 'Released'], this.auditBody),
      ),
    );
    // The countdowns.
    this.ticker = setInterval(() => this.tick(), 1000);
    // While disconnected the prompts stay visible (the server keeps holding them until their timeout) but cannot
    // be answered; a reconnection re-subscribes and reloads them.
    ctx.store.on((c) => {
      if (c === 'connection') this.render();
    });
  }

  show(): void {
    this.visible = true;
    // Opening this view is the person's own gesture: ask once whether prompts may notify while the window is away.
    askPermission();
    this.render();
    this.refreshExport();
  }

  hide(): void {
    this.visible = false;
  }

  /** Subscribes (after each (re)connection) and loads the current state. */
  async subscribe(api: TypedRequests): Promise<void> {
    const r = await api.request('approvals/subscribe', {});
    this.pending.clear();
    for (const p of r.pending) this.pending.set(pkey(p.server, p.id), p);
    this.decisionsBy.clear();
    for (const d of r.decisions) {
      const list = this.decisionsBy.get(d.server ?? '') ?? [];
      list.push(d);
      this.decisionsBy.set(d.server ?? '', list);
    }
    this.audit = r.audit.slice(-MAX_AUDIT);
    this.skew = 0;
    this.rulesBy.clear();
    // This host's rules, and each joined server's that is ready (a server joining later sends its own: rulesChanged).
    await eachServer(this.ctx, async (server) => {
      this.rulesBy.set(server, (await api.request('approvals/rules', on(server))).rules);
    });
    await this.projects.load();
    this.render();
  }

  notification(method: string, params: unknown): void {
    const p = params as Record<string, unknown>;
    switch (method) {
      case 'approvals/requested': {
        const prompt = p.prompt as ApprovalPrompt;
        const k = pkey(prompt.server, prompt.id);
        if (!this.pending.has(k)) this.fresh.push(k);
        this.pending.set(k, prompt);
        break;
      }
      case 'approvals/resolved':
        this.pending.delete(pkey(p.server as string | undefined, p.id as string));
        break;
      case 'approvals/decisions':
        this.decisionsBy.set((p.server as string | undefined) ?? '', p.decisions as RememberedDecision[]);
        if (!this.el.hidden) this.refreshExport();
        break;
      case 'approvals/rulesChanged':
        this.rulesBy.set((p.server as string | undefined) ?? '', p.rules as ApprovalRule[]);
        break;
      case 'approvals/learningChanged':
        this.projects.setLearning((p.server as string | undefined) ?? '', p.learning as LearningState[]);
        break;
      case 'approvals/audit':
        this.audit.push(p.event as ApprovalAuditEvent);
        if (this.audit.length > MAX_AUDIT) this.audit.shift();
        break;
      default:
        return;
    }
    this.schedule();
  }

  private async decide(prompt: ApprovalPrompt, decision: ApprovalDecision, card: HTMLElement): Promise<void> {
    // Busy: a render while the answer is on its way leaves the buttons disabled.
    for (const b of card.querySelectorAll('button')) {
      b.disabled = true;
      b.dataset.busy = '1';
    }
    try {
      await this.ctx.conn.request('approvals/decide', { ...on(prompt.server), id: prompt.id, decision });
    } catch (e) {
      this.ctx.toast(`Could not apply the decision: ${(e as Error).message}`, 'error');
      for (const b of card.querySelectorAll('button')) {
        b.disabled = false;
        delete b.dataset.busy;
      }
    }
  }

  /** "Wait until the process exits": the countdown stops; the process's exit denies what is held. */
  private async waitForExit(prompt: ApprovalPrompt): Promise<void> {
    try {
      await this.ctx.conn.request('approvals/waitForExit', { ...on(prompt.server), id: prompt.id });
    } catch (e) {
      this.ctx.toast(`Could not wait: ${(e as Error).message}`, 'error');
    }
  }

  private async revoke(d: { id: string; server?: string | undefined }): Promise<void> {
    try {
      await this.ctx.conn.request('approvals/revoke', { ...on(d.server), id: d.id });
    } catch (e) {
      this.ctx.toast(`Could not revoke: ${(e as Error).message}`, 'error');
    }
  }

  private async refreshExport(): Promise<void> {
    try {
      this.lastExport = await this.ctx.conn.request('approvals/export', {});
    } catch {
      this.lastExport = null;
    }
    this.renderExport();
  }

  private renderExport(): void {
    const e = this.lastExport;
    if (!e || Object.keys(e.domains).length === 0) {
      this.exportBox.textContent = 'No remembered decisions yet.';
      return;
    }
    this.exportBox.textContent = this.exportFormat.value === 'toml' ? e.toml : e.json;
  }

  private left(p: ApprovalPrompt): number {
    return Math.max(0, Math.ceil((p.expiresAt - Date.now() - this.skew) / 1000));
  }

  private tick(): void {
    if (this.projects.bannerStale()) this.schedule();
    const els = [
      ...this.prompts.querySelectorAll<HTMLElement>('[data-expires]'),
      ...(this.visible ? this.el.querySelectorAll<HTMLElement>('[data-expires]') : []),
    ];
    for (const el of els) {
      const at = Number(el.dataset.expires);
      const paused = el.dataset.paused;
      const text =
        el.dataset.waitingForExit === '1'
          ? 'waits until the process exits'
          : paused
            ? `paused · ${Math.ceil(Number(paused) / 1000)}s left`
            : `${Math.max(0, Math.ceil((at - Date.now() - this.skew) / 1000))}s left`;
      if (el.textContent !== text) el.textContent = text;
    }
  }

  private processLabel(p: {
    processId: string | null;
    sessionId: string;
    server?: string | undefined;
  }): string {
    const where = this.ctx.store.fleet ? ` · ${this.ctx.store.serverName(p.server ?? '')}` : '';
    return `${p.processId ? `${p.processId} · ${p.sessionId.slice(0, 8)}` : `session ${p.sessionId.slice(0, 8)}`}${where}`;
  }

  private get decisions(): RememberedDecision[] {
    return [...this.decisionsBy.values()].flat();
  }

  private get rules(): ApprovalRule[] {
    return [...this.rulesBy.values()].flat();
  }

  /** A rule's toggle, note or revoke: to the server it is of (`server`; none for this host's own). */
  private async updateRule(
    r: ApprovalRule,
    change: { enabled?: boolean; note?: string | null },
  ): Promise<boolean> {
    try {
      await this.ctx.conn.request('approvals/ruleUpdate', { ...on(r.server), id: r.id, ...change });
      return true;
    } catch (e) {
      this.ctx.toast(`Could not change the rule: ${(e as Error).message}`, 'error');
      return false;
    }
  }

  /** The note editor, open on one rule at a time (made once: a redraw moves it, keeping what is typed). */
  private noteOf: string | null = null;
  private readonly noteInput = h('input', {
    class: 'input small',
    'data-field': 'note-input',
    maxlength: String(MAX_RULE_NOTE),
    'aria-label': 'Note',
  }) as HTMLInputElement;

  private noteEditor(r: ApprovalRule): HTMLElement {
    const k = pkey(r.server, r.id);
    if (this.noteOf !== k)
      return h(
        'button',
        {
          class: 'btn small ghost',
          'data-action': 'note',
          onclick: () => {
            this.noteOf = k;
            this.noteInput.value = r.note ?? '';
            this.render();
            this.noteInput.focus();
          },
        },
        'Note',
      );
    const close = () => {
      this.noteOf = null;
      this.render();
    };
    return h(
      'span',
      { class: 'btn-row' },
      this.noteInput,
      h(
        'button',
        {
          class: 'btn small',
          'data-action': 'note-save',
          onclick: async () => {
            const text = this.noteInput.value.trim();
            if (await this.updateRule(r, { note: text === '' ? null : text })) close();
          },
        },
        'Save',
      ),
      h('button', { class: 'btn small ghost', onclick: close }, 'Cancel'),
    );
  }

  private render(): void {
    this.schedule.ran();
    const list = [...this.pending.values()].sort((a, b) => a.requestedAt - b.requestedAt);
    this.onCount(list.length);
    // The prompts new since the last render that are still waiting: one desktop notification for them.
    notifyUnfocused(this.fresh.flatMap((k) => this.pending.get(k) ?? []));
    this.fresh.length = 0;
    this.renderPrompts(list);
    if (this.visible) this.renderTables(list);
    this.tick();
  }

  private countdown(el: HTMLElement, p: ApprovalPrompt): void {
    el.dataset.expires = String(p.expiresAt);
    if (p.pausedLeftMs != null) el.dataset.paused = String(p.pausedLeftMs);
    else delete el.dataset.paused;
    if (p.waitingForExit) el.dataset.waitingForExit = '1';
    else delete el.dataset.waitingForExit;
  }

  /** The prompt stack: a card per prompt, made when it comes, updated in place, removed when it is resolved. */
  private renderPrompts(list: ApprovalPrompt[]): void {
    const fleet = this.ctx.store.fleet;
    const connected = this.ctx.conn.state === 'connected';
    const keep = new Set<string>();
    const cards = list.slice(0, MAX_CARDS).map((p) => {
      const k = pkey(p.server, p.id);
      keep.add(k);
      let c = this.cards.get(k);
      if (!c || c.fleet !== fleet) {
        c = { card: this.card(p), prompt: p, fleet };
        this.cards.set(k, c);
      } else if (c.prompt !== p) {
        // The same prompt again (more requests held on it, a new deadline): its card changes in place, so a click
        // on it is never lost to a card made anew under the pointer.
        c.prompt = p;
        const held = c.card.querySelectorAll<HTMLElement>('[data-field="held"]');
        for (const el of held) el.hidden = p.waiting <= 1;
        held[1]!.textContent = `${p.waiting} requests`;
        this.countdown(c.card.querySelector<HTMLElement>('[data-expires]')!, p);
        const wait = c.card.querySelector<HTMLElement>('[data-action="wait"]');
        if (wait) wait.hidden = p.waitingForExit === true;
      }
      for (const b of c.card.querySelectorAll<HTMLButtonElement>('button[data-decision]'))
        if (b.dataset.busy !== '1') b.disabled = !connected;
      return c.card;
    });
    for (const k of this.cards.keys()) if (!keep.has(k)) this.cards.delete(k);
    const banner = this.projects.renderBanner();
    const more = list.length - cards.length;
    if (more > 0) setText(this.moreCount, `${more} more request${more === 1 ? '' : 's'} waiting`);
    reconcile(this.prompts, [...(banner ? [banner] : []), ...cards, ...(more > 0 ? [this.more] : [])]);
  }

  /** The line under the cards shown: how many more prompts wait, and the way to all of them. */
  private readonly moreCount = h('span', { 'data-testid': 'approval-more-count' });
  private readonly more = h(
    'div',
    { class: 'approval-more', 'data-testid': 'approval-more' },
    this.moreCount,
    h('button', { class: 'btn small', onclick: () => this.ctx.go('approvals') }, 'Show all'),
  );

  private card(p: ApprovalPrompt): HTMLElement {
    const card = h('div', {
      class: 'approval-prompt',
      role: 'alertdialog',
      'aria-label': `Network request from ${p.processId} to ${p.host}`,
      'data-testid': 'approval-prompt',
      'data-id': p.id,
      'data-server': p.server ?? '',
    });
    // The countdown pauses while the person reads the card (pointer over it, or focus in it): approvals/hold.
    let holding = false;
    const hold = (on: boolean) => {
      if (on === holding || p.server || this.ctx.conn.state !== 'connected') return;
      holding = on;
      this.ctx.conn.request('approvals/hold', { id: p.id, holding: on }).catch(() => {});
    };
    const reading = () => card.matches(':hover') || card.contains(document.activeElement);
    card.addEventListener('mouseenter', () => hold(true));
    card.addEventListener('focusin', () => hold(true));
    card.addEventListener('mouseleave', () => hold(reading()));
    card.addEventListener('focusout', () => queueMicrotask(() => hold(reading())));
    replace(
      card,
      h(
        'div',
        { class: 'approval-head' },
        h('strong', null, 'Allow network access?'),
        h(
          'span',
          {
            class: 'muted small',
            'data-expires': String(p.expiresAt),
            'data-testid': 'approval-countdown',
            ...(p.pausedLeftMs != null ? { 'data-paused': String(p.pausedLeftMs) } : {}),
            ...(p.waitingForExit ? { 'data-waiting-for-exit': '1' } : {}),
          },
          `${this.left(p)}s left`,
        ),
      ),
      h(
        'dl',
        { class: 'approval-facts' },
        this.ctx.store.fleet
          ? [
              h('dt', null, 'Server'),
              h('dd', { 'data-field': 'server' }, this.ctx.store.serverName(p.server ?? '')),
            ]
          : null,
        h('dt', null, 'Process'),
        h('dd', { 'data-field': 'process' }, `${p.processId} (${p.clientName})`),
        h('dt', null, 'Command'),
        h('dd', { 'data-field': 'command' }, h('code', null, shellJoin(p.command))),
        h('dt', null, 'Host'),
        h('dd', { 'data-field': 'host' }, h('code', null, p.host)),
        h('dt', null, 'Port'),
        h('dd', { 'data-field': 'port' }, String(p.port)),
        h('dt', null, 'Protocol'),
        h('dd', { 'data-field': 'protocol' }, p.protocol),
        h('dt', null, 'Method'),
        h('dd', { 'data-field': 'method' }, p.method ?? '—'),
        p.protocol === 'http' || p.protocol === 'https'
          ? [
              h('dt', null, 'Path'),
              h(
                'dd',
                { 'data-field': 'path' },
                h(
                  'code',
                  null,
                  p.path ?? 'unreadable (an encoded slash, .. above the root, …): no project answer',
                ),
              ),
            ]
          : null,
        h('dt', null, 'Cwd'),
        h('dd', { 'data-field': 'cwd' }, h('code', null, p.cwd ?? '—')),
        h('dt', null, 'Project'),
        h('dd', { 'data-field': 'workspace' }, h('code', null, p.workspace ?? 'none (no project answers)')),
        h('dt', null, 'Why asked'),
        h(
          'dd',
          { 'data-field': 'why' },
          "No entry of the managed network's allowlist or denylist matched, no rule answered, and its config asks (hard_deny_allowlist_misses: false). Closing or letting it time out blocks these requests only.",
        ),
        h('dt', { 'data-field': 'held', hidden: p.waiting <= 1 }, 'Held'),
        h('dd', { 'data-field': 'held', hidden: p.waiting <= 1 }, `${p.waiting} requests`),
      ),
      h(
        'div',
        { class: 'btn-row' },
        BUTTONS.filter(([d]) => d !== 'allowProject' || p.workspace).map(([d, label, cls, stores]) =>
          h(
            'button',
            {
              class: cls,
              'data-decision': d,
              title: stores,
              disabled: this.ctx.conn.state !== 'connected',
              onclick: () => this.decide(p, d, card),
            },
            label,
          ),
        ),
        h(
          'button',
          {
            class: 'btn small ghost',
            'data-action': 'wait',
            title:
              'No countdown: the requests wait; when the process exits they are denied. Stores nothing; you can still answer.',
            hidden: p.waitingForExit === true,
            disabled: this.ctx.conn.state !== 'connected',
            onclick: () => this.waitForExit(p),
          },
          'Wait until the process exits',
        ),
      ),
    );
    return card;
  }

  /** The view's own tables (only while it is shown): pending, remembered decisions, the approval audit. */
  private renderTables(list: ApprovalPrompt[]): void {
    this.projects.render();
    replace(
      this.pendingBody,
      list.length === 0
        ? h('tr', null, h('td', { colspan: '7', class: 'muted' }, 'Nothing is waiting.'))
        : list.map((p) =>
            h(
              'tr',
              null,
              h('td', null, clock(p.requestedAt)),
              h('td', null, this.processLabel(p)),
              h('td', null, h('code', null, shellJoin(p.command))),
              h('td', null, h('code', null, target(p))),
              h('td', null, p.method ?? '—'),
              h('td', { class: 'num' }, String(p.waiting)),
              h('td', null, h('span', { class: 'muted small', 'data-expires': String(p.expiresAt) }, '')),
            ),
          ),
    );
    reconcile(
      this.decisionsBody,
      this.decisions.length === 0
        ? [h('tr', null, h('td', { colspan: '6', class: 'muted' }, 'No remembered decisions.'))]
        : keptRows(this.decisionRows, this.decisions, (d) => {
            const label = this.processLabel(d);
            return [
              pkey(d.server, d.id),
              `${JSON.stringify(d)}\0${label}`,
              () =>
                h(
                  'tr',
                  { 'data-decision-id': d.id },
                  h('td', null, clock(d.decidedAt)),
                  h('td', { class: d.decision === 'deny' ? 'bad' : '' }, d.decision),
                  h('td', null, d.scope),
                  h('td', null, h('code', null, target(d))),
                  h('td', null, label),
                  h(
                    'td',
                    null,
                    h('button', { class: 'btn small ghost', onclick: () => this.revoke(d) }, 'Revoke'),
                  ),
                ),
            ];
          }),
    );
    reconcile(
      this.rulesBody,
      this.rules.length === 0
        ? [h('tr', null, h('td', { colspan: '8', class: 'muted' }, 'No project rules.'))]
        : keptRows(this.ruleRows, this.rules, (r) => {
            const k = pkey(r.server, r.id);
            const server = this.ctx.store.fleet ? this.ctx.store.serverName(r.server ?? '') : null;
            return [
              k,
              `${JSON.stringify(r)}\0${server}\0${this.noteOf === k}`,
              () =>
                h(
                  'tr',
                  { 'data-rule-id': r.id, 'data-server': r.server ?? '' },
                  h('td', null, clock(r.createdAt)),
                  h('td', { class: r.decision === 'deny' ? 'bad' : '' }, r.decision),
                  h(
                    'td',
                    null,
                    h(
                      'code',
                      null,
                      `${target(r)}${r.method ? ` ${r.method}` : ''}${r.pathPrefix ? ` ${r.pathPrefix}` : ''}`,
                    ),
                  ),
                  h(
                    'td',
                    null,
                    server !== null ? h('span', { 'data-field': 'server' }, `${server}: `) : null,
                    h('code', null, r.workspace),
                  ),
                  h('td', null, `${r.origin} (${r.createdBy.credential})`),
                  h('td', { class: 'num' }, String(r.hits)),
                  h('td', null, r.lastHitAt ? clock(r.lastHitAt) : '—'),
                  h(
                    'td',
                    null,
                    h(
                      'button',
                      {
                        class: 'btn small ghost',
                        'data-action': 'toggle',
                        onclick: () => void this.updateRule(r, { enabled: !r.enabled }),
                      },
                      r.enabled ? 'Disable' : 'Enable',
                    ),
                    this.noteEditor(r),
                    h(
                      'button',
                      { class: 'btn small ghost', 'data-action': 'revoke', onclick: () => this.revoke(r) },
                      'Revoke',
                    ),
                    r.note ? h('div', { class: 'muted small', 'data-field': 'note' }, r.note) : null,
                    r.contradiction
                      ? h('div', { class: 'bad small', 'data-field': 'contradiction' }, r.contradiction)
                      : null,
                  ),
                ),
            ];
          }),
    );
    const audit: HTMLTableRowElement[] = [];
    for (let i = this.audit.length - 1; i >= 0; i--) {
      const e = this.audit[i]!;
      let tr = this.auditRows.get(e);
      if (!tr) {
        tr = this.auditRow(e);
        this.auditRows.set(e, tr);
      }
      audit.push(tr);
    }
    reconcile(
      this.auditBody,
      audit.length > 0
        ? audit
        : [h('tr', null, h('td', { colspan: '5', class: 'muted' }, 'No approval events yet.'))],
    );
  }

  private auditRow(e: ApprovalAuditEvent): HTMLTableRowElement {
    return h(
      'tr',
      null,
      h('td', null, clock(e.timestamp)),
      h(
        'td',
        null,
        e.kind === 'decided'
          ? (OUTCOME_TEXT[e.decision ?? ''] ?? e.decision)
          : (OUTCOME_TEXT[e.kind] ?? e.kind),
        e.note ? h('div', { class: 'muted small' }, e.note) : null,
      ),
      h('td', null, h('code', null, target(e))),
      h('td', null, this.processLabel(e)),
      h('td', { class: 'num' }, String(e.released)),
    );
  }

  dispose(): void {
    clearInterval(this.ticker);
  }
}
