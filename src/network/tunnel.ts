/**
 * The byte pipe behind every tunnel of the managed proxy (HTTP CONNECT, upgrades, SOCKS5 CONNECT): both directions,
 * half-close forwarded, any error or close on one side tears down both.
 *
 * Between two plain sockets the bytes are moved by the native addon with splice(2) (src/process/native/relay.c): no
 * byte passes through JavaScript, which made a tunnel ~2× faster end to end and cut the proxy's CPU per MiB ~10×
 * (`npm run bench`, "CONNECT tunnel"). Anything else (TLS sockets, a test's stream, no addon, or
 * CORRAL_PROXY_SPLICE=0) is piped by Node streams.
 */
import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { spliceRelay as nativeRelay, type RelayHandle } from '../platform/relay.js';

const stats = { spliced: 0, piped: 0, activeRelays: 0 };

/** How many tunnels took each path since start, and how many native relays are running now (tests, diagnosis). */
export function tunnelStats(): Readonly<typeof stats> {
  return { ...stats };
}

/** Bidirectional pipe with half-close and error teardown. `headToB` is written to b first. */
export function tunnel(a: Duplex, b: Duplex, headToB?: Buffer): void {
  const destroyBoth = () => {
    a.destroy();
    b.destroy();
  };
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
  // the whole tunnel down on the first FIN (for the splice path: a FIN Node read before the relay took over).
  for (const s of [a, b]) if (s instanceof Socket) s.allowHalfOpen = true;
  if (spliceEnabled() && spliceable(a) && spliceable(b)) {
    stats.spliced++;
    spliceTunnel(a as Socket, b as Socket, headToB, destroyBoth, resetBoth);
    return;
  }
  stats.piped++;
  // pipe() ends the other side's output when one side's input ends
  if (headToB && headToB.length > 0) b.write(headToB);
  a.pipe(b);
  b.pipe(a);
  a.resume();
}

function reset(s: Duplex): void {
  if (s instanceof Socket && !s.destroyed && !s.connecting && typeof s.resetAndDestroy === 'function') {
    s.resetAndDestroy();
  } else {
    s.destroy();
  }
}

function spliceEnabled(): boolean {
  return nativeRelay !== null && process.env.CORRAL_PROXY_SPLICE !== '0';
}

/** libuv's stream handle behind a net.Socket (Node internals, checked before use). */
interface StreamHandle {
  fd?: number;
  reading?: boolean;
  readStop?(): number;
}

function handleOf(s: Duplex): StreamHandle | null {
  const h = (s as unknown as { _handle?: StreamHandle | null })._handle;
  return h && typeof h.fd === 'number' && h.fd >= 0 && typeof h.readStop === 'function' ? h : null;
}

/** A connected plain socket (not TLS: its fd carries ciphertext) whose fd we can use. */
function spliceable(s: Duplex): boolean {
  if (!(s instanceof Socket) || (s as Socket & { encrypted?: boolean }).encrypted) return false;
  return !s.destroyed && !s.connecting && handleOf(s) !== null;
}

/**
 * Takes the socket's reading away from Node and returns what Node had already read. After readStop, `reading` is
 * left true on purpose: Socket#_read restarts reading only when it is false, and the stream machinery calls _read
 * (read(0) after a push, resume()) at times we do not control. Closing still works as usual.
 */
function takeReading(s: Socket, h: StreamHandle): Buffer[] {
  s.pause();
  const buffered: Buffer[] = [];
  for (let c = s.read() as Buffer | null; c !== null; c = s.read() as Buffer | null) buffered.push(c);
  // Synchronous: libuv delivers reads from the loop only, so nothing can reach Node's buffer after this.
  h.readStop!();
  h.reading = true;
  return buffered;
}

/** Writes the chunks, then calls done once every write queued on s so far has reached the kernel. */
function flushThen(s: Socket, chunks: (Buffer | undefined)[], done: () => void): void {
  const data = chunks.filter((c): c is Buffer => c !== undefined && c.length > 0);
  const last = data.pop();
  for (const c of data) s.write(c);
  if (last) s.write(last, (err) => err || done());
  else if (s.writableLength === 0) done();
  else s.write(Buffer.alloc(0), (err) => err || done());
}

function spliceTunnel(
  a: Socket,
  b: Socket,
  headToB: Buffer | undefined,
  destroyBoth: () => void,
  resetBoth: () => void,
): void {
  const relay = nativeRelay!;
  const fromA = takeReading(a, handleOf(a)!);
  const fromB = takeReading(b, handleOf(b)!);
  let waiting = 2;
  const ready = () => {
    if (--waiting > 0 || a.destroyed || b.destroyed) return;
    const ha = handleOf(a);
    const hb = handleOf(b);
    if (!ha || !hb) return destroyBoth();
    let handle: RelayHandle | null = null;
    try {
      // When the relay ends (both directions at EOF, or an error), its copies of the fds are closed: destroying our
      // sockets closes the connections.
      handle = relay.open(ha.fd!, hb.fd!, (err) => {
        handle = null;
        stats.activeRelays--;
        if (err === 0) destroyBoth();
        else resetBoth();
      });
    } catch {
      return destroyBoth();
    }
    stats.activeRelays++;
    const stop = () => {
      if (handle === null) return;
      relay.close(handle);
      handle = null;
      stats.activeRelays--;
    };
    a.once('close', stop);
    b.once('close', stop);
  };
  flushThen(b, [headToB, ...fromA], ready);
  flushThen(a, fromB, ready);
}
