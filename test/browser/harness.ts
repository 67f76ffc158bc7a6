// Browser test harness: Debian's Chromium driven by playwright-core against the headless host (`corral serve`'s
// startHost with the panel), screenshots saved to test-artifacts/.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BrowserContext, chromium, type Locator, type Page } from 'playwright-core';
import { type Host, startHost } from '../../src/app/host.js';
import { RpcClient } from '../helpers/client.js';

/** The rendered (visible) text of an element. */
export function visibleText(l: Locator): Promise<string> {
  // biome-ignore lint/performance/useDomNodeTextContent: Playwright's Locator.innerText (rendered text) is meant
  return l.innerText();
}

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const ARTIFACTS = join(ROOT, 'test-artifacts');
export const CHROMIUM = '/usr/bin/chromium';

/**
 * The panel this test run built from the working tree (scripts/test.mjs builds the application into its own
 * directory and names it in CORRAL_DIST: nothing else writes there). Run outside scripts/test.mjs: builds dist/ if it
 * is missing and returns a private copy of it, so a concurrent rebuild of dist/ (the working tree is shared) cannot
 * pull the files from under a running test.
 */
export function ensureBuilt(): string {
  if (process.env.CORRAL_DIST) return join(process.env.CORRAL_DIST, 'renderer');
  const dir = join(ROOT, 'dist', 'renderer');
  for (let attempt = 0; ; attempt++) {
    if (
      !existsSync(join(dir, 'app.js')) ||
      !existsSync(join(ROOT, 'dist', 'cli.js')) ||
      process.env.CORRAL_REBUILD === '1'
    ) {
      const r = spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs')], { stdio: 'inherit' });
      if (r.status !== 0 && attempt >= 2) throw new Error('build failed');
    }
    const copy = mkdtempSync(join(tmpdir(), 'corral-panel-build-'));
    try {
      cpSync(dir, copy, { recursive: true });
      for (const f of ['index.html', 'app.js', 'app.css']) {
        if (!existsSync(join(copy, f))) throw new Error(`${f} missing`);
      }
      snapshots.push(copy);
      return copy;
    } catch (e) {
      rmSync(copy, { recursive: true, force: true });
      if (attempt >= 2) throw e;
    }
  }
}

const snapshots: string[] = [];
process.on('exit', () => {
  for (const s of snapshots) rmSync(s, { recursive: true, force: true });
});

export interface Browser {
  context: BrowserContext;
  page: Page;
  /** Uncaught page errors and console errors (CSP violations show up here). */
  errors: string[];
  screenshot(name: string): Promise<string>;
  close(): Promise<void>;
}

export async function openBrowser(): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'corral-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1440, height: 900 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`console: ${m.text()}`);
  });
  mkdirSync(ARTIFACTS, { recursive: true });
  return {
    context,
    page,
    errors,
    async screenshot(name) {
      const path = join(ARTIFACTS, `${name}.png`);
      await page.screenshot({ path });
      return path;
    },
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Opens a panel URL in `browser` and waits until the panel says it is connected; the page. */
export async function openPanel(browser: Browser, url: string, timeout = 15_000): Promise<Page> {
  await browser.page.goto(url);
  await browser.page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout });
  return browser.page;
}

/** A headless host serving the built panel, a browser on its panel (connected), and an agent connected to it. */
export interface PanelHost {
  host: Host;
  browser: Browser;
  agent: RpcClient & { sessionId: string };
  close(): Promise<void>;
}

export async function openPanelHost(agentName = 'codex-agent'): Promise<PanelHost> {
  const host = await startHost({ servePanel: true, panelDir: ensureBuilt(), resumeGraceMs: 60_000 });
  const browser = await openBrowser();
  const agent = await RpcClient.open(host.execUrl, agentName);
  await openPanel(browser, host.panelUrl!);
  return {
    host,
    browser,
    agent,
    async close() {
      agent.close();
      await browser.close();
      await host.shutdown();
    },
  };
}
