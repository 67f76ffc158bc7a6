import ctypes, errno, fcntl, json, os, socket, struct, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
PROXY = int(sys.argv[1]); OTHER = int(sys.argv[2]); what = sys.argv[3]
out = {}
def sin(port, addr='127.0.0.1'):
    return struct.pack('<H', socket.AF_INET) + struct.pack('>H', port) + socket.inet_aton(addr) + b'\0' * 8
def raw_connect(fd, buf, n):
    r = libc.connect(fd, buf, ctypes.c_uint(n))
    return 0 if r == 0 else ctypes.get_errno()
def greet(s):
    s.settimeout(5)
    return s.recv(5).decode()
def try_connect(addr, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.connect(addr); return greet(s)
    except OSError as e: return e.errno
    finally: s.close()
if what == 'basic':
    out['proxy'] = try_connect(('127.0.0.1', PROXY))
    out['other'] = try_connect(('127.0.0.1', OTHER))
    out['otherLoopback'] = try_connect(('127.0.0.2', PROXY))
    out['v6loop'] = try_connect(('::1', PROXY), socket.AF_INET6)
    out['v6mapped'] = try_connect(('::ffff:127.0.0.1', PROXY), socket.AF_INET6)
    s = socket.socket(); fl = fcntl.fcntl(s.fileno(), fcntl.F_GETFD)
    s.setblocking(False)
    e = s.connect_ex(('127.0.0.1', PROXY))
    import select; select.select([], [s], [], 5)
    out['nonblock'] = [e, s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), bool(fcntl.fcntl(s.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK), fcntl.fcntl(s.fileno(), fcntl.F_GETFD) == fl]
    s.setblocking(True); out['nonblockGreet'] = greet(s); s.close()
    # connect asked again while connecting: EALREADY (or EISCONN once done), never a second proxy socket
    s = socket.socket(); s.setblocking(False)
    first = s.connect_ex(('127.0.0.1', PROXY)); second = s.connect_ex(('127.0.0.1', PROXY))
    select.select([], [s], [], 5); third = s.connect_ex(('127.0.0.1', PROXY))
    out['asked again'] = [first, second in (114, 106, 0), third]; s.close()
    s = socket.socket(); s.connect(('127.0.0.1', PROXY)); greet(s)
    try: s.connect(('127.0.0.1', PROXY)); out['again'] = 0
    except OSError as e: out['again'] = e.errno
    s.close()
elif what == 'sockets':
    res = {}
    for name, args in [('udp', (socket.AF_INET, socket.SOCK_DGRAM)), ('netlink', (socket.AF_NETLINK, socket.SOCK_RAW, 0)),
                       ('raw', (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)), ('packet', (17, socket.SOCK_RAW, 0)),
                       ('unixdgram', (socket.AF_UNIX, socket.SOCK_DGRAM))]:
        try: socket.socket(*args).close(); res[name] = 0
        except OSError as e: res[name] = e.errno
    s = socket.socket()
    try: s.sendto(b'x', ('127.0.0.1', OTHER)); res['sendtoTcp'] = 0
    except OSError as e: res['sendtoTcp'] = e.errno
    try: s.sendmsg([b'x'], [], 0x20000000, ('127.0.0.1', OTHER)); res['sendmsgFastopen'] = 0
    except OSError as e: res['sendmsgFastopen'] = e.errno
    s.close(); out = res
elif what == 'malformed':
    res = []
    good = sin(PROXY)
    for n in [0, 1, 2, 3, 8, 15, 128, 200, 4096, 0x7fffffff, 0xffffffff]:
        s = socket.socket(); buf = ctypes.create_string_buffer(good + b'\0' * 4200)
        res.append([n, raw_connect(s.fileno(), buf, n)]); s.close()
    s = socket.socket(); res.append(['null', raw_connect(s.fileno(), None, 16)]); s.close()
    s = socket.socket(); res.append(['unmapped', raw_connect(s.fileno(), ctypes.c_void_p(8), 16)]); s.close()
    res.append(['badfd', raw_connect(987, ctypes.create_string_buffer(good), 16)])
    r, w = os.pipe(); res.append(['pipe', raw_connect(r, ctypes.create_string_buffer(good), 16)])
    out['results'] = res
    out['after'] = try_connect(('127.0.0.1', PROXY))
elif what == 'race':
    buf = ctypes.create_string_buffer(sin(PROXY))
    a, b = sin(PROXY), sin(OTHER)
    stop = [False]
    def flip():
        while not stop[0]:
            ctypes.memmove(buf, b, 16); ctypes.memmove(buf, a, 16)
    t = threading.Thread(target=flip); t.start()
    got = {}
    for i in range(300):
        s = socket.socket()
        e = raw_connect(s.fileno(), buf, 16)
        k = greet(s) if e == 0 else str(e)
        got[k] = got.get(k, 0) + 1; s.close()
    stop[0] = True; t.join(); out['got'] = got
elif what == 'closer':
    got = {}
    for i in range(200):
        s = socket.socket(); fd = s.fileno()
        buf = ctypes.create_string_buffer(sin(PROXY))
        t = threading.Thread(target=lambda: os.close(fd)); t.start()
        e = raw_connect(fd, buf, 16); t.join()
        got[str(e)] = got.get(str(e), 0) + 1
        try: s.detach()
        except OSError: pass
        if e == 0:
            try: os.close(fd)
            except OSError: pass
    out['got'] = got
    out['after'] = try_connect(('127.0.0.1', PROXY))
elif what == 'flood':
    res = []
    lock = threading.Lock()
    def one(i):
        r = try_connect(('127.0.0.1', PROXY if i % 2 == 0 else OTHER))
        with lock: res.append(r if i % 2 == 0 else 'other:' + str(r))
    ts = [threading.Thread(target=one, args=(i,)) for i in range(int(sys.argv[4]))]
    for t in ts: t.start()
    for t in ts: t.join()
    out['got'] = {str(k): res.count(k) for k in set(res)}
elif what == 'bench':
    n = int(sys.argv[4]); t0 = time.perf_counter()
    for i in range(n):
        s = socket.socket(); s.connect(('127.0.0.1', PROXY)); s.close()
    out['usPerConnect'] = (time.perf_counter() - t0) / n * 1e6
print(json.dumps(out)); sys.stdout.flush()
