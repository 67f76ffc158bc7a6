// The connect supervisor of Landlock commands under managed-network enforcement (issue 33, item 3).
//
// Landlock's TCP rules name a port, not an address: a rule for the proxy's port would let the command reach that port
// on every host. So such a command also runs under a seccomp user-notification filter (confine.c, net_notify_chan):
// its connect() calls stop in the kernel and come here, to one thread of the server with an epoll over every
// command's listener fd. For each:
//   1. read the sockaddr from the command's memory (process_vm_readv), then check the notification is still valid
//      (SECCOMP_IOCTL_NOTIF_ID_VALID: the pid was not reused);
//   2. exactly an AF_INET 127.0.0.1:<one of the command's proxy ports>, or AF_INET6 ::ffff:127.0.0.1:<port>: the
//      server creates its OWN socket, connects it to 127.0.0.1:<port> (the address and port are the server's copy,
//      never re-read from the command), and installs it over the command's fd (SECCOMP_IOCTL_NOTIF_ADDFD with
//      SECCOMP_ADDFD_FLAG_SETFD, Linux >= 5.9) with the fd's close-on-exec flag and O_NONBLOCK; the call returns 0
//      (EINPROGRESS for a non-blocking fd whose connect is still under way, as connect(2) itself would). Whatever the
//      command writes into its sockaddr after the check, it gets a socket to the proxy and nothing else;
//   3. anything else (another address or port, another family, a length that cannot hold the address, memory that
//      cannot be read, a fd that is not a TCP socket of the command): EACCES (as Landlock answers a denied connect).
//      An already connected socket gets EISCONN (EALREADY while connecting), a closed fd EBADF, a length beyond
//      sizeof(struct sockaddr_storage) EINVAL (as connect(2) itself).
// The command's fd is looked at through pidfd_getfd (domain, type, protocol, O_NONBLOCK, whether connected) and
// /proc/<pid>/fdinfo (close-on-exec); nothing of the command's memory is trusted beyond the one read in 1.
// No JavaScript runs per connection. A listener whose commands have all exited reports EPOLLHUP and is closed.
//
// JS surface:
//   netNotifyProbe() -> null | string    why this kernel cannot do it (null: it can), asked once per process
//   netNotifyPair() -> [serverFd, childFd] a unix stream socketpair, close-on-exec both; childFd goes to the command
//                                         (LaunchSpec confine.netNotifyFd / the launcher's --net-notify), the
//                                         server closes its copy after the spawn
//   netNotifyWatch(serverFd, ports, socksPort?, passPorts?)
//                                         adopts serverFd: the listener the command sends over it is supervised with
//                                         these proxy ports (1..8 loopback ports); with socksPort, transparent TCP
//                                         (below); with passPorts, the bwrap mode (struct watch.pass_other)
//
// Transparent TCP (issue 35, --linux-sandbox-transparent-tcp): with a SOCKS port, a connect to any other inet/inet6
// destination on a fresh TCP socket is held while a socket of the server's does the SOCKS5 exchange with the
// command's own SOCKS5 listener (CONNECT to the IP and port read in 1., a v4-mapped address as IPv4), non-blocking in
// this thread's epoll (struct pending; 1024 at most, 10 s each, then ETIMEDOUT). Granted: that socket replaces the
// command's fd as in 2. and the call returns 0 (also for a non-blocking fd: the exchange is over); refused by the
// proxy (its admission rule, audited there), or the proxy unreachable: ECONNREFUSED. A racing thread can at most
// make the command ask for another destination, which the proxy decides.
//   netNotifyCounts() -> [proxied, refused, watched]
//   netNotifyTransparent(localPort, socksPort) -> bool
//                                         whether that connection to the SOCKS port is a held connect's exchange
//                                         (the proxy marks its decision transparent)

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "netnotify.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef SECCOMP_FILTER_FLAG_NEW_LISTENER
#define SECCOMP_FILTER_FLAG_NEW_LISTENER (1UL << 3)
#endif
#ifndef SECCOMP_GET_NOTIF_SIZES
#define SECCOMP_GET_NOTIF_SIZES 3
#endif
#ifndef SECCOMP_RET_USER_NOTIF
#define SECCOMP_RET_USER_NOTIF 0x7fc00000U
#endif
#ifndef SECCOMP_IOCTL_NOTIF_ADDFD
struct seccomp_notif_addfd {
  __u64 id;
  __u32 flags;
  __u32 srcfd;
  __u32 newfd;
  __u32 newfd_flags;
};
#define SECCOMP_IOCTL_NOTIF_ADDFD _IOW('!', 3, struct seccomp_notif_addfd)
#endif
#ifndef SECCOMP_ADDFD_FLAG_SETFD
#define SECCOMP_ADDFD_FLAG_SETFD (1UL << 0)
#endif

#define MAX_PORTS 8
#define CONNECT_WAIT_MS 3000

#define MAX_PENDING 1024
#define HANDSHAKE_MS 10000

enum kind { K_CHANNEL, K_LISTENER, K_PENDING };

struct watch {
  enum kind kind;  // first member: an epoll entry is a struct watch or a struct pending
  int fd;
  bool listener;  // false: the channel the listener arrives on
  int nports;
  uint16_t ports[MAX_PORTS];
  uint16_t socks;  // transparent TCP: every other inet destination is asked of this SOCKS5 port (0: off)
  // bwrap (transparent TCP in a network namespace of the sandbox's own): what is not an inet destination the
  // supervisor takes over (another family, a malformed call, a UDP socket, 127.0.0.1 on one of these in-namespace
  // forwarder ports) goes on to the kernel (SECCOMP_USER_NOTIF_FLAG_CONTINUE), which decides it inside that
  // namespace, where the command could make the same call without the filter; false: refused (EACCES, Landlock).
  bool pass_other;
  int npass;
  uint16_t pass[MAX_PORTS];
};

// Transparent TCP: a connect held while the server's own socket does the SOCKS5 exchange with the command's proxy,
// without blocking the thread (the socket is in the epoll set; its state advances on each readiness).
struct pending {
  enum kind kind;
  struct pending *next, *prev;
  int listener;  // a dup of the command's listener (the watch may be dropped meanwhile)
  int sock;
  uint64_t id;
  int fd;  // the command's fd number
  bool cloexec, nonblock;
  int state;  // 0 connecting, 1 waiting for the method reply, 2 for the CONNECT reply
  unsigned char req[32];
  size_t reqlen;
  unsigned char buf[4 + 1 + 255 + 2];  // the longest reply: a 255-byte domain
  size_t got, need;
  long long deadline;
  int slot;  // its entry in the transparent table (below), -1: none
};

static struct pending *pendings;
static int npending;

// The transparent table: the local port and SOCKS port of each held connect's socket while its exchange runs, so that
// the proxy can tell a connection the supervisor made for a command from one a program made itself
// (netNotifyTransparent). Only the supervisor's own bound sockets have these 127.0.0.1 4-tuples, so no command can
// present one. Read by the JS thread, written by the supervisor's: under its lock.
static pthread_mutex_t transparent_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  uint16_t local, socks;
} transparent[MAX_PENDING];

static int transparent_add(uint16_t local, uint16_t socks) {
  int slot = -1;
  pthread_mutex_lock(&transparent_lock);
  for (int k = 0; k < MAX_PENDING; k++)
    if (transparent[k].local == 0) {
      transparent[k].local = local;
      transparent[k].socks = socks;
      slot = k;
      break;
    }
  pthread_mutex_unlock(&transparent_lock);
  return slot;
}

static void transparent_remove(int slot) {
  if (slot < 0) return;
  pthread_mutex_lock(&transparent_lock);
  transparent[slot].local = transparent[slot].socks = 0;
  pthread_mutex_unlock(&transparent_lock);
}

static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static int epfd = -1;
static struct seccomp_notif_sizes sizes;
static atomic_ullong proxied, refused, watched;

static void drop(struct watch *w) {
  epoll_ctl(epfd, EPOLL_CTL_DEL, w->fd, NULL);
  close(w->fd);
  free(w);
  atomic_fetch_sub(&watched, 1);
}

// The listener from the channel (exactly one fd, SCM_RIGHTS); the channel is closed either way.
static void receive_listener(struct watch *w) {
  char byte;
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int) * 4)];
  } ctl;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  ssize_t r = recvmsg(w->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
  int got = -1;
  for (struct cmsghdr *c = r > 0 ? CMSG_FIRSTHDR(&msg) : NULL; c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < n; k++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
      if (got < 0) got = fd;
      else close(fd);
    }
  }
  epoll_ctl(epfd, EPOLL_CTL_DEL, w->fd, NULL);
  close(w->fd);
  // A listener answers SECCOMP_IOCTL_NOTIF_ID_VALID (ENOENT for an unknown id); anything else is not one.
  uint64_t probe_id = 0;
  if (got >= 0 && ioctl(got, SECCOMP_IOCTL_NOTIF_ID_VALID, &probe_id) < 0 && errno != ENOENT) {
    close(got);
    got = -1;
  }
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w};
  w->fd = got;
  w->listener = true;
  w->kind = K_LISTENER;
  if (got < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, got, &ev) < 0) {
    if (got >= 0) close(got);
    free(w);
    atomic_fetch_sub(&watched, 1);
  }
}

static void answer(int listener, uint64_t id, int err, bool proxy) {
  struct seccomp_notif_resp resp = {.id = id, .val = 0, .error = err ? -err : 0, .flags = 0};
  ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);  // ENOENT: the call is gone (killed, or the thread exited)
  if (proxy) atomic_fetch_add(&proxied, 1);
  else atomic_fetch_add(&refused, 1);
}

#ifndef SECCOMP_USER_NOTIF_FLAG_CONTINUE
#define SECCOMP_USER_NOTIF_FLAG_CONTINUE (1UL << 0)
#endif

// A connect that is not the supervisor's to take: EACCES, or (pass_other) on to the kernel in the sandbox's namespace.
static void refuse(struct watch *w, uint64_t id) {
  if (!w->pass_other) return answer(w->fd, id, EACCES, false);
  struct seccomp_notif_resp resp = {.id = id, .val = 0, .error = 0, .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
  ioctl(w->fd, SECCOMP_IOCTL_NOTIF_SEND, &resp);
}

// Whether addr is 127.0.0.1 (or ::ffff:127.0.0.1) on one of `ports`.
static bool loopback_on(const unsigned char *addr, size_t len, const uint16_t *ports, int nports) {
  sa_family_t fam;
  if (len < sizeof fam) return false;
  memcpy(&fam, addr, sizeof fam);
  uint16_t port = 0;
  if (fam == AF_INET && len >= sizeof(struct sockaddr_in)) {
    struct sockaddr_in in;
    memcpy(&in, addr, sizeof in);
    if (in.sin_addr.s_addr != htonl(INADDR_LOOPBACK)) return false;
    port = ntohs(in.sin_port);
  } else if (fam == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
    struct sockaddr_in6 in6;
    memcpy(&in6, addr, sizeof in6);
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    uint32_t v4;
    memcpy(&v4, in6.sin6_addr.s6_addr + 12, sizeof v4);
    if (memcmp(in6.sin6_addr.s6_addr, mapped, sizeof mapped) != 0 || v4 != htonl(INADDR_LOOPBACK)) return false;
    port = ntohs(in6.sin6_port);
  } else {
    return false;
  }
  for (int k = 0; k < nports; k++)
    if (port != 0 && ports[k] == port) return true;
  return false;
}

// The port when addr (len bytes read from the command) is exactly the proxy's loopback endpoint, else 0.
static uint16_t proxy_port(const struct watch *w, const unsigned char *addr, size_t len) {
  if (!loopback_on(addr, len, w->ports, w->nports)) return 0;
  uint16_t port;
  memcpy(&port, addr + 2, sizeof port);  // sin_port and sin6_port are both at offset 2
  return ntohs(port);
}

// The start of a small /proc file as a string in buf (at most size - 1 bytes, NUL-terminated): 0, or -1 unreadable.
static int read_proc_text(const char *path, char *buf, size_t size) {
  int f = open(path, O_RDONLY | O_CLOEXEC);
  if (f < 0) return -1;
  ssize_t n = read(f, buf, size - 1);
  close(f);
  if (n <= 0) return -1;
  buf[n] = 0;
  return 0;
}

// The close-on-exec flag of the command's fd (its fdinfo "flags:" line, octal, O_CLOEXEC included); -1 unknown.
static int fd_cloexec(pid_t pid, int fd) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/fdinfo/%d", (int)pid, fd);
  if (read_proc_text(path, buf, sizeof buf) < 0) return -1;
  const char *p = strstr(buf, "flags:");
  if (!p) return -1;
  unsigned long flags = strtoul(p + 6, NULL, 8);
  return (flags & O_CLOEXEC) ? 1 : 0;
}

// A socket of the server's connected (or connecting, for a non-blocking fd) to 127.0.0.1:port in the family given;
// *inprogress set when the connect is still under way. -errno on failure.
static int proxy_socket(int domain, uint16_t port, bool nonblock, bool *inprogress) {
  int s = socket(domain, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return -errno;
  struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
  in6.sin6_addr.s6_addr[10] = in6.sin6_addr.s6_addr[11] = 0xff;
  uint32_t lo = htonl(INADDR_LOOPBACK);
  memcpy(in6.sin6_addr.s6_addr + 12, &lo, sizeof lo);
  int r = domain == AF_INET ? connect(s, (struct sockaddr *)&in, sizeof in) : connect(s, (struct sockaddr *)&in6, sizeof in6);
  *inprogress = false;
  if (r < 0 && errno == EINPROGRESS) {
    if (nonblock) {
      *inprogress = true;
    } else {
      // A blocking fd: its connect returns once done. Loopback to a listening proxy completes at once unless its
      // backlog is full; bounded so that one stuck connect cannot hold the supervisor for long.
      struct pollfd p = {.fd = s, .events = POLLOUT, .revents = 0};
      int err = 0;
      socklen_t el = sizeof err;
      if (poll(&p, 1, CONNECT_WAIT_MS) != 1 || getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err != 0) {
        close(s);
        return -(err ? err : ETIMEDOUT);
      }
    }
  } else if (r < 0) {
    int e = errno;
    close(s);
    return -e;
  }
  if (!nonblock && fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK) < 0) {
    int e = errno;
    close(s);
    return -e;
  }
  return s;
}

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif

// A pidfd for the calling thread `tid` (a notification names the thread, not its process): the thread itself where
// the kernel has PIDFD_THREAD (6.9), else its thread group's leader (the fd table is the same).
static int thread_pidfd(pid_t tid) {
  int fd = (int)syscall(SYS_pidfd_open, tid, PIDFD_THREAD);
  if (fd >= 0) return fd;
  // Before 6.9: EINVAL for the flag, or for a thread that is not its group's leader.
  fd = (int)syscall(SYS_pidfd_open, tid, 0);
  if (fd >= 0 || errno == ESRCH) return fd;
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
  if (read_proc_text(path, buf, sizeof buf) < 0) return -1;
  const char *t = strstr(buf, "\nTgid:");
  long tgid = t ? strtol(t + 6, NULL, 10) : 0;
  return tgid > 0 ? (int)syscall(SYS_pidfd_open, (pid_t)tgid, 0) : -1;
}

// Transparent TCP: the SOCKS5 CONNECT request (RFC 1928) for the destination the command asked for, read once from
// its memory (a racing thread can only make it ask for another destination, which the proxy admits or refuses); 0
// when it names no inet destination (a short length, another family, port 0).
static size_t socks_request(const unsigned char *addr, size_t len, unsigned char *req) {
  sa_family_t fam;
  if (len < sizeof fam) return 0;
  memcpy(&fam, addr, sizeof fam);
  size_t n = 0;
  req[n++] = 5;
  req[n++] = 1;  // CONNECT
  req[n++] = 0;
  if (fam == AF_INET && len >= sizeof(struct sockaddr_in)) {
    struct sockaddr_in in;
    memcpy(&in, addr, sizeof in);
    if (in.sin_port == 0) return 0;
    req[n++] = 1;
    memcpy(req + n, &in.sin_addr.s_addr, 4);
    n += 4;
    memcpy(req + n, &in.sin_port, 2);  // network order already
    return n + 2;
  }
  if (fam == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
    struct sockaddr_in6 in6;
    memcpy(&in6, addr, sizeof in6);
    if (in6.sin6_port == 0) return 0;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(in6.sin6_addr.s6_addr, mapped, sizeof mapped) == 0) {
      req[n++] = 1;  // an IPv4-mapped address is the IPv4 destination
      memcpy(req + n, in6.sin6_addr.s6_addr + 12, 4);
      n += 4;
    } else {
      req[n++] = 4;
      memcpy(req + n, in6.sin6_addr.s6_addr, 16);
      n += 16;
    }
    memcpy(req + n, &in6.sin6_port, 2);
    return n + 2;
  }
  return 0;
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

// The held connect is answered: with the server's socket (0, the SOCKS exchange done) or with err.
static void finish(struct pending *p, int err) {
  epoll_ctl(epfd, EPOLL_CTL_DEL, p->sock, NULL);
  if (err == 0 && !p->nonblock && fcntl(p->sock, F_SETFL, fcntl(p->sock, F_GETFL) & ~O_NONBLOCK) < 0) err = ECONNREFUSED;
  if (err == 0) {
    struct seccomp_notif_addfd add = {
        .id = p->id,
        .flags = SECCOMP_ADDFD_FLAG_SETFD,
        .srcfd = (uint32_t)p->sock,
        .newfd = (uint32_t)p->fd,
        .newfd_flags = p->cloexec ? O_CLOEXEC : 0,
    };
    if (ioctl(p->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add) < 0) err = EACCES;  // gone, or its fd table is full
  }
  answer(p->listener, p->id, err, err == 0);
  transparent_remove(p->slot);
  close(p->sock);
  close(p->listener);
  if (p->prev) p->prev->next = p->next;
  else pendings = p->next;
  if (p->next) p->next->prev = p->prev;
  npending--;
  free(p);
}

// One readiness of a held connect's socket: connected -> greeting sent; method reply -> CONNECT sent; reply -> done.
// Only the reply's own bytes are read: what the destination sends after it stays for the command.
static void advance(struct pending *p, uint32_t events) {
  if (p->state == 0) {
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(p->sock, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err != 0) return finish(p, ECONNREFUSED);
    if (!(events & EPOLLOUT)) return;
    static const unsigned char hello[3] = {5, 1, 0};  // no authentication: the listener is the command's own
    if (send(p->sock, hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof hello)
      return finish(p, ECONNREFUSED);
    p->state = 1;
    p->got = 0;
    p->need = 2;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = p};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, p->sock, &ev) < 0) return finish(p, ECONNREFUSED);
    return;
  }
  ssize_t r = recv(p->sock, p->buf + p->got, p->need - p->got, MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (r <= 0) return finish(p, ECONNREFUSED);
  p->got += (size_t)r;
  if (p->got < p->need) return;
  if (p->state == 1) {
    if (p->buf[0] != 5 || p->buf[1] != 0) return finish(p, ECONNREFUSED);
    if (send(p->sock, p->req, p->reqlen, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)p->reqlen)
      return finish(p, ECONNREFUSED);
    p->state = 2;
    p->got = 0;
    p->need = 5;  // VER REP RSV ATYP and the first byte of the address (a domain's length)
    return;
  }
  if (p->buf[0] != 5 || p->buf[1] != 0) return finish(p, ECONNREFUSED);  // refused by the proxy's admission
  if (p->need == 5) {
    // The rest after the 5 bytes read (the address's first byte is among them): IPv4 4 + 2, IPv6 16 + 2, a domain
    // its length byte + the name + 2.
    size_t rest = p->buf[3] == 1 ? 4 + 2 : p->buf[3] == 4 ? 16 + 2 : p->buf[3] == 3 ? (size_t)p->buf[4] + 3 : 0;
    if (rest == 0 || 5 + rest - 1 > sizeof p->buf) return finish(p, ECONNREFUSED);
    p->need = 5 + rest - 1;
    if (p->got < p->need) return;
  }
  finish(p, 0);
}

static void start_pending(struct watch *w, uint64_t id, int fd, int domain, bool cloexec, bool nonblock,
                          const unsigned char *req, size_t reqlen) {
  if (npending >= MAX_PENDING) return answer(w->fd, id, ECONNREFUSED, false);
  struct pending *p = calloc(1, sizeof *p);
  if (!p) return answer(w->fd, id, ECONNREFUSED, false);
  p->kind = K_PENDING;
  p->id = id;
  p->fd = fd;
  p->cloexec = cloexec;
  p->nonblock = nonblock;
  memcpy(p->req, req, reqlen);
  p->reqlen = reqlen;
  p->deadline = now_ms() + HANDSHAKE_MS;
  p->listener = fcntl(w->fd, F_DUPFD_CLOEXEC, 0);
  bool inprogress = false;
  p->sock = p->listener < 0 ? -EMFILE : proxy_socket(domain, w->socks, true, &inprogress);
  struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = p};
  if (p->sock < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, p->sock, &ev) < 0) {
    if (p->sock >= 0) close(p->sock);
    if (p->listener >= 0) close(p->listener);
    free(p);
    return answer(w->fd, id, ECONNREFUSED, false);
  }
  // Its local port, known once connect() has started: in the table before the greeting that lets the proxy ask.
  struct sockaddr_storage local;
  socklen_t ll = sizeof local;
  p->slot = -1;
  if (getsockname(p->sock, (struct sockaddr *)&local, &ll) == 0)
    p->slot = transparent_add(ntohs(local.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&local)->sin6_port
                                                                : ((struct sockaddr_in *)&local)->sin_port),
                              w->socks);
  p->next = pendings;
  if (pendings) pendings->prev = p;
  pendings = p;
  npending++;
}

// Held connects past their deadline are refused (ETIMEDOUT, as a connect that never completed); the epoll wait's
// timeout until the next deadline (-1: none).
static int expire(void) {
  if (!pendings) return -1;
  long long t = now_ms(), next = -1;
  for (struct pending *p = pendings, *n; p; p = n) {
    n = p->next;
    if (p->deadline <= t) finish(p, ETIMEDOUT);
    else if (next < 0 || p->deadline < next) next = p->deadline;
  }
  return next < 0 ? -1 : (int)(next - t);
}

static void handle(struct watch *w, struct seccomp_notif *req) {
  const uint64_t id = req->id;
  const pid_t pid = (pid_t)req->pid;
  if (req->data.nr != SYS_connect) return answer(w->fd, id, EACCES, false);
  const int fd = (int)req->data.args[0];
  const uint64_t len = req->data.args[2] & 0xffffffffu;  // socklen_t
  // As the kernel answers a length beyond a sockaddr_storage (or a negative int).
  if (len > sizeof(struct sockaddr_storage)) return answer(w->fd, id, EINVAL, false);
  unsigned char addr[sizeof(struct sockaddr_in6)];
  // Only the bytes an accepted address needs are read; a shorter length cannot hold one.
  size_t want = len < sizeof addr ? (size_t)len : sizeof addr;
  struct iovec local = {.iov_base = addr, .iov_len = want};
  struct iovec remote = {.iov_base = (void *)(uintptr_t)req->data.args[1], .iov_len = want};
  ssize_t got = want > 0 ? process_vm_readv(pid, &local, 1, &remote, 1, 0) : 0;
  if (got < 0 || ioctl(w->fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &req->id) < 0) return refuse(w, id);
  if (loopback_on(addr, (size_t)got, w->pass, w->npass)) return refuse(w, id);  // the in-namespace forwarder
  uint16_t port = proxy_port(w, addr, (size_t)got);
  unsigned char socks_req[32];
  size_t reqlen = port == 0 && w->socks ? socks_request(addr, (size_t)got, socks_req) : 0;
  if (port == 0 && reqlen == 0) return refuse(w, id);
  // The command's fd: a TCP socket of its own, not connected yet.
  int pidfd = thread_pidfd(pid);
  if (pidfd < 0) return refuse(w, id);
  if (ioctl(w->fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &req->id) < 0) {
    close(pidfd);
    return refuse(w, id);
  }
  int theirs = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
  close(pidfd);
  if (theirs < 0) return answer(w->fd, id, errno == EBADF ? EBADF : EACCES, false);
  int domain = -1, type = -1, proto = -1;
  socklen_t ol = sizeof(int);
  bool tcp = getsockopt(theirs, SOL_SOCKET, SO_DOMAIN, &domain, &ol) == 0 && (ol = sizeof(int)) &&
             getsockopt(theirs, SOL_SOCKET, SO_TYPE, &type, &ol) == 0 && (ol = sizeof(int)) &&
             getsockopt(theirs, SOL_SOCKET, SO_PROTOCOL, &proto, &ol) == 0 &&
             (domain == AF_INET || domain == AF_INET6) && type == SOCK_STREAM && proto == IPPROTO_TCP;
  // Only a fresh socket is connected: one connecting already (a non-blocking connect asked again) gets EALREADY, one
  // connected or listening EISCONN, as connect(2) answers them.
  struct tcp_info ti;
  socklen_t tl = sizeof ti;
  memset(&ti, 0, sizeof ti);
  int state = tcp && getsockopt(theirs, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 ? ti.tcpi_state : -1;
  int fl = fcntl(theirs, F_GETFL);
  close(theirs);
  if (!tcp || fl < 0 || state < 0) return refuse(w, id);
  if (state == TCP_SYN_SENT) return answer(w->fd, id, EALREADY, false);
  if (state != TCP_CLOSE) return answer(w->fd, id, EISCONN, false);
  // An AF_INET socket cannot connect to an AF_INET6 address (and back): as the kernel would answer.
  sa_family_t fam;
  memcpy(&fam, addr, sizeof fam);
  if ((int)fam != domain) return answer(w->fd, id, domain == AF_INET ? EAFNOSUPPORT : EINVAL, false);
  int cloexec = fd_cloexec(pid, fd);
  if (cloexec < 0) return refuse(w, id);
  if (port == 0) return start_pending(w, id, fd, domain, cloexec != 0, (fl & O_NONBLOCK) != 0, socks_req, reqlen);
  bool inprogress = false;
  int ours = proxy_socket(domain, port, (fl & O_NONBLOCK) != 0, &inprogress);
  if (ours < 0) return answer(w->fd, id, -ours == ETIMEDOUT ? ETIMEDOUT : ECONNREFUSED, false);
  struct seccomp_notif_addfd add = {
      .id = id,
      .flags = SECCOMP_ADDFD_FLAG_SETFD,
      .srcfd = (uint32_t)ours,
      .newfd = (uint32_t)fd,
      .newfd_flags = cloexec ? O_CLOEXEC : 0,
  };
  int placed = ioctl(w->fd, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
  close(ours);
  if (placed < 0) return refuse(w, id);  // the call is gone (ENOENT) or the fd table is full
  answer(w->fd, id, inprogress ? EINPROGRESS : 0, true);
}

static void *supervise(void *unused) {
  (void)unused;
  struct seccomp_notif *req = calloc(1, sizes.seccomp_notif > sizeof *req ? sizes.seccomp_notif : sizeof *req);
  if (!req) return NULL;
  struct epoll_event evs[32];
  int timeout = -1;
  for (;;) {
    int n = epoll_wait(epfd, evs, 32, timeout);
    for (int k = 0; k < n; k++) {
      if (*(enum kind *)evs[k].data.ptr == K_PENDING) {
        advance(evs[k].data.ptr, evs[k].events);
        continue;
      }
      struct watch *w = evs[k].data.ptr;
      if (!w->listener) {
        receive_listener(w);
        continue;
      }
      if (evs[k].events & EPOLLIN) {
        memset(req, 0, sizes.seccomp_notif > sizeof *req ? sizes.seccomp_notif : sizeof *req);
        if (ioctl(w->fd, SECCOMP_IOCTL_NOTIF_RECV, req) == 0) {
          handle(w, req);
          continue;  // more may be pending; a hang-up is seen on the next round
        }
      }
      if (evs[k].events & (EPOLLHUP | EPOLLERR)) drop(w);
    }
    timeout = expire();
  }
  return NULL;
}

static const char *probe_text;
static bool probed;

static const char *probe(void) {
  struct utsname u;
  int major = 0, minor = 0;
  if (uname(&u) == 0) sscanf(u.release, "%d.%d", &major, &minor);
  if (major < 5 || (major == 5 && minor < 9))
    return "this kernel has no SECCOMP_IOCTL_NOTIF_ADDFD (Linux 5.9 or later is needed)";
  uint32_t action = SECCOMP_RET_USER_NOTIF;
  if (syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) < 0)
    return "this kernel has no seccomp user notification (SECCOMP_RET_USER_NOTIF), or seccomp is blocked here";
  if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) < 0)
    return "seccomp cannot report its notification sizes (SECCOMP_GET_NOTIF_SIZES)";
  // Creating a listener may still be refused (a container's own filter): try it in a child of ours.
  pid_t child = fork();
  if (child < 0) return "cannot fork to try a seccomp listener";
  if (child == 0) {
    struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {.len = 1, .filter = &allow};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) _exit(2);
    _exit(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog) < 0 ? 1 : 0);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "a seccomp filter with SECCOMP_FILTER_FLAG_NEW_LISTENER is refused here";
  return NULL;
}

static const char *probe_once(void) {
  pthread_mutex_lock(&start_lock);
  if (!probed) {
    probe_text = probe();
    probed = true;
  }
  pthread_mutex_unlock(&start_lock);
  return probe_text;
}

static napi_value js_probe(napi_env env, napi_callback_info info) {
  (void)info;
  const char *why = probe_once();
  napi_value out;
  if (why) napi_create_string_utf8(env, why, NAPI_AUTO_LENGTH, &out);
  else napi_get_null(env, &out);
  return out;
}

static napi_value js_pair(napi_env env, napi_callback_info info) {
  (void)info;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return corral_throw_errno(env, errno, "netNotifyPair");
  napi_value out, a, b;
  napi_create_array_with_length(env, 2, &out);
  napi_create_int32(env, sv[0], &a);
  napi_create_int32(env, sv[1], &b);
  napi_set_element(env, out, 0, a);
  napi_set_element(env, out, 1, b);
  return out;
}

static napi_value js_watch(napi_env env, napi_callback_info info) {
  int32_t fd = 0;
  napi_value list;
  uint32_t n = 0;
  if (!corral_pid_and_list(env, info, &fd, &list, &n, MAX_PORTS,
                           "netNotifyWatch(serverFd, ports) expects a fd and 1 to 8 ports"))
    return NULL;
  struct watch *w = calloc(1, sizeof *w);
  if (!w) return corral_throw_errno(env, ENOMEM, "netNotifyWatch");
  for (uint32_t k = 0; k < n; k++) {
    napi_value v;
    double port = 0;
    if (napi_get_element(env, list, k, &v) != napi_ok || napi_get_value_double(env, v, &port) != napi_ok ||
        !(port >= 1 && port <= 65535) || port != (double)(int32_t)port) {
      free(w);
      napi_throw_type_error(env, NULL, "netNotifyWatch: each port must be an integer 1..65535");
      return NULL;
    }
    w->ports[w->nports++] = (uint16_t)port;
  }
  // Transparent TCP (optional third argument): the command's SOCKS5 listener port; undefined/absent: off. The fourth
  // (optional, bwrap): the in-namespace forwarder ports (0..8); given, what is not the supervisor's goes on to the
  // kernel instead of EACCES.
  size_t argc = 4;
  napi_value args[4];
  napi_valuetype t3 = napi_undefined, t4 = napi_undefined;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) == napi_ok && argc >= 3) napi_typeof(env, args[2], &t3);
  if (argc >= 4) napi_typeof(env, args[3], &t4);
  if (t4 != napi_undefined) {
    bool is_array = false;
    uint32_t np = 0;
    if (napi_is_array(env, args[3], &is_array) != napi_ok || !is_array ||
        napi_get_array_length(env, args[3], &np) != napi_ok || np > MAX_PORTS) {
      free(w);
      napi_throw_type_error(env, NULL, "netNotifyWatch: passPorts must be an array of 0 to 8 ports");
      return NULL;
    }
    for (uint32_t k = 0; k < np; k++) {
      napi_value v;
      double port = 0;
      if (napi_get_element(env, args[3], k, &v) != napi_ok || napi_get_value_double(env, v, &port) != napi_ok ||
          !(port >= 1 && port <= 65535) || port != (double)(int32_t)port) {
        free(w);
        napi_throw_type_error(env, NULL, "netNotifyWatch: each of passPorts must be an integer 1..65535");
        return NULL;
      }
      w->pass[w->npass++] = (uint16_t)port;
    }
    w->pass_other = true;
  }
  if (t3 != napi_undefined) {
    double socks = 0;
    if (napi_get_value_double(env, args[2], &socks) != napi_ok || !(socks >= 1 && socks <= 65535) ||
        socks != (double)(int32_t)socks) {
      free(w);
      napi_throw_type_error(env, NULL, "netNotifyWatch: socksPort must be an integer 1..65535");
      return NULL;
    }
    w->socks = (uint16_t)socks;
  }
  const char *why = probe_once();
  if (why) {
    free(w);
    return corral_throw_errno(env, ENOSYS, why);
  }
  pthread_mutex_lock(&start_lock);
  int err = 0;
  if (epfd < 0) {
    int e = epoll_create1(EPOLL_CLOEXEC);
    pthread_t t;
    pthread_attr_t attr;
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_sigmask(SIG_SETMASK, &all, &old);  // the thread takes no signal of the process
    if (e < 0) err = errno;
    else {
      epfd = e;
      err = pthread_create(&t, &attr, supervise, NULL);
      if (err) {
        close(e);
        epfd = -1;
      }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
  }
  pthread_mutex_unlock(&start_lock);
  if (err) {
    free(w);
    return corral_throw_errno(env, err, "netNotifyWatch: cannot start the supervisor");
  }
  w->fd = fd;
  w->listener = false;
  w->kind = K_CHANNEL;
  atomic_fetch_add(&watched, 1);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = w};
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
    int e = errno;
    atomic_fetch_sub(&watched, 1);
    free(w);
    return corral_throw_errno(env, e, "netNotifyWatch");
  }
  return NULL;
}

static napi_value js_counts(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out, v;
  napi_create_array_with_length(env, 3, &out);
  const unsigned long long c[3] = {atomic_load(&proxied), atomic_load(&refused), atomic_load(&watched)};
  for (uint32_t k = 0; k < 3; k++) {
    napi_create_double(env, (double)c[k], &v);
    napi_set_element(env, out, k, v);
  }
  return out;
}

// netNotifyTransparent(localPort, socksPort) -> bool: whether a connection from 127.0.0.1:localPort to the SOCKS5
// listener on socksPort is a held connect's (transparent TCP) exchange.
static napi_value js_transparent(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  double a = 0, b = 0;
  bool found = false;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) == napi_ok && argc == 2 &&
      napi_get_value_double(env, args[0], &a) == napi_ok && napi_get_value_double(env, args[1], &b) == napi_ok &&
      a >= 1 && a <= 65535 && b >= 1 && b <= 65535 && a == (double)(int32_t)a && b == (double)(int32_t)b) {
    pthread_mutex_lock(&transparent_lock);
    for (int k = 0; k < MAX_PENDING && !found; k++)
      found = transparent[k].local == (uint16_t)a && transparent[k].socks == (uint16_t)b;
    pthread_mutex_unlock(&transparent_lock);
  }
  napi_value out;
  napi_get_boolean(env, found, &out);
  return out;
}

napi_status corral_netnotify_init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"netNotifyProbe", NULL, js_probe, NULL, NULL, NULL, napi_default, NULL},
      {"netNotifyPair", NULL, js_pair, NULL, NULL, NULL, napi_default, NULL},
      {"netNotifyWatch", NULL, js_watch, NULL, NULL, NULL, napi_default, NULL},
      {"netNotifyCounts", NULL, js_counts, NULL, NULL, NULL, napi_default, NULL},
      {"netNotifyTransparent", NULL, js_transparent, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
