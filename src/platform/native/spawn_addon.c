// The native spawner's N-API glue: exit watching (its children's pidfds, watchExit for others'), the exports that are
// not the start itself (checkPath, schedRestore, the watchdog's, setSwitches), teardown, and the module's init, which
// also registers the other files' exports (pipes, relay, netns, fsat, sandbox, landlock). The interface is described
// in spawn.c's header comment.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "common.h"
#include "fsat.h"
#include "landlock.h"
#include "netnotify.h"
#include "fswatch.h"
#include "netns.h"
#include "pipes.h"
#include "relay.h"
#include "sandbox.h"
#include "spawn_state.h"
#include "watchdog.h"

void unlink_watched(struct watched *w) {
  if (w->prev) w->prev->next = w->next;
  else if (w->st) w->st->head = w->next;
  if (w->next) w->next->prev = w->prev;
  w->prev = w->next = NULL;
}

void free_handle_data(uv_handle_t *h) { free(h->data); }

static void unlink_exit_watch(struct exit_watch *w) {
  if (w->prev) w->prev->next = w->next;
  else if (w->st) w->st->watches = w->next;
  if (w->next) w->next->prev = w->prev;
  w->prev = w->next = NULL;
}

// A pidfd polls readable once the process has terminated (zombie or reaped), whoever its parent is.
static void on_exit_watch(uv_poll_t *handle, int status, int events) {
  (void)events;
  struct exit_watch *w = handle->data;
  if (status == 0) {
    struct pollfd p = {.fd = w->pidfd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 0) == 0) return;  // spurious wake-up: still running
  }
  struct addon_state *st = w->st;
  napi_ref ref = w->cb;
  w->cb = NULL;
  uv_poll_stop(&w->poll);
  close(w->pidfd);
  w->pidfd = -1;
  unlink_exit_watch(w);
  uv_close((uv_handle_t *)&w->poll, free_handle_data);
  if (!st || !ref) return;

  napi_env env = st->env;
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  napi_value fn, recv, result;
  if (napi_get_reference_value(env, ref, &fn) == napi_ok && fn) {
    napi_get_global(env, &recv);
    napi_status s = napi_make_callback(env, st->async_ctx, recv, fn, 0, NULL, &result);
    if (s == napi_pending_exception) {
      napi_value err;
      napi_get_and_clear_last_exception(env, &err);
      napi_fatal_exception(env, err);
    }
  }
  napi_delete_reference(env, ref);
  napi_close_handle_scope(env, scope);
}


void free_watched(struct reactor_item *it) { free(it); }

// The child's pidfd is readable: it has terminated. Reap it and report the exit to JS.
void on_pidfd(struct reactor_item *it, uint32_t events) {
  (void)events;
  struct watched *w = (struct watched *)it;
  siginfo_t info;
  memset(&info, 0, sizeof info);
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  // The raw call: glibc's waitid has no rusage argument, the kernel's has (the same figures wait4 reports).
  int r = (int)syscall(SYS_waitid, P_PIDFD, w->pidfd, &info, WEXITED | WNOHANG, &ru);
  if (r < 0 && errno == EINTR) return;
  if (r == 0 && info.si_pid == 0) return;  // not exited yet (spurious wake-up)
  int code = -1, signo = 0;
  if (r == 0) {
    if (info.si_code == CLD_EXITED) code = info.si_status & 0xff;
    else signo = info.si_status;  // CLD_KILLED, CLD_DUMPED
  } else {
    signo = SIGKILL;  // cannot happen for our own child; report something rather than hang
  }
  struct addon_state *st = w->st;
  pid_t pid = w->pid;
  unlink_watched(w);
  if (w->pe) release_pending(w->pe);  // it has exited: done with our memory
  reactor_retire(&w->item);           // before close(): see reactor.h
  close(w->pidfd);

  napi_env env = st->env;
  napi_value fn, argv[4];
  if (st->exit_handler && napi_get_reference_value(env, st->exit_handler, &fn) == napi_ok && fn) {
    napi_create_int32(env, pid, &argv[0]);
    napi_create_int32(env, code, &argv[1]);
    napi_create_int32(env, signo, &argv[2]);
    size_t argc = 3;
    if (r == 0 && napi_create_array_with_length(env, 5, &argv[3]) == napi_ok) {
      double figures[5] = {
          (double)ru.ru_utime.tv_sec * 1e6 + (double)ru.ru_utime.tv_usec,
          (double)ru.ru_stime.tv_sec * 1e6 + (double)ru.ru_stime.tv_usec,
          (double)ru.ru_maxrss,
          (double)ru.ru_inblock,
          (double)ru.ru_oublock,
      };
      for (uint32_t i = 0; i < 5; i++) {
        napi_value v;
        napi_create_double(env, figures[i], &v);
        napi_set_element(env, argv[3], i, v);
      }
      argc = 4;
    }
    reactor_call(&st->reactor, fn, argc, argv);
  }
}

void cleanup_state(void *arg) {
  struct addon_state *st = arg;
  while (st->watches) {
    struct exit_watch *w = st->watches;
    unlink_exit_watch(w);
    w->st = NULL;
    if (w->cb) napi_delete_reference(st->env, w->cb);
    w->cb = NULL;
    uv_poll_stop(&w->poll);
    close(w->pidfd);
    w->pidfd = -1;
    uv_close((uv_handle_t *)&w->poll, free_handle_data);
  }
  while (st->head) {
    struct watched *w = st->head;
    unlink_watched(w);
    int pidfd = w->pidfd;
    if (w->pe) w->pe->w = NULL;
    w->pe = NULL;
    reactor_retire(&w->item);
    close(pidfd);
  }
  // Children still setting up may use these records and stacks: forget them but leak the memory.
  while (st->pending) {
    struct pending_exec *pe = st->pending;
    unlink_pending(pe);
    pe->st = NULL;
  }
  reactor_close(&st->reactor);
  if (st->batch_ready) {
    batch_finish(st);
    uv_close((uv_handle_t *)&st->batch_end, NULL);
    st->batch_ready = false;
  }
  while (st->nstacks > 0) munmap(st->stacks[--st->nstacks], CHILD_STACK_SIZE);
  if (st->devnull >= 0) close(st->devnull);
  st->devnull = -1;
  if (st->self_pidfd >= 0) close(st->self_pidfd);
  st->self_pidfd = -1;
}

void finalize_state(napi_env env, void *data, void *hint) {
  (void)hint;
  struct addon_state *st = data;
  if (st->exit_handler) napi_delete_reference(env, st->exit_handler);
  if (st->async_ctx) napi_async_destroy(env, st->async_ctx);
  free(st);
}

// checkPath(path, kind: 0 = a directory to chdir into, 1 = a program to execute) -> 0 or an errno value: precheck's
// rules for one path, for the server's own checks before it builds a launch (no Stats objects, no exceptions).
static napi_value js_check_path(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  int32_t kind = -1;
  char *path = NULL;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, args[1], &kind) != napi_ok || (kind != 0 && kind != 1) || !(path = get_string(env, args[0]))) {
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (!pending) napi_throw_type_error(env, NULL, "checkPath(path: string, kind: 0 | 1)");
    return NULL;
  }
  struct stat sb;
  int err = 0;
  if (stat(path, &sb) < 0) err = errno;
  else if (kind == 0 && !S_ISDIR(sb.st_mode)) err = ENOTDIR;
  else if (kind == 1 && !S_ISREG(sb.st_mode)) err = EACCES;
  else if (faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) < 0) err = errno;
  free(path);
  napi_value res;
  napi_create_int32(env, err, &res);
  return res;
}

// schedRestore(): leaves SCHED_BATCH now, before something else starts processes that would inherit it (node-pty,
// child_process).
static napi_value js_sched_restore(napi_env env, napi_callback_info info) {
  (void)info;
  struct addon_state *st;
  napi_get_instance_data(env, (void **)&st);
  if (st) batch_finish(st);
  return NULL;
}

// unwatchGroup(slot): the group no longer needs to die with us (its process has closed).
static napi_value js_unwatch_group(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value arg;
  int32_t slot = -1;
  if (napi_get_cb_info(env, info, &argc, &arg, NULL, NULL) == napi_ok && argc >= 1 &&
      napi_get_value_int32(env, arg, &slot) == napi_ok)
    watchdog_remove(slot);
  return NULL;
}

// watchGroup(pgid) -> slot: a process group started another way (node-pty) dies with us too.
static napi_value js_watch_group(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value arg, v;
  int32_t pgid = 0;
  int slot = -1;
  if (napi_get_cb_info(env, info, &argc, &arg, NULL, NULL) == napi_ok && argc >= 1 &&
      napi_get_value_int32(env, arg, &pgid) == napi_ok)
    slot = watchdog_add(pgid);
  napi_create_int32(env, slot, &v);
  return v;
}

static napi_value js_ensure_watchdog(napi_env env, napi_callback_info info) {
  (void)info;
  int err = watchdog_ensure();
  if (err != 0 && err != ENOSYS) return corral_throw_errno(env, err, "ensureWatchdog");
  return NULL;
}

// setCgroupCleanup(version, bases, removeBases): see watchdog_set_cgroups.
static napi_value js_set_cgroup_cleanup(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value args[3];
  int32_t version = 0;
  bool remove = false;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 3 ||
      napi_get_value_int32(env, args[0], &version) != napi_ok || napi_get_value_bool(env, args[2], &remove) != napi_ok) {
    napi_throw_type_error(env, NULL, "setCgroupCleanup(version: 1 | 2, bases: string[], removeBases: boolean)");
    return NULL;
  }
  char **bases = get_string_array(env, args[1]);
  if (!bases) {
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (!pending) napi_throw_type_error(env, NULL, "setCgroupCleanup: bases must be strings");
    return NULL;
  }
  int n = 0;
  while (bases[n]) n++;
  int err = watchdog_set_cgroups(version, (const char *const *)bases, n, remove);
  free_string_array(bases);
  if (err != 0) return corral_throw_errno(env, err, "setCgroupCleanup");
  return NULL;
}

// setSwitches(batch, simd): the switches of src/platform/addon.ts that the C obeys (it reads no environment itself).
static napi_value js_set_switches(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  bool batch = true, simd = true;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_bool(env, args[0], &batch) != napi_ok || napi_get_value_bool(env, args[1], &simd) != napi_ok) {
    napi_throw_type_error(env, NULL, "setSwitches(batch: boolean, simd: boolean)");
    return NULL;
  }
  corral_spawn_allow_batch(batch);
  corral_pipes_allow_simd(simd);
  return NULL;
}

static napi_value js_watchdog_pid(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value v;
  napi_create_int32(env, watchdog_pid(), &v);
  return v;
}

static napi_value js_set_exit_handler(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value fn;
  struct addon_state *st;
  napi_get_cb_info(env, info, &argc, &fn, NULL, NULL);
  napi_get_instance_data(env, (void **)&st);
  if (st->exit_handler) napi_delete_reference(env, st->exit_handler);
  st->exit_handler = NULL;
  napi_create_reference(env, fn, 1, &st->exit_handler);
  return NULL;
}

static napi_value js_watch_exit(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  struct addon_state *st;
  int32_t pid = 0;
  napi_valuetype fn_type = napi_undefined;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, args[0], &pid) != napi_ok || pid <= 0 || napi_typeof(env, args[1], &fn_type) != napi_ok ||
      fn_type != napi_function) {
    napi_throw_type_error(env, NULL, "watchExit(pid: positive integer, fn: function)");
    return NULL;
  }
  napi_get_instance_data(env, (void **)&st);
  int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);  // always O_CLOEXEC
  if (pidfd < 0) {
    if (errno == ESRCH) {
      napi_value no;
      napi_get_boolean(env, false, &no);
      return no;
    }
    return throw_errno(env, errno);
  }
  struct exit_watch *w = calloc(1, sizeof *w);
  if (!w) {
    close(pidfd);
    return throw_errno(env, ENOMEM);
  }
  int r = uv_poll_init(st->loop, &w->poll, pidfd);
  if (r != 0) {
    free(w);
    close(pidfd);
    return throw_errno(env, -r);
  }
  w->poll.data = w;
  w->pidfd = pidfd;
  if ((r = uv_poll_start(&w->poll, UV_READABLE, on_exit_watch)) != 0 || napi_create_reference(env, args[1], 1, &w->cb) != napi_ok) {
    close(pidfd);
    w->pidfd = -1;
    uv_close((uv_handle_t *)&w->poll, free_handle_data);
    return throw_errno(env, r != 0 ? -r : ENOMEM);
  }
  w->st = st;
  w->next = st->watches;
  if (st->watches) st->watches->prev = w;
  st->watches = w;
  napi_value yes;
  napi_get_boolean(env, true, &yes);
  return yes;
}


// Node unloads an addon when the last environment using it (a worker thread) goes away, possibly before libuv has
// run our close callbacks, and children set up in async mode may still be running our code: never unload.
static void pin_library(void) {
  Dl_info info;
  if (dladdr((void *)pin_library, &info) && info.dli_fname) dlopen(info.dli_fname, RTLD_NOW | RTLD_NODELETE | RTLD_NOLOAD);
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  static pthread_once_t pinned = PTHREAD_ONCE_INIT;
  pthread_once(&pinned, pin_library);
#ifdef HAVE_RAW_SYSCALL
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, corral_child_errtext_init);
#endif
  struct addon_state *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  st->env = env;
  st->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  st->self_pidfd = -1;
  st->reactor.epfd = -1;
  if (napi_get_uv_event_loop(env, &st->loop) != napi_ok) return NULL;
  napi_value name;
  napi_create_string_utf8(env, "corral.spawn", NAPI_AUTO_LENGTH, &name);
  napi_value resource;
  napi_create_object(env, &resource);
  napi_async_init(env, resource, name, &st->async_ctx);
  napi_set_instance_data(env, st, finalize_state, NULL);
  napi_add_env_cleanup_hook(env, cleanup_state, st);

  napi_value abi, async_ok, new_pidns_ok;
  napi_create_int32(env, CORRAL_NATIVE_ABI, &abi);
  napi_get_boolean(env, true, &new_pidns_ok);  // also the value of freshKeyring
#ifdef HAVE_RAW_SYSCALL
  napi_get_boolean(env, true, &async_ok);
#else
  napi_get_boolean(env, false, &async_ok);
#endif
  napi_property_descriptor props[] = {
      {"spawn", NULL, js_spawn, NULL, NULL, NULL, napi_default, NULL},
      {"setExitHandler", NULL, js_set_exit_handler, NULL, NULL, NULL, napi_default, NULL},
      {"watchExit", NULL, js_watch_exit, NULL, NULL, NULL, napi_default, NULL},
      {"checkPath", NULL, js_check_path, NULL, NULL, NULL, napi_default, NULL},
      {"schedRestore", NULL, js_sched_restore, NULL, NULL, NULL, napi_default, NULL},
      {"unwatchGroup", NULL, js_unwatch_group, NULL, NULL, NULL, napi_default, NULL},
      {"watchdogPid", NULL, js_watchdog_pid, NULL, NULL, NULL, napi_default, NULL},
      {"watchGroup", NULL, js_watch_group, NULL, NULL, NULL, napi_default, NULL},
      {"ensureWatchdog", NULL, js_ensure_watchdog, NULL, NULL, NULL, napi_default, NULL},
      {"setCgroupCleanup", NULL, js_set_cgroup_cleanup, NULL, NULL, NULL, napi_default, NULL},
      {"setSwitches", NULL, js_set_switches, NULL, NULL, NULL, napi_default, NULL},
      {"abi", NULL, NULL, NULL, NULL, abi, napi_default, NULL},
      {"asyncExec", NULL, NULL, NULL, NULL, async_ok, napi_default, NULL},
      {"newPidNs", NULL, NULL, NULL, NULL, new_pidns_ok, napi_default, NULL},
      {"freshKeyring", NULL, NULL, NULL, NULL, new_pidns_ok, napi_default, NULL},
      {"confine", NULL, NULL, NULL, NULL, new_pidns_ok, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  int re = reactor_init(&st->reactor, env, st->loop, st->async_ctx);
  if (re != 0) {
    throw_errno(env, re);
    return NULL;
  }
  if (corral_pipes_init(env, exports, &st->reactor) != napi_ok) return NULL;
  if (corral_relay_init(env, exports, &st->reactor) != napi_ok) return NULL;
  if (corral_netns_init(env, exports) != napi_ok) return NULL;
  if (corral_fsat_init(env, exports) != napi_ok) return NULL;
  if (corral_sandbox_init(env, exports) != napi_ok) return NULL;
  if (corral_landlock_init(env, exports) != napi_ok) return NULL;
  if (corral_netnotify_init(env, exports) != napi_ok) return NULL;
  if (corral_fswatch_init(env, exports) != napi_ok) return NULL;
  return exports;
}
