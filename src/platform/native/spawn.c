// Corral's fast pipe-mode process spawner (Linux): its parent side, starting a child (arguments, stacks, the
// SCHED_BATCH window, js_spawn). By concern: spawn_child.c (what the child runs before exec), spawn_supervisor.c (the
// supervisor of a Landlock command no cgroup holds), spawn_addon.c (exit watching, the other exports, teardown, the
// module's init); spawn_state.h and spawn_child.h are what they share.
//
// Node's child_process forks the whole (large) Node process on its one JS thread, which caps it near 700-850
// spawns/s on a 2-core machine. This addon starts children with clone(CLONE_VM): no page tables are copied. Two modes:
//   * async (default on x86_64 and arm64): the parent returns as soon as the child exists and never waits for its
//     execve. The child runs on a stack of ours in our memory until it execs, using raw system calls only. It is
//     cloned with CLONE_CHILD_CLEARTID: the kernel zeroes a word of ours when the child leaves our memory (execve or
//     exit), and only then are its stack and arguments reused.
//     The errors a caller must get synchronously (missing or unusable program or cwd) are checked before the start;
//     an exec failure only execve can see makes the child print it on its stderr and exit 127.
//   * vfork (CLONE_VFORK): the parent thread waits until the child has exec'd; every exec failure comes back
//     synchronously through memory shared with the child. Under load this wait is the child's scheduling latency,
//     which is why async is the default.
// Each child:
//   * is its own session and process-group leader (setsid), so a group kill reaches its descendants;
//   * gets PR_SET_PDEATHSIG(SIGKILL), so it dies when the spawning thread (the Node main thread) dies;
//   * has all signal dispositions reset to default and an empty signal mask (Node ignores SIGPIPE);
//   * receives exactly fds 0, 1, 2 and the requested extra fds at 3, 4, ...; everything else is closed.
// Exit is observed with a pidfd (CLONE_PIDFD) in the addon's epoll set (reactor.h): waitid(P_PIDFD) reaps only our own
// child, so children of child_process and node-pty are never touched.
//
// JS interface (see src/process/spawner.ts):
//   spawn(file, argv: string[], env: string[] /* "K=V" */, cwd, fds: number[] /* child fd i <- fds[i], -1 = closed,
//         -2 = create a pipe (0: parent writes, 1/2: parent reads), -3 = /dev/null */, waitExec: boolean,
//         newPidNs?: boolean /* CLONE_NEWPID: the child is the init of a new pid namespace (needs CAP_SYS_ADMIN) */,
//         freshKeyring?: boolean,
//         cgroupFds?: number[] /* open cgroup entry files (v1 tasks, v2 cgroup.procs): the child writes "0" into each */,
//         cgroupDirFd?: number /* v2: an open cgroup directory: the child is created in it (clone3 CLONE_INTO_CGROUP,
//                                 Linux 5.7+), and cgroupFds are only the fallback where clone3 cannot do that */,
//         confine?: { rulesetFd, seccomp: Buffer, flags? } /* the Landlock backend: the child confines itself (Landlock
//                   ruleset, no capabilities, seccomp filter) right before exec: confine.c; null/undefined: not */,
//         nprocMax?: number /* > 0: the child's RLIMIT_NPROC, soft and hard, set before exec (where no cgroup bounds
//                              the commands, src/process/cgroup.ts "pids budget"); 0: unchanged */,
//         supervise?: boolean /* async mode only: the command runs under a supervisor that outlives nothing it started
//                                (see supervisor_main); the pid returned is the command's */)
//     -> [pid, fd0, fd1, fd2, slot]   parent ends of created pipes (-1 where none); slot: the child's process group
//        in the group watchdog (watchdog.c), -1 if none: pass it to unwatchGroup once the group may outlive us.
//        A child given cgroupFds is not registered (the watchdog empties the cgroups themselves).
//   unwatchGroup(slot), watchdogPid() -> pid or 0
//   watchGroup(pgid) -> slot or -1   registers a process group started another way (node-pty)
//   ensureWatchdog()   (re)starts the watchdog if it is not running (cgroup mode: children started another way)
//   setCgroupCleanup(version: 1 | 2, bases: string[], removeBases: boolean)   see watchdog_set_cgroups
//     throws Error { message: strerror text, errno: number } when the child could not be started
//   setExitHandler(fn(pid, exitStatus /* -1 if signalled */, signo /* 0 if exited */, rusage))
//     rusage: [userUs, systemUs, maxRssKiB, inBlocks, outBlocks] of the child and the descendants it waited for
//     (waitid's fifth argument, as wait4 gives it), or undefined when the kernel gave none
//   asyncExec: boolean   whether async mode is compiled in
//   newPidNs: true       spawn understands its newPidNs argument
//   freshKeyring: true   spawn understands a freshKeyring argument: the child joins a new anonymous session
//                        keyring before exec (a sandboxed child must not possess the server's session keyring)
//   confine: true        spawn understands its confine argument
//   landlockAbi, landlockRuleset: see landlock.c
//   sealFds, setInheritable, pipe, pinSymlinks: see src/platform/native/sandbox.c. Loading the addon marks
//   every fd >= 3 of this process close-on-exec.
//   setSwitches(batch, simd)   what src/platform/addon.ts read from CORRAL_NO_BATCH and CORRAL_NO_SIMD (false: off)
//   checkPath(path, kind: 0 = directory to run in, 1 = program) -> 0 or errno (ENOENT, ENOTDIR, EACCES, ...)
//   schedRestore()   ends the SCHED_BATCH window of this loop turn now (see batch_begin); call it before starting
//                    processes another way (node-pty, child_process), which would inherit SCHED_BATCH
//   watchExit(pid, fn()) -> boolean
//     for a process this addon did not start (node-pty's children): calls fn() once, on the loop, when the process has
//     terminated, WITHOUT reaping it (its own parent's waitpid does that). false when pidfd_open says it is already
//     gone (ESRCH: fn is never called); throws Error { errno } on other failures (ENOSYS before Linux 5.3).

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "common.h"
#include "fsat.h"
#include "landlock.h"
#include "netns.h"
#include "pipes.h"
#include "relay.h"
#include "watchdog.h"
#include "sandbox.h"
#include "spawn_state.h"

#ifdef HAVE_RAW_SYSCALL
// 1: clone3 can create children in a cgroup; 0: not yet known; -1: it cannot (kernel < 5.7), use the entry files.
static int into_cgroup_ok;
#endif

void free_string_array(char **v) {
  if (!v) return;
  for (char **p = v; *p; p++) free(*p);
  free(v);
}

static void *get_stack(struct addon_state *st) {
  if (st->nstacks > 0) return st->stacks[--st->nstacks];
  void *m = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  return m == MAP_FAILED ? NULL : m;
}

static void put_stack(struct addon_state *st, void *stack) {
  if (!stack) return;
  if (st && st->nstacks < STACK_CACHE) st->stacks[st->nstacks++] = stack;
  else munmap(stack, CHILD_STACK_SIZE);
}

// Only once the child is done with them (exec'd or exited).
void free_pending(struct pending_exec *pe) {
  put_stack(pe->st, pe->stack);
  put_stack(pe->st, pe->cmd_stack);
  free(pe->file);
  free(pe->cwd);
  free_string_array(pe->argv);
  free_string_array(pe->envp);
  free(pe);
}

void unlink_pending(struct pending_exec *pe) {
  if (pe->prev) pe->prev->next = pe->next;
  else if (pe->st) pe->st->pending = pe->next;
  if (pe->next) pe->next->prev = pe->prev;
  pe->prev = pe->next = NULL;
}

// The child has left our memory (exec'd or exited): its stack and arguments are ours again.
void release_pending(struct pending_exec *pe) {
  if (pe->w) pe->w->pe = NULL;
  pe->w = NULL;
  unlink_pending(pe);
  free_pending(pe);
}

// Reclaims what children that have exec'd since the last call no longer use.
static void sweep_pending(struct addon_state *st) {
  for (struct pending_exec *pe = st->pending, *next; pe; pe = next) {
    next = pe->next;
    if (__atomic_load_n(&pe->ctid, __ATOMIC_ACQUIRE) == 0) release_pending(pe);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// JS entry points.

napi_value throw_errno(napi_env env, int err) { return corral_throw_errno(env, err, NULL); }

// Reads a JS string into a fresh malloc'd buffer.
char *get_string(napi_env env, napi_value v) {
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) return NULL;
  char *s = malloc(len + 1);
  if (!s) return NULL;
  if (napi_get_value_string_utf8(env, v, s, len + 1, &len) != napi_ok) {
    free(s);
    return NULL;
  }
  return s;
}

// Reads a JS string array into a NULL-terminated, malloc'd vector of malloc'd strings.
char **get_string_array(napi_env env, napi_value arr) {
  uint32_t n = 0;
  if (napi_get_array_length(env, arr, &n) != napi_ok) return NULL;
  char **v = calloc((size_t)n + 1, sizeof(char *));
  if (!v) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    napi_value e;
    if (napi_get_element(env, arr, i, &e) != napi_ok || !(v[i] = get_string(env, e))) {
      for (uint32_t j = 0; j < i; j++) free(v[j]);
      free(v);
      return NULL;
    }
  }
  return v;
}

// The errors execve would report for a missing or unusable cwd or program, found before starting the child (async
// mode cannot report exec errors synchronously). Returns 0 or an errno value.
static int precheck(const char *file, const char *cwd) {
  struct stat sb;
  if (stat(cwd, &sb) < 0) return errno;
  if (!S_ISDIR(sb.st_mode)) return ENOTDIR;
  if (faccessat(AT_FDCWD, cwd, X_OK, AT_EACCESS) < 0) return errno;
  char *joined = NULL;
  if (file[0] != '/') {  // execve resolves it after chdir
    size_t lc = strlen(cwd), lf = strlen(file);
    joined = malloc(lc + lf + 2);
    if (!joined) return ENOMEM;
    memcpy(joined, cwd, lc);
    joined[lc] = '/';
    memcpy(joined + lc + 1, file, lf + 1);
    file = joined;
  }
  int err = 0;
  if (stat(file, &sb) < 0) err = errno;
  else if (!S_ISREG(sb.st_mode)) err = EACCES;
  else if (faccessat(AT_FDCWD, file, X_OK, AT_EACCESS) < 0) err = errno;
  free(joined);
  return err;
}

// A new SCHED_OTHER child usually preempts its busy parent at once (EEVDF gives it the earlier deadline), and on a
// loaded machine the event loop then waits its turn among every runnable process: measured ~250 us of wall time per
// clone with 64 children starting at once on 2 cores. A SCHED_BATCH task is never preempted by a child's wake-up,
// so children are cloned while this thread is SCHED_BATCH; each child switches back to SCHED_OTHER itself before
// exec. Switching policy costs about as much as the preemption (the switch yields to runnable tasks), so it happens
// once per loop turn, not per spawn: the first spawn of a turn switches to SCHED_BATCH and a prepare handle (run when
// the loop is about to poll again) switches back.
// false: never SCHED_BATCH (the CORRAL_NO_BATCH switch; setSwitches).
static bool batch_allowed = true;

void corral_spawn_allow_batch(bool allow) { batch_allowed = allow; }

void batch_finish(struct addon_state *st) {
  if (!st->batch_active) return;
  static const struct sched_param zero_param;
  sched_setscheduler(0, SCHED_OTHER, &zero_param);
  st->batch_active = false;
  uv_prepare_stop(&st->batch_end);
}

static void on_batch_end(uv_prepare_t *h) { batch_finish(h->data); }

// Returns the policy children must restore before exec (SCHED_OTHER), or -1 when the thread is not SCHED_BATCH.
static int batch_begin(struct addon_state *st) {
  if (st->batch_active) return SCHED_OTHER;
  if (!batch_allowed) return -1;
  if (!st->batch_ready) {
    if (uv_prepare_init(st->loop, &st->batch_end) != 0) return -1;
    st->batch_end.data = st;
    uv_unref((uv_handle_t *)&st->batch_end);
    st->batch_ready = true;
  }
  static const struct sched_param zero_param;
  if (sched_getscheduler(0) != SCHED_OTHER || sched_setscheduler(0, SCHED_BATCH, &zero_param) != 0) return -1;
  st->batch_active = true;
  uv_prepare_start(&st->batch_end, on_batch_end);
  return SCHED_OTHER;
}

static __thread char *vfork_stack;


napi_value js_spawn(napi_env env, napi_callback_info info) {
  size_t argc = 14;
  napi_value args[14];
  struct addon_state *st;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 5) {
    napi_throw_type_error(env, NULL,
                          "spawn(file, argv, env, cwd, fds, waitExec, newPidNs, freshKeyring, cgroupFds, cgroupDirFd, "
                          "confine, nprocMax, supervise, checked) expects 5 to 14 arguments");
    return NULL;
  }
  napi_get_instance_data(env, (void **)&st);
  bool wait_exec = false;
  if (argc >= 6) napi_get_value_bool(env, args[5], &wait_exec);
  bool new_pidns = false;
  if (argc >= 7) napi_get_value_bool(env, args[6], &new_pidns);
  bool fresh_keyring = false;
  if (argc >= 8) napi_get_value_bool(env, args[7], &fresh_keyring);
  bool supervise = false;
  if (argc >= 13) napi_get_value_bool(env, args[12], &supervise);
  // The caller checked file and cwd by precheck's rules just now (checkPath, in this turn of its loop): no second
  // round of the same four system calls. Absent (a caller of 13 arguments): checked here.
  bool checked = false;
  if (argc >= 14) napi_get_value_bool(env, args[13], &checked);
#ifndef HAVE_RAW_SYSCALL
  wait_exec = true;
#endif

  sweep_pending(st);
  struct pending_exec *pe = calloc(1, sizeof *pe);
  if (!pe) {
    napi_throw_error(env, NULL, "spawn: out of memory");
    return NULL;
  }
  struct child_args *a = &pe->a;
  pe->st = st;
  pe->file = get_string(env, args[0]);
  pe->argv = get_string_array(env, args[1]);
  pe->envp = get_string_array(env, args[2]);
  pe->cwd = get_string(env, args[3]);
  uint32_t ncg = 0;
  bool has_cg = false;
  if (argc >= 9) napi_is_array(env, args[8], &has_cg);
  if (has_cg) napi_get_array_length(env, args[8], &ncg);
  uint32_t nfds = 0;
  napi_get_array_length(env, args[4], &nfds);
  napi_value result = NULL;
  int parent_end[3] = {-1, -1, -1};
  int child_end[3] = {-1, -1, -1};
  int err = 0;
  const char *err_what = NULL;
  bool keep_pe = false;

  if (!pe->file || !pe->argv || !pe->envp || !pe->cwd) {
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (!pending) napi_throw_type_error(env, NULL, "spawn: bad string arguments");
    goto out;
  }
  if (nfds < 3 || nfds > MAX_CHILD_FDS) {
    napi_throw_range_error(env, NULL, "spawn: fds must have 3..64 entries");
    goto out;
  }
  int32_t cg_dir = -1;
  if (argc >= 10) napi_get_value_int32(env, args[9], &cg_dir);
#ifndef HAVE_RAW_SYSCALL
  (void)cg_dir;
#endif
  if (ncg > MAX_CGROUP_FILES) {
    napi_throw_range_error(env, NULL, "spawn: at most 4 cgroupFds");
    goto out;
  }
  a->ncg = (int)ncg;
  for (uint32_t i = 0; i < ncg; i++) {
    napi_value e;
    int32_t fd = -1;
    napi_get_element(env, args[8], i, &e);
    if (napi_get_value_int32(env, e, &fd) != napi_ok || fd < 0) {
      napi_throw_type_error(env, NULL, "spawn: cgroupFds must be open file descriptors");
      goto out;
    }
    a->cg_fds[i] = fd;
  }
  if (argc >= 11 && corral_confinement_from_js(env, args[10], &a->confine) != 0) {
    napi_throw_type_error(env, NULL, "spawn: confine must be { rulesetFd, seccomp: Buffer, flags? }");
    goto out;
  }
  if (argc >= 12) {
    int64_t nproc = 0;
    napi_valuetype t;
    if (napi_typeof(env, args[11], &t) == napi_ok && t == napi_number &&
        (napi_get_value_int64(env, args[11], &nproc) != napi_ok || nproc < 0)) {
      napi_throw_range_error(env, NULL, "spawn: nprocMax must be 0 or a positive number");
      goto out;
    }
    a->nproc_max = (uint64_t)nproc;
  }
  if (!wait_exec && !checked && (err = precheck(pe->file, pe->cwd)) != 0) goto fail;

  a->nfds = (int)nfds;
  for (uint32_t i = 0; i < nfds; i++) {
    napi_value e;
    int32_t fd = FD_CLOSED;
    napi_get_element(env, args[4], i, &e);
    if (napi_get_value_int32(env, e, &fd) != napi_ok) fd = FD_CLOSED;
    if (fd == FD_PIPE && i < 3) {
      int p[2];
      if (pipe2(p, O_CLOEXEC) < 0) {
        err = errno;
        goto fail;
      }
      // stdin: the child reads p[0]; stdout/stderr: the child writes p[1].
      parent_end[i] = i == 0 ? p[1] : p[0];
      child_end[i] = i == 0 ? p[0] : p[1];
      fd = child_end[i];
    } else if (fd == FD_DEVNULL) {
      fd = st->devnull;
    } else if (fd < 0) {
      fd = FD_CLOSED;
    }
    a->src[i] = fd;
  }
  a->file = pe->file;
  a->argv = pe->argv;
  a->envp = pe->envp;
  a->cwd = pe->cwd;
  a->parent_pid = getpid();
  a->parent_pidfd = -1;
  a->fresh_keyring = fresh_keyring;
  struct rlimit rl;
  a->close_from_max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536
                          ? (unsigned int)rl.rlim_cur
                          : 65536;

  char *stack;
  int (*child_fn)(void *);
  int flags = CLONE_VM | CLONE_PIDFD | SIGCHLD;
  if (new_pidns) {
    flags |= CLONE_NEWPID;
    if (!wait_exec) {
      if (st->self_pidfd < 0) st->self_pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);  // O_CLOEXEC
      if (st->self_pidfd < 0) {
        err = errno;
        goto fail;
      }
      a->parent_pidfd = st->self_pidfd;
    }
  }
  if (wait_exec) {
    if (!vfork_stack) {
      void *m = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
      if (m == MAP_FAILED) {
        err = errno;
        goto fail;
      }
      vfork_stack = m;
    }
    stack = vfork_stack;
    child_fn = child_main_vfork;
    flags |= CLONE_VFORK;
  } else {
#ifdef HAVE_RAW_SYSCALL
    if (!(pe->stack = get_stack(st))) {
      err = ENOMEM;
      goto fail;
    }
    stack = pe->stack;
    child_fn = child_main_async;
    if (supervise) {
      if (new_pidns || ncg > 0 || cg_dir >= 0) {
        err = EINVAL;  // a supervisor is for a command without a pid namespace or a cgroup of its own
        goto fail;
      }
      if (!(pe->cmd_stack = get_stack(st))) {
        err = ENOMEM;
        goto fail;
      }
      a->supervise = 1;
      a->cmd_stack = (char *)pe->cmd_stack + CHILD_STACK_SIZE;
      child_fn = supervisor_main;
    }
    flags |= CLONE_CHILD_CLEARTID;
    pe->ctid = 1;  // the kernel zeroes it when the child execs or exits
#else
    err = ENOSYS;
    goto fail;
#endif
  }

  // See batch_begin. In vfork mode we wait for the exec anyway: no SCHED_BATCH window.
  if (wait_exec) batch_finish(st);
  a->restore_policy = wait_exec ? -1 : batch_begin(st);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int pidfd = -1;
  pid_t pid = -1;
  int clone_errno = 0;
  bool cloned = false;
#ifdef HAVE_RAW_SYSCALL
  if (cg_dir >= 0 && into_cgroup_ok >= 0) {
    // Created in its cgroup: no migration (which would wait for an RCU grace period and hold up every fork).
    struct corral_clone_args ca;
    memset(&ca, 0, sizeof ca);
    ca.flags = (uint64_t)(flags & ~0xff) | CLONE_INTO_CGROUP;
    ca.exit_signal = (uint64_t)(flags & 0xff);
    ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
    ca.child_tid = (uint64_t)(uintptr_t)&pe->ctid;
    ca.stack = (uint64_t)(uintptr_t)stack;
    ca.stack_size = CHILD_STACK_SIZE;
    ca.cgroup = (uint64_t)cg_dir;
    int saved_ncg = a->ncg;
    a->ncg = 0;  // already in it
    long r = corral_clone3(&ca, sizeof ca, child_fn, a);
    if (r >= 0) {
      pid = (pid_t)r;
      cloned = true;
      into_cgroup_ok = 1;
    } else if (into_cgroup_ok == 0 && (r == -ENOSYS || r == -E2BIG || r == -EINVAL)) {
      into_cgroup_ok = -1;  // an older kernel: the child enters through the entry files from now on
      a->ncg = saved_ncg;
    } else {
      clone_errno = (int)-r;
      cloned = true;  // a real failure (EAGAIN at pids.max, ENOMEM, ...)
    }
  }
#endif
  if (!cloned) {
    pid = clone(child_fn, stack + CHILD_STACK_SIZE, flags, a, &pidfd, NULL, (pid_t *)&pe->ctid);
    clone_errno = errno;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);

  if (pid < 0) {
    err = clone_errno;
    goto fail;
  }
  pid_t report_pid = pid;
  for (int i = 0; i < 3; i++) {
    if (child_end[i] >= 0) close(child_end[i]);
    child_end[i] = -1;
  }
  if (!wait_exec) {
    keep_pe = true;  // the child uses pe until it has left our memory (ctid zeroed, or its exit)
    pe->next = st->pending;
    if (st->pending) st->pending->prev = pe;
    st->pending = pe;
#ifdef HAVE_RAW_SYSCALL
    if (a->supervise) {
      // The supervisor tells us the command's pid (or why it has none) as soon as it has cloned it.
      int32_t cmd;
      while ((cmd = __atomic_load_n(&a->cmd_pid, __ATOMIC_ACQUIRE)) == 0) {
        struct pollfd pp = {.fd = pidfd, .events = POLLIN, .revents = 0};
        if (poll(&pp, 1, 0) > 0) {
          cmd = -ESRCH;  // it died before it could
          break;
        }
        struct timespec t = {0, 50 * 1000 * 1000};
        syscall(SYS_futex, &a->cmd_pid, FUTEX_WAIT_PRIVATE, 0, &t, NULL, 0);
      }
      if (cmd < 0) {
        siginfo_t si;
        while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0 && errno == EINTR) {
        }
        close(pidfd);
        release_pending(pe);
        err = (int)-cmd;
        err_what = "cannot start the command's supervisor";
        goto fail;
      }
      report_pid = cmd;
    }
#endif
  } else if (a->err != 0) {
    // The child has already exited (CLONE_VFORK resumed us): reap it, it is ours.
    siginfo_t si;
    while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0 && errno == EINTR) {
    }
    close(pidfd);
    err = a->err;
    if (a->err_in_cgroup) {
      err_what = "cannot move the process into its cgroup";
    }
    goto fail;
  }

  struct watched *w = calloc(1, sizeof *w);
  int e = ENOMEM;
  if (w) {
    w->item.on_event = on_pidfd;
    w->item.on_retired = free_watched;
    e = reactor_add(&st->reactor, &w->item, pidfd);
  }
  if (e != 0) {
    // Should never happen; the child is running, so kill and reap it rather than leak it.
    kill(pid, SIGKILL);
    siginfo_t si;
    while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0 && errno == EINTR) {
    }
    free(w);
    close(pidfd);
    if (keep_pe) release_pending(pe);  // it is gone; keep_pe stays true: pe is freed already
    err = e;
    goto fail;
  }
  w->st = st;
  w->pidfd = pidfd;
  w->pid = report_pid;  // supervised: the command's (what JS knows it by); its supervisor's pidfd says when it ends
  if (keep_pe) {
    w->pe = pe;
    pe->w = w;
  }
  w->next = st->head;
  if (st->head) st->head->prev = w;
  st->head = w;

  napi_create_array_with_length(env, 5, &result);
  napi_value v;
  napi_create_int32(env, report_pid, &v);
  napi_set_element(env, result, 0, v);
  for (int i = 0; i < 3; i++) {
    napi_create_int32(env, parent_end[i], &v);
    napi_set_element(env, result, (uint32_t)i + 1, v);
  }
  // The child leads its own process group (setsid): the watchdog kills that group if we die. A child in a cgroup of
  // ours is not registered: the watchdog empties the cgroups (setsid descendants included).
  if (a->ncg > 0) watchdog_ensure();
  napi_create_int32(env, a->ncg > 0 ? -1 : watchdog_add(report_pid), &v);
  napi_set_element(env, result, 4, v);
  goto out;

fail:
  for (int i = 0; i < 3; i++) {
    if (child_end[i] >= 0) close(child_end[i]);
    if (parent_end[i] >= 0) close(parent_end[i]);
  }
  corral_throw_errno(env, err, err_what);
  result = NULL;
out:
  if (!keep_pe) free_pending(pe);
  return result;
}

