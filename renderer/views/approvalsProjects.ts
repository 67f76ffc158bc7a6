// The Approvals view's Projects card (issue 36, items 5 and 6): per workspace, learning mode (a toggle; while on, the
// proposal it saw, each endpoint a checkbox: accept the checked ones as project rules, or discard), and the state of
// the repository's `.corral/network.json` against what was last accepted (new, changed, accepted) with an Accept
// button. And the banner over every view while any workspace is learning. On a fleet host, the workspaces of the
// servers it watches too (their prompts' workspaces): each call names the server, which the host forwards to it alone.
import type { LearningState, RepoPolicyState } from '../../src/protocol/approvals.js';
import { h, type KeptRows, keptRows, reconcile, replace } from '../dom.js';
import type { AppContext } from '../view.js';

const time = (ms: number) => new Date(ms).toLocaleTimeString(undefined, { hour12: false });

function endpointText(e: LearningState['proposal'][number]): string {
  const host = e.host.includes(':') ? `[${e.host}]` : e.host;
  return `${e.protocol} ${host}:${e.port}${e.method ? ` ${e.method}` : ''}${e.pathPrefix ? ` ${e.pathPrefix}` : ''}`;
}

/** A workspace of a server ('' is this host). */
export interface ProjectRef {
  server: string;
  workspace: string;
}

const refKey = (r: ProjectRef) => `${r.server}\u0000${r.workspace}`;
/** The `server` member of a call about a joined server's workspace (none for this host's own). */
const on = (server: string) => (server ? { server } : {});

/**
 * Runs `load` for this host ('') and each joined server that is ready, at once; one that fails (a server before the
 * method) is skipped.
 */
export async function eachServer(ctx: AppContext, load: (server: string) => Promise<void>): Promise<void> {
  const servers = ['', ...[...ctx.store.servers.values()].filter((s) => s.id && s.ready).map((s) => s.id)];
  await Promise.all(servers.map((server) => load(server).catch(() => {})));
}

export class ProjectsCard {
  readonly el: HTMLElement;
  /** Over every view (first in the prompt stack) while any workspace is learning. */
  readonly banner = h('div', {
    class: 'approval-prompt learning-banner',
    role: 'status',
    'data-testid': 'learning-banner',
  });
  /** The learning sessions of each server ('' is this host). */
  private readonly learning = new Map<string, LearningState[]>();
  /** By `refKey`. */
  private readonly repo = new Map<string, RepoPolicyState | string>();
  /** Workspaces of this host added by hand (the input), beside those the rules, prompts and learning name. */
  private readonly added = new Set<string>();
  /** Endpoints unchecked in a proposal (by `refKey`): left out of what is accepted. */
  private readonly unchecked = new Map<string, Set<string>>();
  private readonly body = h('div', { 'data-testid': 'approvals-projects' });
  /** The project rows shown (dom.ts keptRows: a click on a row's buttons is never lost to a redraw). */
  private readonly rows: KeptRows<HTMLElement> = new Map();
  private readonly input = h('input', {
    class: 'input',
    placeholder: '/absolute/path/to/a/workspace',
    'aria-label': 'Workspace',
    'data-testid': 'project-input',
  });

  constructor(
    private readonly ctx: AppContext,
    /** The workspaces the rest of the view knows (rules, prompts), each with its server. */
    private readonly known: () => Iterable<ProjectRef>,
    /** Asks the view to draw again (paced). */
    private readonly changed: () => void,
  ) {
    this.el = h(
      'div',
      { class: 'card' },
      h('div', { class: 'card-head' }, h('h3', null, 'Projects: learning mode and repository file')),
      h(
        'p',
        { class: 'muted small' },
        "Learning mode allows and records a workspace's allowlist misses for a while (10 minutes or 1000 requests), then proposes exactly what it saw; accept what you want as project rules. The repository's .corral/network.json can only narrow; its state is shown against the hash you last accepted.",
      ),
      h(
        'div',
        { class: 'btn-row' },
        this.input,
        h(
          'button',
          {
            class: 'btn small',
            'data-action': 'add-project',
            onclick: () => {
              const w = this.input.value.trim();
              if (!w.startsWith('/')) {
                this.ctx.toast('A workspace is an absolute path', 'error');
                return;
              }
              this.added.add(w);
              this.input.value = '';
              void this.refreshRepo({ server: '', workspace: w });
            },
          },
          'Add',
        ),
      ),
      this.body,
    );
  }

  /** After each (re)connection: the learning sessions, this host's and each joined server's that is ready. */
  async load(): Promise<void> {
    this.learning.clear();
    await eachServer(this.ctx, async (server) => {
      const r = await this.ctx.conn.request('approvals/learning', server ? { server } : {});
      this.learning.set(server, r.learning);
    });
    this.repo.clear();
  }

  setLearning(server: string, list: LearningState[]): void {
    this.learning.set(server, list);
  }

  private workspaces(): ProjectRef[] {
    const all = new Map<string, ProjectRef>();
    const add = (r: ProjectRef) => all.set(refKey(r), r);
    for (const r of this.known()) add(r);
    for (const workspace of this.added) add({ server: '', workspace });
    for (const [server, list] of this.learning) for (const l of list) add({ server, workspace: l.workspace });
    return [...all.values()].sort((a, b) =>
      a.server === b.server ? a.workspace.localeCompare(b.workspace) : a.server.localeCompare(b.server),
    );
  }

  private async refreshRepo(ref: ProjectRef): Promise<void> {
    try {
      this.repo.set(
        refKey(ref),
        await this.ctx.conn.request('approvals/repoPolicy', { ...on(ref.server), workspace: ref.workspace }),
      );
    } catch (e) {
      this.repo.set(refKey(ref), (e as Error).message);
    }
    this.changed();
  }

  /** Every server's learning sessions, with the server each is of. */
  private allLearning(): (LearningState & { server: string })[] {
    return [...this.learning].flatMap(([server, list]) => list.map((l) => ({ ...l, server })));
  }

  private async call(what: string, f: () => Promise<unknown>): Promise<void> {
    try {
      await f();
    } catch (e) {
      this.ctx.toast(`Could not ${what}: ${(e as Error).message}`, 'error');
    }
  }

  /** The banner is shown but no learning is on any more (its time ran out without a notification). */
  bannerStale(): boolean {
    const now = Date.now();
    return this.banner.isConnected && !this.allLearning().some((l) => l.active && l.endsAt > now);
  }

  renderBanner(): HTMLElement | null {
    const now = Date.now();
    const active = this.allLearning().filter((l) => l.active && l.endsAt > now);
    if (active.length === 0) return null;
    replace(
      this.banner,
      h('strong', null, 'Learning mode is on'),
      ...active.map((l) =>
        h(
          'div',
          { class: 'small' },
          this.ctx.store.fleet ? `${this.ctx.store.serverName(l.server)}: ` : '',
          h('code', null, l.workspace),
          ` · ${l.requests}/${l.maxRequests} requests allowed and recorded · until ${time(l.endsAt)}`,
        ),
      ),
    );
    return this.banner;
  }

  render(): void {
    const list = this.workspaces();
    reconcile(
      this.body,
      list.length === 0
        ? [
            h(
              'p',
              { class: 'muted' },
              'No project yet: one appears with a prompt or a rule, or add it above.',
            ),
          ]
        : keptRows(this.rows, list, (r) => [refKey(r), this.shows(r), () => this.row(r)]),
    );
    for (const r of list) if (!this.repo.has(refKey(r))) void this.refreshRepo(r);
  }

  /**
   * What a project's row shows, as text: its learning state (and whether it is still on: its time runs out without a
   * notification), its repository file, its server's name. Not the proposal's boxes a person unchecked: the row's
   * own boxes hold those, and a row made anew reads them from `unchecked`.
   */
  private shows(ref: ProjectRef): string {
    const l = this.learning.get(ref.server)?.find((x) => x.workspace === ref.workspace);
    return JSON.stringify([
      l ?? null,
      l?.active === true && l.endsAt > Date.now(),
      this.repo.get(refKey(ref)) ?? null,
      this.ctx.store.fleet ? this.ctx.store.serverName(ref.server) : null,
    ]);
  }

  private row(ref: ProjectRef): HTMLElement {
    const { server, workspace } = ref;
    const key = refKey(ref);
    const l = this.learning.get(server)?.find((x) => x.workspace === workspace);
    const now = Date.now();
    const learningOn = l?.active === true && l.endsAt > now;
    const unchecked = this.unchecked.get(key) ?? new Set<string>();
    const status = !l
      ? 'learning off'
      : learningOn
        ? `learning: ${l.requests}/${l.maxRequests} requests, until ${time(l.endsAt)}`
        : `learning stopped (its time or count ran out): ${l.proposal.length} endpoint${l.proposal.length === 1 ? '' : 's'} proposed`;
    const end = (accept: boolean) =>
      this.call('end learning', async () => {
        // What is unchecked now (a box changed since this row was drawn counts).
        const left = this.unchecked.get(key);
        const chosen = accept
          ? (l?.proposal ?? []).filter((e) => !left?.has(endpointText(e))).map(({ hits: _hits, ...e }) => e)
          : [];
        const r = await this.ctx.conn.request('approvals/learnEnd', {
          ...on(server),
          workspace,
          accept: chosen,
        });
        this.unchecked.delete(key);
        if (accept) this.ctx.toast(`${r.rules.length} project rule${r.rules.length === 1 ? '' : 's'} made`);
      });
    const toggle = h(
      'button',
      {
        class: learningOn ? 'btn small danger' : 'btn small primary',
        'data-action': 'learning-toggle',
        role: 'switch',
        'aria-checked': String(learningOn),
        title: learningOn
          ? 'Stops learning and discards what it saw (accept it first to keep it)'
          : "Allows and records this workspace's allowlist misses for 10 minutes or 1000 requests",
        onclick: () =>
          learningOn || l
            ? end(false)
            : this.call('start learning', () =>
                this.ctx.conn.request('approvals/learn', { ...on(server), workspace }),
              ),
      },
      learningOn ? 'Stop learning' : l ? 'Discard and close' : 'Start learning',
    );
    const proposal =
      l && l.proposal.length > 0
        ? h(
            'div',
            { class: 'learning-proposal', 'data-testid': 'learning-proposal' },
            ...l.proposal.map((e) => {
              const text = endpointText(e);
              const box = h('input', {
                type: 'checkbox',
                'data-endpoint': text,
                'aria-label': `Accept ${text}`,
                onchange: () => {
                  const set = this.unchecked.get(key) ?? new Set<string>();
                  if (box.checked) set.delete(text);
                  else set.add(text);
                  this.unchecked.set(key, set);
                },
              });
              box.checked = !unchecked.has(text);
              return h('label', { class: 'small', style: 'display:block' }, box, ` ${text} · ${e.hits} hits`);
            }),
            h(
              'div',
              { class: 'btn-row' },
              h(
                'button',
                {
                  class: 'btn small primary',
                  'data-action': 'learning-accept',
                  title: 'Each checked endpoint becomes an allow rule of this workspace, exactly as seen',
                  onclick: () => end(true),
                },
                'Accept checked as rules',
              ),
              h(
                'button',
                { class: 'btn small ghost', 'data-action': 'learning-discard', onclick: () => end(false) },
                'Discard',
              ),
            ),
          )
        : null;
    const repo = this.repo.get(key);
    const repoText =
      repo === undefined
        ? 'reading…'
        : typeof repo === 'string'
          ? repo
          : repo.status === 'absent'
            ? 'no .corral/network.json'
            : `${repo.status}, ${repo.acceptance ?? 'unknown'}${repo.sha256 ? ` · sha256 ${repo.sha256.slice(0, 12)}…` : ''} · ${repo.endpoints} endpoint${repo.endpoints === 1 ? '' : 's'}${repo.ignored.length ? ` · ${repo.ignored.length} ignored` : ''}${repo.problem ? ` · ${repo.problem}` : ''}`;
    const canAccept =
      typeof repo === 'object' &&
      repo.sha256 !== null &&
      (repo.acceptance === 'new' || repo.acceptance === 'changed');
    return h(
      'div',
      { class: 'project-row', 'data-workspace': workspace, 'data-server': server },
      h(
        'div',
        null,
        this.ctx.store.fleet ? `${this.ctx.store.serverName(server)}: ` : '',
        h('code', null, workspace),
      ),
      h(
        'div',
        { class: 'btn-row' },
        h('span', { class: learningOn ? 'warn small' : 'muted small', 'data-field': 'learning' }, status),
        toggle,
      ),
      proposal,
      h(
        'div',
        { class: 'btn-row' },
        h(
          'span',
          {
            class: canAccept ? 'warn small' : 'muted small',
            'data-field': 'repo',
            'data-acceptance': typeof repo === 'object' ? (repo.acceptance ?? '') : '',
          },
          `Repository file: ${repoText}`,
        ),
        canAccept
          ? h(
              'button',
              {
                class: 'btn small',
                'data-action': 'repo-accept',
                title: 'Records that you read this version (by its hash); it narrows either way',
                onclick: () =>
                  this.call('accept the file', async () => {
                    this.repo.set(
                      key,
                      await this.ctx.conn.request('approvals/repoAccept', {
                        ...on(server),
                        workspace,
                        sha256: (repo as RepoPolicyState).sha256!,
                      }),
                    );
                    this.changed();
                  }),
              },
              'Accept file',
            )
          : null,
        h('button', { class: 'btn small ghost', onclick: () => void this.refreshRepo(ref) }, 'Re-read'),
      ),
    );
  }
}
