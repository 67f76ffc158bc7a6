// Byte relay between two connected stream sockets with splice(2) (Linux; part of corral_spawn.node), for the managed
// proxy's tunnels (CONNECT, SOCKS5 CONNECT).
//
// A tunnel built from two net.Sockets piped into each other costs the proxy two copies of every byte through user
// space, a JS callback per 64 KiB read and the stream machinery around each write: ~2 ms of CPU per MiB on the
// 2-core dev machine, which made the proxy the bottleneck of a tunnel (~550 MiB/s where the same client and origin
// reach ~1.7 GiB/s without a proxy). Here each direction is socket -> pipe -> socket with splice: the kernel moves
// page references, no byte enters our memory and no JS runs until the tunnel ends.
//
// Node does not say which fd a net.Socket holds (only its private handle does). The caller names each socket by what
// Node does say, its two addresses, plus a mark it has just set through Node's public setKeepAlive (SO_KEEPALIVE on,
// TCP_KEEPIDLE = the mark); the relay looks through this process's fds for the one TCP socket that carries both
// (find_sockets). The mark is what makes the match safe: this process also holds sockets inside sandboxes' network
// namespaces (netns.c), where another connection can have the very same addresses, and nothing but this process can
// set a socket option on its fds. No match, or more than one, refuses the relay (the caller pipes Node streams).
//
// The relay works on its own duplicates of the two fds, clears the mark (SO_KEEPALIVE off) and the caller then closes
// its sockets: from then on the connections live as long as the relay. Half-close is forwarded: when one side's input
// ends and its pipe is drained, the other side's output is shut down (shutdown(SHUT_WR)). The relay ends when both
// directions have ended that way (the duplicates are closed: a FIN), or at the first error (both are reset: an error
// on one side is never passed on as a clean end), and calls back once.
//
// JS interface (see src/platform/relay.ts):
//   relayOpen(a: SocketId, b: SocketId, headAToB: Buffer | null, headBToA: Buffer | null,
//             onDone(err: number, aToB: number, bToA: number)) -> handle
//        SocketId = [mark, localAddress, localPort, remoteAddress, remotePort] (Node's strings for the addresses);
//        the heads are bytes that go out before anything the relay reads (what Node had read and not delivered);
//        err: 0 when both directions ended with EOF, else an errno value (ECONNRESET, EPIPE, ...); byte counts are
//        what was written to the other side. Throws ENOENT (no such socket) or ENOTUNIQ (more than one).
//   relayClose(handle)   stops now (the caller is tearing the tunnel down); onDone is not called

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "reactor.h"
#include "relay.h"

// The pipe size we ask for: 256 KiB moved a 512 MiB tunnel ~18 % faster than the default 64 KiB (fewer splice
// calls). Pipes bigger than the default count against the user's pipe-user-pages-soft (64 MiB by default, for users
// without CAP_SYS_RESOURCE), and past it every new pipe of that user, children's output pipes included, gets one page:
// only the first RELAY_BIG_PIPES relays get big pipes (16 MiB at most), the rest keep the default size. A failed
// resize is fine too: the relay works with whatever size the pipe has.
#define RELAY_PIPE_SIZE (256 * 1024)
#define RELAY_BIG_PIPES 32

struct relay_state {
  napi_env env;
  struct reactor *reactor;
  struct relay *head;
  int nbig;  // live relays with big pipes
};

struct relay_end {
  struct reactor_item item;  // first: the reactor hands us this pointer
  struct relay *relay;
};

struct relay_dir {
  char *head;  // sent before what is in the pipe (malloc'd copy, NULL once sent)
  size_t head_len, head_off;
  int pipe_r, pipe_w;
  size_t in_pipe;  // bytes spliced in and not yet out
  size_t cap;      // the pipe's size
  bool eof;        // the source's input has ended
  bool done;       // ... and the destination's output is shut down
  double bytes;    // written to the destination
};

struct relay {
  struct relay_end end[2];  // end[i] watches fd[i]
  struct relay_state *st;   // NULL after environment teardown
  int fd[2];                // our duplicates, -1 once closed
  struct relay_dir dir[2];  // dir[0]: fd[0] -> fd[1], dir[1]: fd[1] -> fd[0]
  int refs;                 // registered ends (until retired) + the JS external (until finalized)
  bool stopped;
  bool big;  // counted in st->nbig
  napi_ref cb;
  struct relay *prev, *next;
};

static void release(struct relay *r) {
  if (--r->refs == 0) free(r);
}

static void on_retired(struct reactor_item *it) { release(((struct relay_end *)it)->relay); }

static void unlink_relay(struct relay *r) {
  if (!r->st) return;
  if (r->prev) r->prev->next = r->next;
  else r->st->head = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
}

// Closes everything the relay holds (ends retired before their fds close: see reactor.h). Returns the callback
// reference for the caller to use or delete.
static napi_ref stop(struct relay *r) {
  napi_ref cb = r->cb;
  r->cb = NULL;
  if (r->stopped) return cb;
  r->stopped = true;
  if (r->big && r->st) r->st->nbig--;
  r->big = false;
  unlink_relay(r);
  for (int i = 0; i < 2; i++) {
    if (r->fd[i] >= 0) {
      if (r->end[i].item.r) reactor_retire(&r->end[i].item);
      close(r->fd[i]);
      r->fd[i] = -1;
    }
    free(r->dir[i].head);
    r->dir[i].head = NULL;
    if (r->dir[i].pipe_r >= 0) close(r->dir[i].pipe_r);
    if (r->dir[i].pipe_w >= 0) close(r->dir[i].pipe_w);
    r->dir[i].pipe_r = r->dir[i].pipe_w = -1;
  }
  return cb;
}

static void finish(struct relay *r, int err) {
  double a_to_b = r->dir[0].bytes, b_to_a = r->dir[1].bytes;
  if (err != 0) {
    // An error on one side resets both: ending the other with a FIN would pass a cut-off stream for a complete one.
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    for (int i = 0; i < 2; i++)
      if (r->fd[i] >= 0) (void)setsockopt(r->fd[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  napi_ref cb = stop(r);
  if (!cb || !r->st) return;
  napi_env env = r->st->env;
  napi_value fn, argv[3];
  if (napi_get_reference_value(env, cb, &fn) == napi_ok && fn) {
    napi_create_int32(env, err, &argv[0]);
    napi_create_double(env, a_to_b, &argv[1]);
    napi_create_double(env, b_to_a, &argv[2]);
    reactor_call(r->st->reactor, fn, 3, argv);
  }
  napi_delete_reference(env, cb);
}

// Moves what it can in one direction. Returns 0, or an errno value that ends the relay.
static int pump(struct relay *r, int i) {
  struct relay_dir *d = &r->dir[i];
  int src = r->fd[i], dst = r->fd[1 - i];
  for (;;) {
    bool progress = false;
    if (d->head) {
      ssize_t n = send(dst, d->head + d->head_off, d->head_len - d->head_off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        d->head_off += (size_t)n;
        d->bytes += (double)n;
        progress = true;
        if (d->head_off == d->head_len) {
          free(d->head);
          d->head = NULL;
        }
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        return errno;
      }
    }
    if (!d->head && d->in_pipe > 0) {
      ssize_t n = splice(d->pipe_r, NULL, dst, NULL, d->in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        d->in_pipe -= (size_t)n;
        d->bytes += (double)n;
        progress = true;
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        return errno;
      }
    }
    if (!d->eof && d->in_pipe < d->cap) {
      ssize_t n = splice(src, NULL, d->pipe_w, NULL, d->cap - d->in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        d->in_pipe += (size_t)n;
        progress = true;
      } else if (n == 0) {
        d->eof = true;
        progress = true;
      } else if (errno != EAGAIN && errno != EINTR) {
        return errno;
      }
    }
    if (d->eof && !d->head && d->in_pipe == 0 && !d->done) {
      d->done = true;
      if (shutdown(dst, SHUT_WR) < 0 && errno != ENOTCONN) return errno;
    }
    if (!progress) return 0;
  }
}

static void on_event(struct reactor_item *it, uint32_t events) {
  (void)events;  // edge-triggered on both ends: every event pumps both directions until they would block
  struct relay *r = ((struct relay_end *)it)->relay;
  if (r->stopped) return;
  for (int i = 0; i < 2; i++) {
    if (r->dir[i].done) continue;
    int err = pump(r, i);
    if (err != 0) {
      finish(r, err);
      return;
    }
  }
  if (r->dir[0].done && r->dir[1].done) finish(r, 0);
}

static void finalize_external(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  release(data);
}

static struct relay_state *state_of(napi_env env, napi_callback_info info, size_t *argc, napi_value *args) {
  void *data = NULL;
  if (napi_get_cb_info(env, info, argc, args, NULL, &data) != napi_ok) return NULL;
  return data;
}

// One socket as the caller names it (see the top of this file).
struct socket_id {
  int mark;
  int family;  // of the local address; the remote one must have the same
  unsigned char local[16], remote[16];
  int local_port, remote_port;
};

// Node's text form of an address ("127.0.0.1", "::ffff:127.0.0.1", "fe80::1%eth0") to bytes; the family, or -1.
static int parse_addr(const char *text, unsigned char out[16]) {
  char buf[INET6_ADDRSTRLEN + 1];
  size_t n = strcspn(text, "%");
  if (n >= sizeof buf) return -1;
  memcpy(buf, text, n);
  buf[n] = 0;
  if (inet_pton(AF_INET, buf, out) == 1) return AF_INET;
  if (inet_pton(AF_INET6, buf, out) == 1) return AF_INET6;
  return -1;
}

static bool read_socket_id(napi_env env, napi_value v, struct socket_id *id) {
  bool is_array = false;
  uint32_t len = 0;
  if (napi_is_array(env, v, &is_array) != napi_ok || !is_array || napi_get_array_length(env, v, &len) != napi_ok ||
      len != 5)
    return false;
  napi_value e[5];
  for (uint32_t i = 0; i < 5; i++)
    if (napi_get_element(env, v, i, &e[i]) != napi_ok) return false;
  char local[INET6_ADDRSTRLEN + 64], remote[INET6_ADDRSTRLEN + 64];
  size_t got = 0;
  if (napi_get_value_int32(env, e[0], &id->mark) != napi_ok || id->mark <= 0 ||
      napi_get_value_string_utf8(env, e[1], local, sizeof local, &got) != napi_ok || got >= sizeof local - 1 ||
      napi_get_value_int32(env, e[2], &id->local_port) != napi_ok ||
      napi_get_value_string_utf8(env, e[3], remote, sizeof remote, &got) != napi_ok || got >= sizeof remote - 1 ||
      napi_get_value_int32(env, e[4], &id->remote_port) != napi_ok)
    return false;
  id->family = parse_addr(local, id->local);
  return id->family > 0 && parse_addr(remote, id->remote) == id->family && id->local_port > 0 &&
         id->local_port < 65536 && id->remote_port > 0 && id->remote_port < 65536;
}

static bool addr_is(const struct sockaddr_storage *sa, int family, const unsigned char *addr, int port) {
  if (sa->ss_family != family) return false;
  if (family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    return ntohs(a->sin_port) == port && memcmp(&a->sin_addr, addr, 4) == 0;
  }
  const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
  return ntohs(a->sin6_port) == port && memcmp(&a->sin6_addr, addr, 16) == 0;
}

// Whether fd (a socket with SO_KEEPALIVE on) is the one id names.
static bool socket_is(int fd, const struct socket_id *id) {
  int v = 0;
  socklen_t len = sizeof v;
  if (getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len) < 0 || v != id->mark) return false;
  len = sizeof v;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) < 0 || v != SOCK_STREAM) return false;
  struct sockaddr_storage sa;
  len = sizeof sa;
  if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || !addr_is(&sa, id->family, id->local, id->local_port))
    return false;
  len = sizeof sa;
  return getpeername(fd, (struct sockaddr *)&sa, &len) == 0 && addr_is(&sa, id->family, id->remote, id->remote_port);
}

// How many fd slots this process's table has (FDSize in /proc/self/status): every open fd is below it. Without /proc,
// the soft RLIMIT_NOFILE, at most 1 << 16.
static int fd_table_size(void) {
  int size = 0;
  FILE *f = fopen("/proc/self/status", "re");
  if (f) {
    char line[128];
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "FDSize:", 7) == 0) size = atoi(line + 7);
    fclose(f);
  }
  if (size > 0) return size;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) size = (int)rl.rlim_cur;
  return size > 0 && size < (1 << 16) ? size : 1 << 16;
}

// The fds of this process that are the sockets ids[0] and ids[1] name, in one pass over the fd table (a getsockopt
// per slot, ~0.15 µs: 1.2 ms for 8192 slots; reading /proc/self/fd instead cost ~1.3 µs per open fd). fds[i] >= 0, or
// -ENOENT (no such socket) or -ENOTUNIQ (more than one).
static void find_sockets(const struct socket_id ids[2], int fds[2]) {
  fds[0] = fds[1] = -ENOENT;
  int size = fd_table_size();
  for (int fd = 0; fd < size; fd++) {
    int on = 0;
    socklen_t len = sizeof on;
    if (getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, &len) < 0 || on != 1) continue;  // EBADF, ENOTSOCK, not marked
    for (int i = 0; i < 2; i++) {
      if (fds[i] == -ENOTUNIQ || !socket_is(fd, &ids[i])) continue;
      fds[i] = fds[i] >= 0 ? -ENOTUNIQ : fd;
    }
  }
}

static napi_value js_relay_open(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value args[5];
  struct relay_state *st = state_of(env, info, &argc, args);
  struct socket_id ida, idb;
  napi_valuetype t = napi_undefined;
  void *head[2] = {NULL, NULL};
  size_t head_len[2] = {0, 0};
  bool heads_ok = argc >= 5;
  for (int i = 0; heads_ok && i < 2; i++) {
    napi_valuetype ht = napi_undefined;
    bool is_buffer = false;
    if (napi_typeof(env, args[2 + i], &ht) != napi_ok) heads_ok = false;
    else if (ht == napi_null || ht == napi_undefined) continue;
    else if (napi_is_buffer(env, args[2 + i], &is_buffer) != napi_ok || !is_buffer ||
             napi_get_buffer_info(env, args[2 + i], &head[i], &head_len[i]) != napi_ok)
      heads_ok = false;
  }
  if (!st || !heads_ok || !read_socket_id(env, args[0], &ida) || !read_socket_id(env, args[1], &idb) ||
      napi_typeof(env, args[4], &t) != napi_ok || t != napi_function) {
    napi_throw_type_error(env, NULL,
                          "relayOpen(a: [mark, localAddress, localPort, remoteAddress, remotePort], b: the same, "
                          "headAToB: Buffer | null, headBToA: Buffer | null, onDone: function)");
    return NULL;
  }
  struct socket_id ids[2] = {ida, idb};
  int found[2];
  find_sockets(ids, found);
  int fa = found[0], fb = found[1];
  if (fa < 0 || fb < 0 || fa == fb) {
    corral_throw_errno(env, fa < 0 ? -fa : fb < 0 ? -fb : EINVAL, "relayOpen");
    return NULL;
  }
  struct relay *r = calloc(1, sizeof *r);
  if (!r) {
    corral_throw_errno(env, ENOMEM, "relayOpen");
    return NULL;
  }
  r->fd[0] = r->fd[1] = -1;
  for (int i = 0; i < 2; i++) r->dir[i].pipe_r = r->dir[i].pipe_w = -1;
  r->stopped = false;
  r->refs = 1;  // ours until the external takes it over
  int e = 0;
  for (int i = 0; i < 2; i++) {
    if (head_len[i] == 0) continue;
    if (!(r->dir[i].head = malloc(head_len[i]))) e = ENOMEM;
    else memcpy(r->dir[i].head, head[i], head_len[i]);
    r->dir[i].head_len = head_len[i];
  }
  // The duplicates share the sockets' open file descriptions, O_NONBLOCK included (libuv set it).
  if (e == 0 && ((r->fd[0] = fcntl(fa, F_DUPFD_CLOEXEC, 3)) < 0 || (r->fd[1] = fcntl(fb, F_DUPFD_CLOEXEC, 3)) < 0)) e = errno;
  // The mark has done its work (the option belongs to the socket, so the caller's fds lose it too).
  int off = 0;
  for (int i = 0; e == 0 && i < 2; i++) (void)setsockopt(r->fd[i], SOL_SOCKET, SO_KEEPALIVE, &off, sizeof off);
  for (int i = 0; e == 0 && i < 2; i++) {
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
      e = errno;
      break;
    }
    r->dir[i].pipe_r = p[0];
    r->dir[i].pipe_w = p[1];
    int size = st->nbig < RELAY_BIG_PIPES ? fcntl(p[1], F_SETPIPE_SZ, RELAY_PIPE_SIZE) : -1;
    if (size < 0) size = fcntl(p[1], F_GETPIPE_SZ);
    else r->big = true;
    r->dir[i].cap = size > 0 ? (size_t)size : 65536;
  }
  napi_value ext;
  if (e == 0 && (napi_create_reference(env, args[4], 1, &r->cb) != napi_ok ||
                 napi_create_external(env, r, finalize_external, NULL, &ext) != napi_ok)) {
    e = ENOMEM;
  }
  if (e != 0) {
    if (r->cb) napi_delete_reference(env, r->cb);
    r->cb = NULL;
    r->stopped = false;
    (void)stop(r);  // nothing is registered yet: closes the fds and pipes
    free(r);
    corral_throw_errno(env, e, "relayOpen");
    return NULL;
  }
  // From here on the external owns the first reference.
  r->st = st;
  if (r->big) st->nbig++;
  for (int i = 0; i < 2; i++) {
    r->end[i].relay = r;
    r->end[i].item.on_event = on_event;
    r->end[i].item.on_retired = on_retired;
    e = reactor_add_events(st->reactor, &r->end[i].item, r->fd[i], EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
    if (e != 0) break;
    r->refs++;
  }
  r->next = st->head;
  if (st->head) st->head->prev = r;
  st->head = r;
  if (e != 0) {
    napi_ref cb = stop(r);
    if (cb) napi_delete_reference(env, cb);
    corral_throw_errno(env, e, "relayOpen");
    return NULL;
  }
  // No pump here: EPOLL_CTL_ADD reports what is already readable or writable, so the first pump runs on the next loop
  // turn, inside the reactor's callback scope (onDone is never called from within relayOpen).
  return ext;
}

static napi_value js_relay_close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value arg;
  if (!state_of(env, info, &argc, &arg) || argc < 1) return NULL;
  void *p = NULL;
  if (napi_get_value_external(env, arg, &p) != napi_ok || !p) {
    napi_throw_type_error(env, NULL, "expected a relay handle");
    return NULL;
  }
  napi_ref cb = stop(p);
  if (cb) napi_delete_reference(env, cb);
  return NULL;
}

// Environment teardown (before the reactor's): stop every relay; the references go with the environment.
static void cleanup_relays(void *arg) {
  struct relay_state *st = arg;
  while (st->head) {
    struct relay *r = st->head;
    r->cb = NULL;
    (void)stop(r);  // unlinks r from st->head
    r->st = NULL;
  }
  free(st);
}

napi_status corral_relay_init(napi_env env, napi_value exports, struct reactor *reactor) {
  struct relay_state *st = calloc(1, sizeof *st);
  if (!st) return napi_generic_failure;
  st->env = env;
  st->reactor = reactor;
  napi_add_env_cleanup_hook(env, cleanup_relays, st);
  napi_property_descriptor props[] = {
      {"relayOpen", NULL, js_relay_open, NULL, NULL, NULL, napi_default, st},
      {"relayClose", NULL, js_relay_close, NULL, NULL, NULL, napi_default, st},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
