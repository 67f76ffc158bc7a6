// Run a command: builds ExecParams (argv, cwd, tty, sandbox preset, managed network) and sends process/start through
// the same client API as everything else. The process belongs to the panel's own session.

import type { MethodParams } from '../../src/protocol/methods.js';
import { h, replace, shellSplit } from '../dom.js';
import type { AppContext, View } from '../view.js';
import { sandboxExample } from './policy.js';

let counter = 0;

export class RunView implements View {
  readonly el = h('section', { 'aria-label': 'Run a command' });
  private readonly cmd = h('input', {
    class: 'input mono',
    value: 'ls -la',
    'aria-label': 'Command',
    'data-testid': 'run-argv',
  });
  private readonly shell = h('input', { type: 'checkbox', checked: true });
  private readonly cwd = h('input', {
    class: 'input mono',
    value: '/tmp',
    'aria-label': 'Working directory',
    'data-testid': 'run-cwd',
  });
  private readonly tty = h('input', { type: 'checkbox', 'data-testid': 'run-tty' });
  private readonly pipeStdin = h('input', { type: 'checkbox', checked: true });
  private readonly preset = h(
    'select',
    { class: 'input', 'aria-label': 'Sandbox', 'data-testid': 'run-sandbox' },
    h('option', { value: 'none' }, 'No sandbox'),
    h('option', { value: 'read-only' }, 'Read-only (no network)'),
    h('option', { value: 'workspace-write' }, 'Workspace write (cwd + /tmp, no network)'),
  );
  private readonly netOn = h('input', { type: 'checkbox', 'data-testid': 'run-net' });
  private readonly netMode = h(
    'select',
    { class: 'input', 'aria-label': 'Network mode' },
    h('option', { value: 'full' }, 'full'),
    h('option', { value: 'limited' }, 'limited (GET/HEAD/OPTIONS)'),
  );
  private readonly allow = h('textarea', {
    class: 'input mono',
    rows: '3',
    placeholder: 'one domain per line, e.g. registry.npmjs.org',
    'aria-label': 'Allowed domains',
  });
  private readonly preview = h('pre', { class: 'code-block small', 'data-testid': 'run-params' });
  private readonly out = h('div', { class: 'result' });

  constructor(private readonly ctx: AppContext) {
    const refresh = () => this.showParams();
    for (const el of [this.cmd, this.cwd, this.allow]) el.addEventListener('input', refresh);
    for (const el of [this.shell, this.tty, this.pipeStdin, this.preset, this.netOn, this.netMode])
      el.addEventListener('change', refresh);
    this.el.append(
      h('div', { class: 'toolbar' }, h('h2', null, 'Run a command'), h('div', { class: 'grow' })),
      h(
        'div',
        { class: 'run-grid' },
        h(
          'form',
          {
            class: 'card form',
            onsubmit: (e: Event) => {
              e.preventDefault();
              void this.run();
            },
          },
          h('label', null, 'Command', this.cmd),
          h(
            'label',
            { class: 'check' },
            this.shell,
            'Run through /bin/sh -c (otherwise split into argv like a shell would)',
          ),
          h('label', null, 'Working directory', this.cwd),
          h(
            'div',
            { class: 'form-row' },
            h('label', { class: 'check' }, this.tty, 'Terminal (PTY)'),
            h('label', { class: 'check' }, this.pipeStdin, 'Keep stdin open'),
          ),
          h('label', null, 'Sandbox', this.preset),
          h(
            'fieldset',
            { class: 'fieldset' },
            h('legend', null, h('label', { class: 'check' }, this.netOn, 'Managed network proxy')),
            h('label', null, 'Mode', this.netMode),
            h('label', null, 'Allowed domains', this.allow),
          ),
          h(
            'div',
            { class: 'btn-row' },
            h('button', { class: 'btn primary', type: 'submit', 'data-testid': 'run-start' }, 'Start'),
          ),
          this.out,
        ),
        h('div', { class: 'card' }, h('h3', null, 'process/start params'), this.preview),
      ),
    );
    this.showParams();
  }

  show(): void {
    this.showParams();
  }

  private params(): MethodParams<'process/start'> {
    const line = this.cmd.value.trim();
    const argv = this.shell.checked ? ['/bin/sh', '-c', line] : shellSplit(line);
    const cwd = this.cwd.value.trim() || '/';
    const platform = this.ctx.store.info?.platform ?? 'linux';
    const kind = platform === 'darwin' ? 'macos-seatbelt' : 'linux-seccomp';
    let sandbox: Record<string, unknown> | null = null;
    if (this.preset.value !== 'none') {
      sandbox = sandboxExample(cwd, kind) as Record<string, unknown>;
      if (this.preset.value === 'read-only') {
        sandbox.policy = { type: 'read-only' };
        sandbox.fileSystemPolicy = {
          kind: 'restricted',
          entries: [{ path: { type: 'special', value: { kind: 'root' } }, access: 'read' }],
        };
      }
      if (this.netOn.checked) sandbox.enforceManagedNetwork = true;
    }
    const domains: Record<string, string> = {};
    for (const d of this.allow.value.split(/[\s,]+/)) if (d) domains[d] = 'allow';
    return {
      processId: `panel-${Date.now().toString(36)}-${++counter}`,
      argv,
      cwd,
      env: {},
      envPolicy: { inherit: 'core', ignoreDefaultExcludes: false, exclude: [], set: {}, includeOnly: [] },
      tty: this.tty.checked,
      pipeStdin: this.pipeStdin.checked && !this.tty.checked,
      arg0: null,
      sandbox,
      managedNetwork: this.netOn.checked
        ? { config: { network: { enabled: true, mode: this.netMode.value, domains } } }
        : null,
      metadata: { startedFrom: 'panel' },
    };
  }

  private showParams(): void {
    try {
      const p = this.params();
      this.preview.textContent = JSON.stringify({ ...p, processId: '(generated)' }, null, 2);
    } catch (e) {
      this.preview.textContent = `(${(e as Error).message})`;
    }
  }

  private async run(): Promise<void> {
    let params: MethodParams<'process/start'>;
    try {
      params = this.params();
    } catch (e) {
      replace(this.out, h('div', { class: 'result-head bad' }, (e as Error).message));
      return;
    }
    if (params.argv.length === 0 || this.cmd.value.trim() === '') {
      replace(this.out, h('div', { class: 'result-head bad' }, 'Enter a command'));
      return;
    }
    replace(this.out, h('div', { class: 'muted' }, 'Starting…'));
    try {
      const r = await this.ctx.conn.request('process/start', params);
      replace(this.out, h('div', { class: 'result-head ok' }, `Started ${r.processId} (${r.sandboxType})`));
      const session = this.ctx.store.selfSession;
      if (session) this.ctx.go('processes', `${session}\u0000${r.processId}`);
    } catch (e) {
      const err = e as { code?: number; message: string };
      replace(
        this.out,
        h(
          'div',
          { class: 'result-head bad', 'data-testid': 'run-error' },
          `process/start failed${err.code ? ` (${err.code})` : ''}: ${err.message}`,
        ),
      );
    }
  }
}
