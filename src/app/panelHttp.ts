/** The panel's static files over HTTP (headless host): where the built panel lives, its CSP, a no-traversal handler. */
import { existsSync, readFileSync, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { dirname, extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Where the built panel lives: next to this bundle (dist/main → dist/renderer, dist/cli.js → dist/renderer). */
export function findPanelDir(): string | null {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const c of [
    join(here, 'renderer'),
    join(here, '..', 'renderer'),
    join(here, '..', 'dist', 'renderer'),
  ]) {
    if (existsSync(join(c, 'index.html')) && existsSync(join(c, 'app.js'))) return c;
  }
  return null;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.map': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
};

/** The panel's Content-Security-Policy: own scripts only, no remote content, WebSocket only to this server. */
export function panelCsp(wsOrigins: string[]): string {
  return [
    "default-src 'none'",
    "script-src 'self'",
    // xterm.js writes its theme into a <style> element.
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self' data:",
    `connect-src 'self' ${wsOrigins.join(' ')}`.trim(),
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/** A static handler for /panel/: files of `dir` only, no traversal, strict CSP. */
export function panelHandler(dir: string, csp: () => string) {
  const root = normalize(dir + sep);
  return (req: IncomingMessage, res: ServerResponse, url: URL): boolean => {
    if (url.pathname === '/panel') {
      res.writeHead(308, { location: '/panel/' }).end();
      return true;
    }
    if (!url.pathname.startsWith('/panel/')) return false;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return true;
    }
    let rel: string;
    try {
      rel = decodeURIComponent(url.pathname.slice('/panel/'.length)) || 'index.html';
    } catch {
      res.writeHead(400).end();
      return true;
    }
    const file = normalize(join(root, rel));
    if (!file.startsWith(root) || rel.includes('\0')) {
      res.writeHead(404).end('not found');
      return true;
    }
    let body: Buffer;
    try {
      if (!statSync(file).isFile()) throw new Error('not a file');
      body = readFileSync(file);
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return true;
    }
    res.writeHead(200, {
      'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
      'content-security-policy': csp(),
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
      'cache-control': 'no-store',
      'cross-origin-opener-policy': 'same-origin',
    });
    res.end(req.method === 'HEAD' ? undefined : body);
    return true;
  };
}
