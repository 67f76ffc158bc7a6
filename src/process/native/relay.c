// Byte relay between two connected stream sockets with splice(2) (Linux; part of corral_spawn.node), for the managed
// proxy's tunnels (CONNECT, SOCKS5 CONNECT).
//
// A tunnel built from two net.Sockets piped into each other costs the proxy two copies of every byte through user
// space, a JS callback per 64 KiB read and the stream machinery around each write: ~2 ms of CPU per MiB on the
// 2-core dev machine, which made the proxy the bottleneck of a tunnel (~550 MiB/s where the same client and origin
// reach ~1.7 GiB/s without a proxy). Here each direction is socket -> pipe -> socket with splice: the kernel moves
// page references, no byte enters our memory and no JS runs until the tunnel ends.
//
// The relay works on its own duplicates of the two fds (the caller's sockets stay open and must neither read nor
// write while the relay runs). Half-close is forwarded: when one side's input ends and its pipe is drained, the other
// side's output is shut down (shutdown(SHUT_WR)). The relay ends when both directions have ended that way, or at the
// first error; it then closes its duplicates and calls back once. What the caller does with its own fds afterwards
// (close them) finishes the connections.
//
// JS interface (see src/network/relay.ts):
//   relayOpen(fdA, fdB, onDone(err: number, aToB: number, bToA: number)) -> handle
//        err: 0 when both directions ended with EOF, else an errno value (ECONNRESET, EPIPE, ...); byte counts are
//        what was written to the other side
//   relayClose(handle)   stops now (the caller is tearing the tunnel down); onDone is not called

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
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
    if (r->dir[i].pipe_r >= 0) close(r->dir[i].pipe_r);
    if (r->dir[i].pipe_w >= 0) close(r->dir[i].pipe_w);
    r->dir[i].pipe_r = r->dir[i].pipe_w = -1;
  }
  return cb;
}

static void finish(struct relay *r, int err) {
  double a_to_b = r->dir[0].bytes, b_to_a = r->dir[1].bytes;
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
    if (d->in_pipe > 0) {
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
    if (d->eof && d->in_pipe == 0 && !d->done) {
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

static napi_value js_relay_open(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value args[3];
  struct relay_state *st = state_of(env, info, &argc, args);
  int32_t fa = -1, fb = -1;
  napi_valuetype t = napi_undefined;
  if (!st || argc < 3 || napi_get_value_int32(env, args[0], &fa) != napi_ok || fa < 0 ||
      napi_get_value_int32(env, args[1], &fb) != napi_ok || fb < 0 || napi_typeof(env, args[2], &t) != napi_ok ||
      t != napi_function) {
    napi_throw_type_error(env, NULL, "relayOpen(fdA: non-negative integer, fdB: non-negative integer, onDone: function)");
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
  // The duplicates share the sockets' open file descriptions, O_NONBLOCK included (libuv set it).
  if ((r->fd[0] = fcntl(fa, F_DUPFD_CLOEXEC, 3)) < 0 || (r->fd[1] = fcntl(fb, F_DUPFD_CLOEXEC, 3)) < 0) e = errno;
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
  if (e == 0 && (napi_create_reference(env, args[2], 1, &r->cb) != napi_ok ||
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
