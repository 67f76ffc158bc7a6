/**
 * A loopback HTTPS origin with its own CA, made by the openssl CLI (an independent issuer: nothing of Corral's
 * certificate code is used), for the TLS interception tests. Its leaf names 127.0.0.1 and localhost.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

export interface OriginSeen {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

export interface TlsOrigin {
  port: number;
  /** The origin's CA certificate (PEM file). */
  caPath: string;
  seen: OriginSeen[];
  close(): Promise<void>;
}

/** Makes the origin's CA and leaf in `dir` (EC P-256, SKI/AKI, SAN IP:127.0.0.1, DNS:localhost and `names`). */
export function makeOriginCerts(
  dir: string,
  names: readonly string[] = [],
): { caPath: string; keyPath: string; certPath: string } {
  const f = (n: string) => join(dir, n);
  const ssl = (...args: string[]) => execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  ssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', f('ca.key'));
  ssl(
    'req',
    '-x509',
    '-new',
    '-key',
    f('ca.key'),
    '-subj',
    '/CN=Corral test origin CA',
    '-days',
    '2',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
    '-out',
    f('ca.pem'),
  );
  ssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', f('leaf.key'));
  ssl('req', '-new', '-key', f('leaf.key'), '-subj', '/CN=localhost', '-out', f('leaf.csr'));
  writeFileSync(
    f('leaf.ext'),
    [
      `subjectAltName=IP:127.0.0.1,DNS:localhost${names.map((n) => `,DNS:${n}`).join('')}`,
      'extendedKeyUsage=serverAuth',
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature',
      'subjectKeyIdentifier=hash',
      'authorityKeyIdentifier=keyid',
    ].join('\n'),
  );
  ssl(
    'x509',
    '-req',
    '-in',
    f('leaf.csr'),
    '-CA',
    f('ca.pem'),
    '-CAkey',
    f('ca.key'),
    '-set_serial',
    '7',
    '-days',
    '2',
    '-extfile',
    f('leaf.ext'),
    '-out',
    f('leaf.pem'),
  );
  return { caPath: f('ca.pem'), keyPath: f('leaf.key'), certPath: f('leaf.pem') };
}

/**
 * Starts the origin: it answers `ok <method> <url>` and records each request. With `files`, a GET under `/files/`
 * is served from that directory (a dumb-HTTP git remote, say), 404 when absent.
 */
export async function startTlsOrigin(
  dir: string,
  opts: { files?: string; names?: readonly string[] } = {},
): Promise<TlsOrigin> {
  const certs = makeOriginCerts(dir, opts.names);
  const seen: OriginSeen[] = [];
  const server = https.createServer(
    { key: readFileSync(certs.keyPath), cert: readFileSync(certs.certPath), ALPNProtocols: ['http/1.1'] },
    (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        seen.push({
          method: req.method ?? '',
          url: req.url ?? '',
          headers: req.headers,
          body: Buffer.concat(chunks).toString(),
        });
        const url = req.url ?? '';
        if (opts.files !== undefined && url.startsWith('/files/')) {
          const path = join(opts.files, decodeURIComponent(url.slice(7).split('?')[0]!));
          if (!path.startsWith(opts.files) || !existsSync(path) || !statSync(path).isFile()) {
            res.writeHead(404, { 'content-length': 0 });
            res.end();
            return;
          }
          const data = readFileSync(path);
          res.writeHead(200, { 'content-length': data.length });
          res.end(data);
          return;
        }
        const body = `ok ${req.method} ${req.url}`;
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body) });
        res.end(req.method === 'HEAD' ? undefined : body);
      });
    },
  );
  server.on('upgrade', (req, socket) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: '' });
    socket.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: echo\r\nconnection: upgrade\r\n\r\n');
    socket.pipe(socket);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    caPath: certs.caPath,
    seen,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
