/**
 * The byte pipe behind every tunnel of the managed proxy (HTTP CONNECT, upgrades, SOCKS5 CONNECT): both directions,
 * half-close forwarded, any error or close on one side tears down both.
 *
 * Between two plain TCP sockets the bytes are moved by the native addon with splice(2) (src/platform/native/relay.c):
 * no byte passes through JavaScript, which made a tunnel ~2× faster end to end and cut the proxy's CPU per MiB ~10×
 * (`npm run bench`, "CONNECT tunnel"). The handover uses Node's public API only: each socket is named to the relay by
 * its addresses and a keep-alive mark (platform/relay.ts), what Node had already read goes to the relay as the first
 * bytes, and the Node sockets are then closed: the relay holds the connections, and the owner tracks a stand-in
 * stream that ends with the relay and stops it when destroyed. Anything else (TLS sockets, unix sockets, a test's
 * stream, no addon, or CORRAL_PROXY_SPLICE=0) is piped by Node streams.
 */
import { Socket } from 'node:net';
import { Duplex } from 'node:stream';
import {
  spliceRelay as nativeRelay,
  type RelayHandle,
  type RelaySocketId,
  spliceRelayOn,
} from '../platform/relay.js';

const stats = { spliced: 0, piped: 0, activeRelays: 0 };

/** How many tunnels took each path since start, and how many native relays are running now (tests, diagnosis). */
export function tunnelStats(): Readonly<typeof stats> {
  return { ...stats };
}

/** How the owner of a tunnel (a proxy) keeps the streams it destroys when it closes; it forgets one on its 'close'. */
export type TrackStream = (s: Duplex) => void;

/** Bidirectional pipe with half-close and error teardown. `headToB` is written to b first. */
export function tunnel(a: Duplex, b: Duplex, headToB: Buffer | undefined, track: TrackStream): void {
  // An error on one side (a reset, say) resets the other: ending it with a FIN would pass a cut-off stream for a
  // complete one.
  const resetBoth = () => {
    reset(a);
    reset(b);
  };
  a.on('error', resetBoth);
  b.on('error', resetBoth);
  a.on('close', () => b.destroy());
  b.on('close', () => a.destroy());
  // Half-close: a side whose input has ended keeps its output instead of being ended and closed by Node, which tore
  // the whole tunnel down on the first FIN.
  for (const s of [a, b]) if (s instanceof Socket) s.allowHalfOpen = true;
  if (spliceEnabled() && spliceable(a) && spliceable(b)) {
    spliceTunnel(a as Socket, b as Socket, headToB, track);
    return;
  }
  pipeBoth(a, b, headToB, undefined);
}

function pipeBoth(a: Duplex, b: Duplex, headToB: Buffer | undefined, headToA: Buffer | undefined): void {
  stats.piped++;
  // pipe() ends the other side's output when one side's input ends
  if (headToB && headToB.length > 0) b.write(headToB);
  if (headToA && headToA.length > 0) a.write(headToA);
  a.pipe(b);
  b.pipe(a);
  a.resume();
}

/** An RST for a TCP socket; a unix socket (a daemon's, §3.8) has none (Node throws there), it is destroyed. */
function reset(s: Duplex): void {
  if (
    s instanceof Socket &&
    !s.destroyed &&
    !s.connecting &&
    typeof s.remotePort === 'number' &&
    typeof s.resetAndDestroy === 'function'
  ) {
    s.resetAndDestroy();
  } else {
    s.destroy();
  }
}

function spliceEnabled(): boolean {
  return spliceRelayOn(); // the addon's, unless CORRAL_PROXY_SPLICE=0 (read in src/platform/addon.ts)
}

/** A connected plain TCP socket (not TLS: its bytes on the wire are ciphertext; not a unix socket: no addresses). */
function spliceable(s: Duplex): boolean {
  if (!(s instanceof Socket) || (s as Socket & { encrypted?: boolean }).encrypted) return false;
  return !s.destroyed && !s.connecting && typeof s.remotePort === 'number' && typeof s.localPort === 'number';
}

// Keep-alive idle times from 16384 s (4.5 h) up: far from any a socket of ours is given for keep-alive itself, and
// cleared by the relay as soon as it has found the socket.
const MARK_BASE = 16384;
const MARK_SPAN = 16384;
let nextMark = 0;

/** Marks s and names it for the relay, or null when Node cannot say its addresses. */
function markedId(s: Socket, mark: number): RelaySocketId | null {
  const { localAddress, localPort, remoteAddress, remotePort } = s;
  if (!localAddress || !remoteAddress || localPort === undefined || remotePort === undefined) return null;
  s.setKeepAlive(true, mark * 1000);
  return [mark, localAddress, localPort, remoteAddress, remotePort];
}

/** Everything Node has read from s and not delivered. */
function drain(s: Socket): Buffer[] {
  const chunks: Buffer[] = [];
  for (let c = s.read() as Buffer | null; c !== null; c = s.read() as Buffer | null) chunks.push(c);
  return chunks;
}

/** Calls done once every write queued on s so far has reached the kernel (destroying s would drop the rest). */
function flushed(s: Socket, done: () => void): void {
  if (s.writableLength === 0) done();
  else s.write(Buffer.alloc(0), (err) => err || done());
}

function spliceTunnel(a: Socket, b: Socket, headToB: Buffer | undefined, track: TrackStream): void {
  const relay = nativeRelay!;
  a.pause();
  b.pause();
  let waiting = 2;
  const handOver = () => {
    if (--waiting > 0 || a.destroyed || b.destroyed) return;
    // Synchronous from here to the end: libuv delivers reads from the loop only, so nothing reaches Node after drain.
    const toB = Buffer.concat([...(headToB ? [headToB] : []), ...drain(a)]);
    const toA = Buffer.concat(drain(b));
    const mark = MARK_BASE + (nextMark++ % MARK_SPAN);
    const ida = markedId(a, mark);
    const idb = markedId(b, mark);
    let handle: RelayHandle | null = null;
    const standIn = new Duplex({
      read() {},
      write(_chunk, _encoding, cb) {
        cb(new Error('this tunnel is relayed natively: nothing can be written to it from JavaScript'));
      },
      destroy(err, cb) {
        if (handle !== null) {
          relay.close(handle);
          handle = null;
          stats.activeRelays--;
        }
        cb(err);
      },
    });
    try {
      if (!ida || !idb) throw new Error('no addresses');
      handle = relay.open(ida, idb, toB.length > 0 ? toB : null, toA.length > 0 ? toA : null, () => {
        handle = null;
        stats.activeRelays--;
        standIn.destroy();
      });
    } catch {
      // The relay could not find the sockets: Node streams carry the tunnel, with what was drained sent first.
      if (ida) a.setKeepAlive(false);
      if (idb) b.setKeepAlive(false);
      pipeBoth(a, b, toB, toA);
      return;
    }
    stats.spliced++;
    stats.activeRelays++;
    track(standIn);
    // The relay has its own duplicates: closing ours leaves the connections to it.
    a.destroy();
    b.destroy();
  };
  flushed(a, handOver);
  flushed(b, handOver);
}
