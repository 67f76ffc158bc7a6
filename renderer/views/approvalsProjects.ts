// The Approvals view's Projects card (issue 36, items 5 and 6): per workspace, learning mode (a toggle; while on, the
// proposal it saw, each endpoint a checkbox: accept the checked ones as project rules, or discard), and the state of
// the repository's `.corral/network.json` against what was last accepted (new, changed, accepted) with an Accept
// button. And the banner over every view while any workspace is learning. Only this host's own workspaces: a fleet
// host does not relay learning or repository files of the servers it watches.
import type { LearningState, RepoPolicyState } from '../../src/protocol/approvals.js';
import { h, replace } from '../dom.js';
import type { AppContext } from '../view.js';

const time = (ms: number) => new Date(ms).toLocaleTimeString(undefined, { hour12: false });

function endpointText(e: LearningState['proposal'][number]): string {
  const host = e.host.includes(':') ? `[${e.host}]` : e.host;
  return `${e.protocol} ${host}:${e.port}${e.method ? ` ${e.method}` : ''}${e.pathPrefix ? ` ${e.pathPrefix}` : ''}`;
}

export class ProjectsCard {
  readonly el: HTMLElement;
  /** Over every view (first in the prompt stack) while any workspace is learning. */
  readonly banner = h('div', {
    class: 'approval-prompt learning-banner',
    role: 'status',
    'data-testid': 'learning-banner',
  });
  private learning: LearningState[] = [];
  private readonly repo = new Map<string, RepoPolicyState | string>();
  /** Workspaces added by hand (the input), beside those the rules, prompts and learning name. */
  private readonly added = new Set<string>();
  /** Endpoints unchecked in a proposal (by workspace): left out of what is accepted. */
  private readonly unchecked = new Map<string, Set<string>>();
  private readonly body = h('div', { 'data-testid': 'approvals-projects' });
  private readonly input = h('input', {
    class: 'input',
    placeholder: '/absolute/path/to/a/workspace',
    'aria-label': 'Workspace',
    'data-testid': 'project-input',
  });

  constructor(
    private readonly ctx: AppContext,
    /** The workspaces the rest of the view knows (rules, prompts). */
    private readonly known: () => Iterable<string>,
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
              void this.refreshRepo(w);
            },
          },
          'Add',
        ),
      ),
      this.body,
    );
  }

  /** After each (re)connection: the learning sessions. */
  async load(): Promise<void> {
    try {
      this.learning = (await this.ctx.conn.request('approvals/learning', {})).learning;
    } catch {
      this.learning = []; // a server before learning mode
    }
    this.repo.clear();
  }

  setLearning(list: LearningState[]): void {
    this.learning = list;
  }

  private workspaces(): string[] {
    const all = new Set<string>([...this.known(), ...this.added, ...this.learning.map((l) => l.workspace)]);
    return [...all].sort();
  }

  private async refreshRepo(workspace: string): Promise<void> {
    try {
      this.repo.set(workspace, await this.ctx.conn.request('approvals/repoPolicy', { workspace }));
    } catch (e) {
      this.repo.set(workspace, (e as Error).message);
    }
    this.changed();
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
    return this.banner.isConnected && !this.learning.some((l) => l.active && l.endsAt > now);
  }

  renderBanner(): HTMLElement | null {
    const now = Date.now();
    const active = this.learning.filter((l) => l.active && l.endsAt > now);
    if (active.length === 0) return null;
    replace(
      this.banner,
      h('strong', null, 'Learning mode is on'),
      ...active.map((l) =>
        h(
          'div',
          { class: 'small' },
          h('code', null, l.workspace),
          ` · ${l.requests}/${l.maxRequests} requests allowed and recorded · until ${time(l.endsAt)}`,
        ),
      ),
    );
    return this.banner;
  }

  render(): void {
    const list = this.workspaces();
    replace(
      this.body,
      list.length === 0
        ? h('p', { class: 'muted' }, 'No project yet: one appears with a prompt or a rule, or add it above.')
        : list.map((w) => this.row(w)),
    );
    for (const w of list) if (!this.repo.has(w)) void this.refreshRepo(w);
  }

  private row(workspace: string): HTMLElement {
    const l = this.learning.find((x) => x.workspace === workspace);
    const now = Date.now();
    const on = l?.active === true && l.endsAt > now;
    const unchecked = this.unchecked.get(workspace) ?? new Set<string>();
    const status = !l
      ? 'learning off'
      : on
        ? `learning: ${l.requests}/${l.maxRequests} requests, until ${time(l.endsAt)}`
        : `learning stopped (its time or count ran out): ${l.proposal.length} endpoint${l.proposal.length === 1 ? '' : 's'} proposed`;
    const end = (accept: boolean) =>
      this.call('end learning', async () => {
        // What is unchecked now (a box changed since this row was drawn counts).
        const left = this.unchecked.get(workspace);
        const chosen = accept
          ? (l?.proposal ?? []).filter((e) => !left?.has(endpointText(e))).map(({ hits: _hits, ...e }) => e)
          : [];
        const r = await this.ctx.conn.request('approvals/learnEnd', { workspace, accept: chosen });
        this.unchecked.delete(workspace);
        if (accept) this.ctx.toast(`${r.rules.length} project rule${r.rules.length === 1 ? '' : 's'} made`);
      });
    const toggle = h(
      'button',
      {
        class: on ? 'btn small danger' : 'btn small primary',
        'data-action': 'learning-toggle',
        role: 'switch',
        'aria-checked': String(on),
        title: on
          ? 'Stops learning and discards what it saw (accept it first to keep it)'
          : "Allows and records this workspace's allowlist misses for 10 minutes or 1000 requests",
        onclick: () =>
          on || l
            ? end(false)
            : this.call('start learning', () => this.ctx.conn.request('approvals/learn', { workspace })),
      },
      on ? 'Stop learning' : l ? 'Discard and close' : 'Start learning',
    );
    const proposal =
      l && l.proposal.length > 0
        ? h(
            'div',
            { class: 'learning-proposal', 'data-testid': 'learning-proposal' },
            ...l.proposal.map((e) => {
              const key = endpointText(e);
              const box = h('input', {
                type: 'checkbox',
                'data-endpoint': key,
                'aria-label': `Accept ${key}`,
                onchange: () => {
                  const set = this.unchecked.get(workspace) ?? new Set<string>();
                  if (box.checked) set.delete(key);
                  else set.add(key);
                  this.unchecked.set(workspace, set);
                },
              });
              box.checked = !unchecked.has(key);
              return h('label', { class: 'small', style: 'display:block' }, box, ` ${key} · ${e.hits} hits`);
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
    const repo = this.repo.get(workspace);
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
      { class: 'project-row', 'data-workspace': workspace },
      h('div', null, h('code', null, workspace)),
      h(
        'div',
        { class: 'btn-row' },
        h('span', { class: on ? 'warn small' : 'muted small', 'data-field': 'learning' }, status),
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
                      workspace,
                      await this.ctx.conn.request('approvals/repoAccept', {
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
        h('button', { class: 'btn small ghost', onclick: () => void this.refreshRepo(workspace) }, 'Re-read'),
      ),
    );
  }
}
