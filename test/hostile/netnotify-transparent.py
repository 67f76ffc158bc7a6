# The confined side of netnotify-transparent.test.ts: raw connects a program that ignores proxy variables would make.
import errno, json, select, socket, sys, threading
import os
PROXY = int(sys.argv[1]); ALLOWED = int(sys.argv[2]); DENIED = int(sys.argv[3]); what = sys.argv[4]
DENIED_HOST = os.environ.get('DENIED_HOST', '127.0.0.1')  # the denied destination's address (another loopback one)

def read(s):
    s.settimeout(5)
    try:
        return s.recv(100).decode()
    except OSError as e:
        return 'recv:%d' % e.errno

def read_upto(s, n=100):
    # Up to n bytes or the end of the stream: a peer that writes byte by byte is read whole.
    s.settimeout(5)
    got = b''
    try:
        while len(got) < n:
            b = s.recv(n - len(got))
            if not b:
                break
            got += b
    except OSError as e:
        if not got:
            return 'recv:%d' % e.errno
    return got.decode()

def attempt(addr, port, family=socket.AF_INET, reader=read):
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        e = s.connect_ex((addr, port))
        return reader(s) if e == 0 else e
    finally:
        s.close()

out = {}
if what == 'basic':
    out['allowed'] = attempt('127.0.0.1', ALLOWED)
    out['denied'] = attempt('127.0.0.1', DENIED)
    out['otherLoopback'] = attempt('127.0.0.2', ALLOWED)
    out['proxy'] = attempt('127.0.0.1', PROXY)
    out['v6'] = attempt('::1', ALLOWED, socket.AF_INET6)
    out['v6mapped'] = attempt('::ffff:127.0.0.1', ALLOWED, socket.AF_INET6)
    out['port0'] = attempt('127.0.0.1', 0)
    s = socket.socket(); s.setblocking(False)
    e = s.connect_ex(('127.0.0.1', ALLOWED))
    _, w, _ = select.select([], [s], [], 5)
    s.setblocking(True)
    out['nonblock'] = [e in (0, errno.EINPROGRESS), bool(w), s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), read(s)]
    out['again'] = s.connect_ex(('127.0.0.1', ALLOWED))
    s.close()
elif what == 'raw':
    # A program that ignores proxy variables: IPv4, IPv6 ::1, a non-blocking connect (EINPROGRESS or 0, then writable).
    out['allowed'] = attempt('127.0.0.1', ALLOWED)
    out['denied'] = attempt(DENIED_HOST, DENIED)
    out['v6'] = attempt('::1', ALLOWED, socket.AF_INET6)
    s = socket.socket(); s.setblocking(False)
    e = s.connect_ex(('127.0.0.1', ALLOWED))
    _, w, _ = select.select([], [s], [], 5)
    s.setblocking(True)
    out['nonblock'] = [e in (0, errno.EINPROGRESS), bool(w), s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), read(s)]
    s.close()
elif what == 'one':
    out['one'] = attempt('127.0.0.1', ALLOWED, reader=read_upto)
elif what == 'race':
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    def sin(port, host):
        return socket.AF_INET.to_bytes(2, 'little') + port.to_bytes(2, 'big') + socket.inet_aton(host) + bytes(8)
    good, bad = sin(ALLOWED, '127.0.0.1'), sin(DENIED, DENIED_HOST)
    # Holding an address from the start: zeros (family 0, before the flipping thread first ran) are no inet
    # destination at all, which the supervisor refuses with EACCES.
    buf = ctypes.create_string_buffer(good, 16)
    stop = False
    def flip():
        while not stop:
            ctypes.memmove(buf, bad, 16); ctypes.memmove(buf, good, 16)
    t = threading.Thread(target=flip); t.start()
    got = {}
    for _ in range(300):
        s = socket.socket()
        r = libc.connect(s.fileno(), buf, 16)
        k = read(s) if r == 0 else str(ctypes.get_errno())
        got[k] = got.get(k, 0) + 1
        s.close()
    stop = True; t.join()
    out['got'] = got
elif what == 'flood':
    n = int(sys.argv[5]); got = {}; lock = threading.Lock()
    def one(i):
        k = attempt('127.0.0.1', ALLOWED) if i % 2 == 0 else attempt(DENIED_HOST, DENIED)
        with lock:
            got[str(k)] = got.get(str(k), 0) + 1
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts: t.start()
    for t in ts: t.join()
    out['got'] = got
print(json.dumps(out))
