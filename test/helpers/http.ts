import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import WebSocket from 'ws';

/** A plain HTTP request (ws:// URLs are taken as http://); resolves with the status, headers and body. */
export function httpFetch(
  url: string,
  headers: Record<string, string> = {},
  method = 'GET',
): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url.replace(/^ws:/, 'http:'), { method, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

export async function httpGet(url: string, headers: Record<string, string> = {}): Promise<number> {
  return (await httpFetch(url, headers)).status;
}

/** Attempts a WebSocket upgrade; resolves with 101 on success or the HTTP status of the refusal. */
export function upgradeStatus(url: string, opts: WebSocket.ClientOptions = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: false, ...opts });
    ws.once('open', () => {
      ws.close();
      resolve(101);
    });
    ws.once('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      res.resume();
      ws.terminate();
    });
    ws.once('error', (e) => {
      if (!/Unexpected server response/.test(e.message)) reject(e);
    });
  });
}
