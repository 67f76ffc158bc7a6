// Policy debugger: paste a SandboxLaunchConfig / FileSystemSandboxContext or a managed-network config; see the
// validation errors by field, the effective launch (bwrap argv / Seatbelt profile), and URL decisions — all computed
// by the server (`policy/preview`, `policy/checkUrl`).
import type { FieldError } from '../../src/protocol/monitor.js';
import { h, replace, shellJoin, shellSplit } from '../dom.js';
import type { AppContext, View } from '../view.js';

export function sandboxExample(cwd: string, sandbox = 'linux-seccomp'): unknown {
  return {
    sandbox,
    policy: {
      type: 'workspace-write',
      writable_roots: [],
      network_access: false,
      exclude_tmpdir_env_var: false,
      exclude_slash_tmp: false,
    },
    fileSystemPolicy: {
      kind: 'restricted',
      entries: [
        { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
        { path: { type: 'special', value: { kind: 'current_working_directory' } }, access: 'write' },
        { path: { type: 'special', value: { kind: 'slash_tmp' } }, access: 'write' },
        { path: { type: 'path', path: `${cwd.replace(/\/$/, '')}/.git` }, access: 'read' },
      ],
    },
    networkPolicy: 'restricted',
    sandboxPolicyCwd: cwd,
    additionalPermissions: null,
    enforceManagedNetwork: false,
    windowsSandboxLevel: 'disabled',
    windowsSandboxPrivateDesktop: false,
    useLegacyLandlock: false,
  };
}

const NETWORK_EXAMPLE = {
  config: {
    network: {
      enabled: true,
      mode: 'limited',
      domains: { 'registry.npmjs.org': 'allow', '*.github.com': 'allow', 'pastebin.com': 'deny' },
      allow_local_binding: false,
    },
  },
};

function errorList(errors: FieldError[]): HTMLElement {
  return h(
    'ul',
    { class: 'errors', 'data-testid': 'validation-errors' },
    errors.map((e) =>
      h('li', null, h('code', { class: 'err-path' }, e.path || '(root)'), h('span', null, e.message)),
    ),
  );
}

function parseJson(text: string): { ok: true; value: unknown } | { ok: false; message: string } {
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (e) {
    return { ok: false, message: (e as Error).message };
  }
}

export class PolicyView implements View {
  readonly el = h('section', { 'aria-label': 'Policy debugger' });
  private readonly sandboxText = h('textarea', {
    class: 'input code',
    rows: '18',
    spellcheck: 'false',
    'aria-label': 'Sandbox config JSON',
    'data-testid': 'sandbox-json',
  });
  private readonly argv = h('input', {
    class: 'input mono',
    value: '/bin/sh -c "echo hello"',
    'aria-label': 'argv',
  });
  private readonly cwd = h('input', { class: 'input mono', value: '/tmp', 'aria-label': 'cwd' });
  private readonly previewOut = h('div', { class: 'result', 'data-testid': 'preview-result' });
  private readonly netText = h('textarea', {
    class: 'input code',
    rows: '12',
    spellcheck: 'false',
    'aria-label': 'Network config JSON',
    'data-testid': 'network-json',
  });
  private readonly target = h('input', {
    class: 'input mono',
    value: 'https://registry.npmjs.org/',
    'aria-label': 'URL or host:port',
    'data-testid': 'check-target',
  });
  private readonly method = h(
    'select',
    { class: 'input', 'aria-label': 'Method' },
    ['(default)', 'GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'CONNECT'].map((m) =>
      h('option', { value: m === '(default)' ? '' : m }, m),
    ),
  );
  private readonly checkOut = h('div', { class: 'result', 'data-testid': 'check-result' });

  constructor(private readonly ctx: AppContext) {
    this.sandboxText.value = JSON.stringify(sandboxExample('/tmp'), null, 2);
    this.netText.value = JSON.stringify(NETWORK_EXAMPLE, null, 2);
    this.el.append(
      h('div', { class: 'toolbar' }, h('h2', null, 'Policy debugger'), h('div', { class: 'grow' })),
      h(
        'div',
        { class: 'policy-grid' },
        h(
          'div',
          { class: 'card' },
          h(
            'div',
            { class: 'card-head' },
            h('h3', null, 'Sandbox'),
            h(
              'div',
              { class: 'btn-row' },
              h(
                'button',
                { class: 'btn ghost small', onclick: () => this.example('linux-seccomp') },
                'Example: workspace-write',
              ),
              h(
                'button',
                { class: 'btn ghost small', onclick: () => this.example('macos-seatbelt') },
                'Seatbelt',
              ),
              h(
                'button',
                { class: 'btn ghost small', onclick: () => this.format(this.sandboxText) },
                'Format',
              ),
            ),
          ),
          h(
            'p',
            { class: 'muted small' },
            'A seed SandboxLaunchConfig ({"sandbox": …}) or a 0.169 FileSystemSandboxContext ({"permissions": …}).',
          ),
          this.sandboxText,
          h(
            'div',
            { class: 'form-row' },
            h('label', { class: 'grow' }, 'argv', this.argv),
            h('label', null, 'cwd', this.cwd),
          ),
          h(
            'div',
            { class: 'btn-row' },
            h(
              'button',
              { class: 'btn primary', 'data-testid': 'preview', onclick: () => void this.preview() },
              'Preview launch',
            ),
          ),
          this.previewOut,
        ),
        h(
          'div',
          { class: 'card' },
          h(
            'div',
            { class: 'card-head' },
            h('h3', null, 'Managed network'),
            h(
              'div',
              { class: 'btn-row' },
              h('button', { class: 'btn ghost small', onclick: () => this.format(this.netText) }, 'Format'),
            ),
          ),
          h(
            'p',
            { class: 'muted small' },
            'A managedNetwork object ({"config": {"network": …}}) or a bare config.',
          ),
          this.netText,
          h(
            'div',
            { class: 'form-row' },
            h('label', { class: 'grow' }, 'URL or host:port', this.target),
            h('label', null, 'Method', this.method),
          ),
          h(
            'div',
            { class: 'btn-row' },
            h(
              'button',
              { class: 'btn primary', 'data-testid': 'check', onclick: () => void this.check() },
              'Check',
            ),
          ),
          this.checkOut,
        ),
      ),
    );
  }

  private example(kind: string): void {
    this.sandboxText.value = JSON.stringify(sandboxExample(this.cwd.value || '/tmp', kind), null, 2);
  }

  private format(t: HTMLTextAreaElement): void {
    const r = parseJson(t.value);
    if (r.ok) t.value = JSON.stringify(r.value, null, 2);
    else this.ctx.toast(`Not JSON: ${r.message}`, 'error');
  }

  private reveal(el: HTMLElement): void {
    el.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
  }

  private async preview(): Promise<void> {
    await this.previewInner();
    this.reveal(this.previewOut);
  }

  private async check(): Promise<void> {
    await this.checkInner();
    this.reveal(this.checkOut);
  }

  private async previewInner(): Promise<void> {
    const r = parseJson(this.sandboxText.value);
    if (!r.ok) {
      replace(this.previewOut, errorList([{ path: '(json)', message: r.message }]));
      return;
    }
    let argv: string[];
    try {
      argv = shellSplit(this.argv.value);
    } catch (e) {
      replace(this.previewOut, errorList([{ path: 'argv', message: (e as Error).message }]));
      return;
    }
    replace(this.previewOut, h('div', { class: 'muted' }, 'Previewing…'));
    try {
      const res = await this.ctx.conn.request('policy/preview', {
        sandbox: r.value,
        argv,
        cwd: this.cwd.value || null,
      });
      if (!res.valid) {
        replace(
          this.previewOut,
          h(
            'div',
            { class: 'result-head bad' },
            `Invalid ${res.shape === 'context' ? 'FileSystemSandboxContext' : 'SandboxLaunchConfig'}`,
          ),
          errorList(res.errors),
        );
        return;
      }
      replace(
        this.previewOut,
        h(
          'div',
          { class: 'result-head ok', 'data-testid': 'preview-ok' },
          `Valid ${res.shape === 'context' ? 'FileSystemSandboxContext' : res.shape === 'none' ? '(no sandbox)' : 'SandboxLaunchConfig'}`,
          res.sandboxType ? ` → ${res.sandboxType}` : '',
        ),
        res.note ? h('p', { class: 'muted small' }, res.note) : null,
        res.summary
          ? h(
              'dl',
              { class: 'kv' },
              Object.entries(res.summary).map(([k, v]) => [
                h('dt', null, k),
                h('dd', { class: 'mono wrap' }, typeof v === 'string' ? v : JSON.stringify(v)),
              ]),
            )
          : null,
        res.argv
          ? [
              h('h4', null, 'Command'),
              h('pre', { class: 'code-block', 'data-testid': 'preview-argv' }, argvLines(res.argv)),
            ]
          : null,
        res.seatbeltProfile
          ? [
              h('h4', null, 'Seatbelt profile'),
              h('pre', { class: 'code-block', 'data-testid': 'preview-profile' }, res.seatbeltProfile),
            ]
          : null,
      );
    } catch (e) {
      replace(this.previewOut, errorList([{ path: '(request)', message: (e as Error).message }]));
    }
  }

  private async checkInner(): Promise<void> {
    const r = parseJson(this.netText.value);
    if (!r.ok) {
      replace(this.checkOut, errorList([{ path: '(json)', message: r.message }]));
      return;
    }
    try {
      const res = await this.ctx.conn.request('policy/checkUrl', {
        config: r.value,
        target: this.target.value,
        method: this.method.value || null,
      });
      if (!res.valid) {
        replace(this.checkOut, h('div', { class: 'result-head bad' }, 'Invalid'), errorList(res.errors));
        return;
      }
      const decision = res.decision ?? 'n/a';
      replace(
        this.checkOut,
        h(
          'div',
          { class: `verdict verdict-${decision}`, 'data-testid': 'verdict', 'data-decision': decision },
          h(
            'span',
            { class: 'verdict-word' },
            decision === 'allow'
              ? 'Allowed'
              : decision === 'deny'
                ? 'Blocked'
                : decision === 'ask'
                  ? 'Ask'
                  : 'No proxy',
          ),
          h('span', { class: 'mono' }, `${res.host}:${res.port}`),
        ),
        h(
          'dl',
          { class: 'kv' },
          h('dt', null, 'Reason'),
          h('dd', { class: 'mono', 'data-testid': 'verdict-reason' }, res.reason ?? '–'),
          h('dt', null, 'Source'),
          h('dd', null, res.source ?? '–'),
          h('dt', null, 'Mode'),
          h('dd', null, res.mode ?? '–'),
          res.message ? [h('dt', null, 'Client sees'), h('dd', null, res.message)] : null,
        ),
        res.warnings.length > 0
          ? h(
              'ul',
              { class: 'warnings', 'data-testid': 'check-warnings' },
              res.warnings.map((w) => h('li', null, w)),
            )
          : null,
      );
    } catch (e) {
      replace(this.checkOut, errorList([{ path: '(request)', message: (e as Error).message }]));
    }
  }
}

/** bwrap argv, one option per line, for reading. */
function argvLines(argv: string[]): string {
  const lines: string[] = [];
  let cur: string[] = [];
  for (const a of argv) {
    if (a.startsWith('--') && cur.length > 0) {
      lines.push(shellJoin(cur));
      cur = [];
    }
    cur.push(a);
  }
  if (cur.length > 0) lines.push(shellJoin(cur));
  return lines.join(' \\\n  ');
}
