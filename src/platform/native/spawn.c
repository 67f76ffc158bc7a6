// Corral's fast pipe-mode process spawner (Linux).
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

#ifndef KEYCTL_JOIN_SESSION_KEYRING
#define KEYCTL_JOIN_SESSION_KEYRING 1
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

#define FD_CLOSED (-1)
#define FD_PIPE (-2)
#define FD_DEVNULL (-3)
#define MAX_CHILD_FDS 64
#define MAX_CGROUP_FILES 4
#define CHILD_STACK_SIZE (64 * 1024)

// ---------------------------------------------------------------------------------------------------------------
// The child side. It runs on its own stack but in the parent's memory: it must not allocate, take locks or write
// anything but its own stack (and, in vfork mode, `err`) before execve.

struct child_args {
  const char *file;
  char *const *argv;
  char *const *envp;
  const char *cwd;
  int nfds;
  int src[MAX_CHILD_FDS];  // child fd i <- src[i] (an fd of the parent), -1 = closed
  int tmp[MAX_CHILD_FDS];  // scratch: sources moved above nfds
  unsigned int close_from_max;
  pid_t parent_pid;
  int parent_pidfd;  // async mode with newPidNs: a pidfd of this process (getppid() is 0 in a new pid namespace), or -1
  int restore_policy;  // async mode: SCHED_OTHER to restore in the child (it starts as SCHED_BATCH), or -1
  int fresh_keyring;   // join a new anonymous session keyring before exec
  int ncg;
  int cg_fds[MAX_CGROUP_FILES];  // open cgroup.procs files (our fds) the child moves itself into before exec
  struct corral_confinement confine;  // the Landlock backend: applied right before exec (confine.c)
  uint64_t nproc_max;  // > 0: RLIMIT_NPROC (soft and hard) before exec
  int supervise;       // async mode: clone a supervisor (supervisor_main), which clones the command
  char *cmd_stack;     // supervise: the command's stack (the supervisor runs on the child stack)
  volatile int32_t cmd_pid;  // supervise: the command's pid once cloned, -errno when the supervisor failed
  volatile int err;  // vfork mode: set by the child when it fails; 0 when execve succeeded
  volatile int err_in_cgroup;  // vfork mode: err came from entering the cgroup
};

// vfork mode: the parent thread is suspended until execve or _exit, so plain libc calls are safe here (errno lands in
// the suspended thread's TLS).
static void child_fail(struct child_args *a, int err) {
  a->err = err ? err : EINVAL;
  _exit(127);
}

static int child_main_vfork(void *p) {
  struct child_args *a = p;
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  // Handlers point into the parent's memory and ignored signals (SIGPIPE in Node) would be inherited by exec: reset
  // every disposition. Signals stay blocked (the parent blocked them all) until right before execve.
  for (int s = 1; s < NSIG; s++) {
    if (s == SIGKILL || s == SIGSTOP) continue;
    sigaction(s, &dfl, NULL);  // glibc's internal signals fail with EINVAL: harmless
  }
  if (setsid() < 0) child_fail(a, errno);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) child_fail(a, errno);
  // Into the cgroup(s) first: the fds are ours, and their numbers may be reused by the placement below.
  for (int i = 0; i < a->ncg; i++) {
    if (write(a->cg_fds[i], "0", 1) != 1) {
      a->err_in_cgroup = 1;
      child_fail(a, errno);
    }
  }
  if (a->nproc_max > 0) {
    struct rlimit rl = {.rlim_cur = (rlim_t)a->nproc_max, .rlim_max = (rlim_t)a->nproc_max};
    if (setrlimit(RLIMIT_NPROC, &rl) < 0) child_fail(a, errno);
  }

  // Move every source that sits inside the target range [0, nfds) out of the way, then place them.
  for (int i = 0; i < a->nfds; i++) {
    int s = a->src[i];
    a->tmp[i] = s;
    if (s >= 0 && s < a->nfds) {
      int moved = fcntl(s, F_DUPFD_CLOEXEC, a->nfds);
      if (moved < 0) child_fail(a, errno);
      a->tmp[i] = moved;
    }
  }
  for (int i = 0; i < a->nfds; i++) {
    int s = a->tmp[i];
    if (s < 0) {
      close(i);
    } else if (dup2(s, i) < 0) {  // the new fd i has no FD_CLOEXEC
      child_fail(a, errno);
    }
  }
  if (chdir(a->cwd) < 0) child_fail(a, errno);
  // EPERM/ENOSYS: keyrings are denied to this process (a container's seccomp profile): no keyring to leave behind.
  if (a->fresh_keyring && syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL, 0, 0, 0) < 0 && errno != ENOSYS &&
      errno != EPERM)
    child_fail(a, errno);
  long confined = corral_confine_self(&a->confine);  // uses the ruleset fd: before the close below
  if (confined < 0) child_fail(a, (int)-confined);
  // Everything above the requested fds goes, whatever flags it has.
  if (syscall(SYS_close_range, (unsigned int)a->nfds, ~0U, 0) < 0) {
    for (unsigned int fd = (unsigned int)a->nfds; fd < a->close_from_max; fd++) close((int)fd);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execve(a->file, a->argv, a->envp);
  child_fail(a, errno);
  return 127;
}

// Async mode: the parent keeps running while the child sets up and execs, so the child may not even touch errno
// (it lives in the parent thread's TLS). It uses raw system calls only. Exec errors the parent could not foresee
// (see precheck) are written to the child's stderr, and the child exits 127, like a shell.
#if defined(__x86_64__)
#define HAVE_RAW_SYSCALL 1
static inline long raw_syscall(long n, long a, long b, long c, long d) {
  long ret;
  register long r10 __asm__("r10") = d;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
#define HAVE_RAW_SYSCALL 1
static inline long raw_syscall(long n, long a, long b, long c, long d) {
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory", "cc");
  return x0;
}
#endif

#ifdef HAVE_RAW_SYSCALL
// clone3 with a function to run on the new stack, as glibc's clone() does for clone(2): the child starts on `stack`
// with a copy of our registers, so fn and arg travel in registers the system call leaves alone, and it never
// returns into our frames. Returns the pid (parent) or -errno; the child calls fn(arg) and exits with its result.
struct corral_clone_args {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};
long corral_clone3(struct corral_clone_args *args, size_t size, int (*fn)(void *), void *arg);
#if defined(__x86_64__)
__asm__(
    ".text\n"
    ".globl corral_clone3\n"
    ".hidden corral_clone3\n"
    ".type corral_clone3,@function\n"
    "corral_clone3:\n"
    "  mov %rdx, %r8\n"
    "  mov %rcx, %r9\n"
    "  mov $435, %eax\n"
    "  syscall\n"
    "  test %rax, %rax\n"
    "  jz 1f\n"
    "  ret\n"
    "1:\n"
    "  xor %ebp, %ebp\n"
    "  mov %r9, %rdi\n"
    "  call *%r8\n"
    "  mov %eax, %edi\n"
    "  mov $60, %eax\n"
    "  syscall\n"
    "  hlt\n"
    ".size corral_clone3, .-corral_clone3\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n"
    ".globl corral_clone3\n"
    ".hidden corral_clone3\n"
    ".type corral_clone3,%function\n"
    "corral_clone3:\n"
    "  mov x10, x2\n"
    "  mov x11, x3\n"
    "  mov x8, #435\n"
    "  svc #0\n"
    "  cbz x0, 1f\n"
    "  ret\n"
    "1:\n"
    "  mov x29, xzr\n"
    "  mov x0, x11\n"
    "  blr x10\n"
    "  mov x8, #93\n"
    "  svc #0\n"
    "  brk #0\n"
    ".size corral_clone3, .-corral_clone3\n");
#endif
// clone(2) the same way (no cgroup to give, and clone3 may be refused with ENOSYS, as container profiles do): the child
// runs fn(arg) on `stack` (its top) and exits with its result. No CLONE_SETTLS, no tids. Returns the pid or -errno.
long corral_clone(long flags, void *stack, int (*fn)(void *), void *arg);
#if defined(__x86_64__)
__asm__(
    ".text\n"
    ".globl corral_clone\n"
    ".hidden corral_clone\n"
    ".type corral_clone,@function\n"
    "corral_clone:\n"
    "  mov %rdx, %r8\n"
    "  mov %rcx, %r9\n"
    "  xor %edx, %edx\n"
    "  xor %r10d, %r10d\n"
    "  mov $56, %eax\n"
    "  syscall\n"
    "  test %rax, %rax\n"
    "  jz 1f\n"
    "  ret\n"
    "1:\n"
    "  xor %ebp, %ebp\n"
    "  mov %r9, %rdi\n"
    "  call *%r8\n"
    "  mov %eax, %edi\n"
    "  mov $60, %eax\n"
    "  syscall\n"
    "  hlt\n"
    ".size corral_clone, .-corral_clone\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n"
    ".globl corral_clone\n"
    ".hidden corral_clone\n"
    ".type corral_clone,%function\n"
    "corral_clone:\n"
    "  mov x10, x2\n"
    "  mov x11, x3\n"
    "  mov x2, xzr\n"
    "  mov x3, xzr\n"
    "  mov x4, xzr\n"
    "  mov x8, #220\n"
    "  svc #0\n"
    "  cbz x0, 1f\n"
    "  ret\n"
    "1:\n"
    "  mov x29, xzr\n"
    "  mov x0, x11\n"
    "  blr x10\n"
    "  mov x8, #93\n"
    "  svc #0\n"
    "  brk #0\n"
    ".size corral_clone, .-corral_clone\n");
#endif
// 1: clone3 can create children in a cgroup; 0: not yet known; -1: it cannot (kernel < 5.7), use the entry files.
static int into_cgroup_ok;

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

// The kernel's struct sigaction (x86_64 and arm64 share this layout); all zero = SIG_DFL, no flags, empty mask.
struct kernel_sigaction {
  void *handler;
  unsigned long flags;
  void *restorer;
  unsigned long mask;
};
static const struct kernel_sigaction k_dfl;
static const unsigned long k_empty_mask;
static const char *errtext[256];  // strerror texts, filled at load time (read-only afterwards)

static size_t raw_strlen(const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  return n;
}

static void raw_write_str(int fd, const char *s) {
  size_t len = raw_strlen(s);
  while (len > 0) {
    long w = raw_syscall(SYS_write, fd, (long)s, (long)len, 0);
    if (w == -EINTR) continue;
    if (w <= 0) return;
    s += w;
    len -= (size_t)w;
  }
}

__attribute__((noreturn)) static void child_die_at(struct child_args *a, long negerr, int stdio_ready,
                                                 const char *what) {
  int err = (int)-negerr;
  if (stdio_ready) {
    raw_write_str(2, "corral: ");
    raw_write_str(2, what);
    raw_write_str(2, a->file);
    raw_write_str(2, ": ");
    raw_write_str(2, err > 0 && err < 256 && errtext[err] ? errtext[err] : "error");
    raw_write_str(2, "\n");
  }
  for (;;) raw_syscall(SYS_exit_group, 127, 0, 0, 0);
}

__attribute__((noreturn)) static void child_die(struct child_args *a, long negerr, int stdio_ready) {
  child_die_at(a, negerr, stdio_ready, "cannot execute ");
}

static int child_main_async(void *p) {
  struct child_args *a = p;
  long r;
  for (long s = 1; s <= 64; s++) {
    if (s == SIGKILL || s == SIGSTOP) continue;
    raw_syscall(SYS_rt_sigaction, s, (long)&k_dfl, 0, sizeof(unsigned long));
  }
  if (a->restore_policy >= 0) {
    static const struct sched_param zero_param;
    raw_syscall(SYS_sched_setscheduler, 0, a->restore_policy, (long)&zero_param, 0);
  }
  if ((r = raw_syscall(SYS_setsid, 0, 0, 0, 0)) < 0) child_die(a, r, 0);
  if ((r = raw_syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0)) < 0) child_die(a, r, 0);
  // The parent may have died before PR_SET_PDEATHSIG took effect. In a new pid namespace getppid() is 0: ask the
  // parent's pidfd instead (readable once the parent has exited).
  if (a->parent_pidfd >= 0) {
    struct pollfd pp = {.fd = a->parent_pidfd, .events = POLLIN, .revents = 0};
    static const struct timespec no_wait;
    if (raw_syscall(SYS_ppoll, (long)&pp, 1, (long)&no_wait, 0) != 0) child_die(a, -ESRCH, 0);
  } else if (raw_syscall(SYS_getppid, 0, 0, 0, 0) != a->parent_pid) {
    child_die(a, -ESRCH, 0);
  }
  // Into the cgroup(s) first (the fds are ours, and their numbers may be reused by the placement below); a failure is
  // reported once stderr is in place.
  long cg_err = 0;
  for (int i = 0; i < a->ncg && cg_err == 0; i++) {
    r = raw_syscall(SYS_write, a->cg_fds[i], (long)"0", 1, 0);
    if (r < 0) cg_err = r;
  }
  if (a->nproc_max > 0) {
    const uint64_t rl[2] = {a->nproc_max, a->nproc_max};  // struct rlimit64
    if ((r = raw_syscall(SYS_prlimit64, 0, RLIMIT_NPROC, (long)rl, 0)) < 0) child_die(a, r, 0);
  }

  for (int i = 0; i < a->nfds; i++) {
    int s = a->src[i];
    a->tmp[i] = s;  // a->tmp belongs to this child alone until it execs
    if (s >= 0 && s < a->nfds) {
      if ((r = raw_syscall(SYS_fcntl, s, F_DUPFD_CLOEXEC, a->nfds, 0)) < 0) child_die(a, r, 0);
      a->tmp[i] = (int)r;
    }
  }
  for (int i = 0; i < a->nfds; i++) {
    int s = a->tmp[i];
    if (s < 0) raw_syscall(SYS_close, i, 0, 0, 0);
    else if ((r = raw_syscall(SYS_dup3, s, i, 0, 0)) < 0) child_die(a, r, i > 2);
  }
  if (cg_err < 0) child_die_at(a, cg_err, 1, "cannot move into the cgroup of ");
  if ((r = raw_syscall(SYS_chdir, (long)a->cwd, 0, 0, 0)) < 0) child_die(a, r, 1);
  if (a->fresh_keyring && (r = raw_syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, 0, 0, 0)) < 0 && r != -ENOSYS &&
      r != -EPERM)
    child_die(a, r, 1);
  if ((r = corral_confine_self(&a->confine)) < 0) child_die(a, r, 0);  // it says why itself
  // Everything above the requested fds goes, whatever flags it has.
  if (raw_syscall(SYS_close_range, a->nfds, (long)~0U, 0, 0) < 0) {
    for (unsigned int fd = (unsigned int)a->nfds; fd < a->close_from_max; fd++) raw_syscall(SYS_close, fd, 0, 0, 0);
  }
  raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, (long)&k_empty_mask, 0, sizeof(unsigned long));
  r = raw_syscall(SYS_execve, (long)a->file, (long)a->argv, (long)a->envp, 0);
  child_die(a, r, 1);
}

// ---- The supervisor (supervise: a sandboxed command where no cgroup holds it, src/process/spawner.ts) -----------
//
// A command under Landlock has no pid namespace, and without a cgroup of its own nothing would find a descendant that
// left its process group and session (`setsid`): process/terminate (a group kill) and the group watchdog missed it.
// The supervisor is the child we clone; it makes itself a child subreaper (PR_SET_CHILD_SUBREAPER: every orphaned
// descendant of the command becomes its child, whatever session it is in) and clones the command. When the command
// has terminated (its exit, process/terminate's SIGKILL to its group, the watchdog's kill of that group when the
// server died), and when the server itself dies (our parent-death signal, SIGUSR1), it SIGKILLs every child it has
// and reaps them, again and again as their orphans come to it, until it has none; then it exits as the command did.
// Like a bubblewrap sandbox, nothing the command started outlives it. The command cannot signal the supervisor
// (Landlock's signal scope) nor ptrace it. It shares our memory (CLONE_VM), so it uses raw system calls only, on the
// child's stack; the command runs on a stack of its own.

// Kills every descendant (they are all our children or become so) and reaps them until none is left.
static void sup_kill_all(pid_t self, pid_t cmd) {
  char path[64];
  char digits[16];
  int nd = 0;
  for (pid_t v = self; v > 0 && nd < 15; v /= 10) digits[nd++] = (char)('0' + v % 10);
  static const char pre[] = "/proc/", mid[] = "/task/", post[] = "/children";
  size_t k = 0;
  for (size_t i = 0; pre[i]; i++) path[k++] = pre[i];
  for (int i = nd - 1; i >= 0; i--) path[k++] = digits[i];
  for (size_t i = 0; mid[i]; i++) path[k++] = mid[i];
  for (int i = nd - 1; i >= 0; i--) path[k++] = digits[i];
  for (size_t i = 0; post[i]; i++) path[k++] = post[i];
  path[k] = 0;
  if (cmd > 1) raw_syscall(SYS_kill, -cmd, SIGKILL, 0, 0);  // the command's group, members not yet orphaned included
  for (;;) {
    corral_kill_listed(path);  // our children: each SIGKILLed
    int status;
    long r = raw_syscall(SYS_wait4, -1, (long)&status, 0, 0);
    if (r == -ECHILD) return;
  }
}

static int supervisor_main(void *p) {
  struct child_args *a = p;
  long r;
  for (long s = 1; s <= 64; s++) {
    if (s == SIGKILL || s == SIGSTOP) continue;
    raw_syscall(SYS_rt_sigaction, s, (long)&k_dfl, 0, sizeof(unsigned long));
  }
  if (a->restore_policy >= 0) {
    static const struct sched_param zero_param;
    raw_syscall(SYS_sched_setscheduler, 0, a->restore_policy, (long)&zero_param, 0);
  }
  pid_t self = (pid_t)raw_syscall(SYS_getpid, 0, 0, 0, 0);
  long err = 0;
  if ((r = raw_syscall(SYS_setsid, 0, 0, 0, 0)) < 0) err = r;
  if (!err && (r = raw_syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGUSR1, 0, 0)) < 0) err = r;
  if (!err && (r = raw_syscall(SYS_prctl, PR_SET_CHILD_SUBREAPER, 1, 0, 0)) < 0) err = r;
  if (!err && raw_syscall(SYS_getppid, 0, 0, 0, 0) != a->parent_pid) err = -ESRCH;
  // The command's parent is this process: its own checks (getppid, parent-death signal) are against us.
  a->parent_pid = self;
  pid_t cmd = 0;
  if (!err) {
    r = corral_clone(CLONE_VM | SIGCHLD, a->cmd_stack, child_main_async, a);  // a->cmd_stack: its top
    if (r < 0) err = r;
    else cmd = (pid_t)r;
  }
  // Tell the spawning thread (it waits on cmd_pid) the command's pid, or why there is none.
  __atomic_store_n(&a->cmd_pid, err ? (int32_t)err : (int32_t)cmd, __ATOMIC_RELEASE);
  raw_syscall(SYS_futex, (long)&a->cmd_pid, FUTEX_WAKE_PRIVATE, 1, 0);
  if (err) for (;;) raw_syscall(SYS_exit_group, 127, 0, 0, 0);
  // It started with a copy of all our fds (clients' sockets, other children's pipes): holding them would keep them
  // open after we close them. The command has its own copy of what it needs.
  if (raw_syscall(SYS_close_range, 0, (long)~0U, 0, 0) < 0) {
    for (unsigned int fd = 0; fd < a->close_from_max; fd++) raw_syscall(SYS_close, fd, 0, 0, 0);
  }

  // Every signal stays blocked (as the spawning thread left them): SIGCHLD and SIGUSR1 are taken here.
  const unsigned long wanted = (1UL << (SIGCHLD - 1)) | (1UL << (SIGUSR1 - 1));
  int code = 127, signo = 0;
  for (int done = 0; !done;) {
    r = raw_syscall(SYS_rt_sigtimedwait, (long)&wanted, 0, 0, sizeof(unsigned long));
    if (r == SIGUSR1) break;  // the server is gone: nobody to report to
    for (;;) {
      int status = 0;
      r = raw_syscall(SYS_wait4, -1, (long)&status, WNOHANG, 0);
      if (r <= 0) break;
      if (r == cmd) {
        if (WIFEXITED(status)) code = WEXITSTATUS(status);
        else signo = WTERMSIG(status);
        done = 1;
      }
    }
  }
  sup_kill_all(self, cmd);
  if (signo != 0) {
    switch (signo) {
      case SIGQUIT: case SIGILL: case SIGTRAP: case SIGABRT: case SIGBUS: case SIGFPE: case SIGSEGV:
      case SIGXCPU: case SIGXFSZ: case SIGSYS:
        // A core-dumping signal would dump our memory, which is the server's: report it as the shell does.
        for (;;) raw_syscall(SYS_exit_group, 128 + signo, 0, 0, 0);
      default: {
        unsigned long one = signo <= 64 ? 1UL << (signo - 1) : 0;
        raw_syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&one, 0, sizeof(unsigned long));
        raw_syscall(SYS_kill, self, signo, 0, 0);
        for (;;) raw_syscall(SYS_exit_group, 128 + signo, 0, 0, 0);
      }
    }
  }
  for (;;) raw_syscall(SYS_exit_group, code, 0, 0, 0);
  return 0;
}
#endif

// ---------------------------------------------------------------------------------------------------------------
// Per-environment state and exit watching.

struct watched;
struct pending_exec;
struct exit_watch;

#define STACK_CACHE 32

struct addon_state {
  napi_env env;
  napi_ref exit_handler;
  napi_async_context async_ctx;
  uv_loop_t *loop;
  struct reactor reactor;        // our children's pidfds and (pipes.c) their output pipes
  struct watched *head;
  struct pending_exec *pending;  // async mode: children that may still run in our memory
  struct exit_watch *watches;    // watchExit: processes of others
  void *stacks[STACK_CACHE];     // free child stacks
  int nstacks;
  int devnull;
  int self_pidfd;  // a pidfd of this process for newPidNs children (opened on first use), or -1
  // The spawning thread runs as SCHED_BATCH from its first async spawn of a loop turn until the loop is about to
  // poll again (see batch_begin).
  uv_prepare_t batch_end;
  bool batch_ready;   // batch_end initialised
  bool batch_active;  // the thread is SCHED_BATCH now, by our doing
};

struct watched {
  struct reactor_item item;  // first: the reactor hands us this pointer
  struct addon_state *st;
  int pidfd;
  pid_t pid;
  struct pending_exec *pe;  // async mode, until the child has left our memory
  struct watched *prev, *next;
};

// watchExit: a process we did not start, watched through a pidfd that we only poll (never waitid on).
struct exit_watch {
  uv_poll_t poll;
  struct addon_state *st;
  int pidfd;
  napi_ref cb;
  struct exit_watch *prev, *next;
};

// Everything a child started in async mode may use until it has exec'd or exited.
struct pending_exec {
  // CLONE_CHILD_CLEARTID: non-zero until the kernel zeroes it when the child execs or exits (mm_release).
  volatile pid_t ctid;
  struct addon_state *st;
  struct watched *w;  // the child's exit watch, while it exists
  void *stack;
  void *cmd_stack;  // supervise: the command's stack
  char *file, *cwd;
  char **argv, **envp;
  struct child_args a;
  struct pending_exec *prev, *next;
};

static void batch_finish(struct addon_state *st);

static void unlink_watched(struct watched *w) {
  if (w->prev) w->prev->next = w->next;
  else if (w->st) w->st->head = w->next;
  if (w->next) w->next->prev = w->prev;
  w->prev = w->next = NULL;
}

static void free_handle_data(uv_handle_t *h) { free(h->data); }

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

static void release_pending(struct pending_exec *pe);

static void free_watched(struct reactor_item *it) { free(it); }

// The child's pidfd is readable: it has terminated. Reap it and report the exit to JS.
static void on_pidfd(struct reactor_item *it, uint32_t events) {
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

static void free_string_array(char **v) {
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
static void free_pending(struct pending_exec *pe) {
  put_stack(pe->st, pe->stack);
  put_stack(pe->st, pe->cmd_stack);
  free(pe->file);
  free(pe->cwd);
  free_string_array(pe->argv);
  free_string_array(pe->envp);
  free(pe);
}

static void unlink_pending(struct pending_exec *pe) {
  if (pe->prev) pe->prev->next = pe->next;
  else if (pe->st) pe->st->pending = pe->next;
  if (pe->next) pe->next->prev = pe->prev;
  pe->prev = pe->next = NULL;
}

// The child has left our memory (exec'd or exited): its stack and arguments are ours again.
static void release_pending(struct pending_exec *pe) {
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

static void cleanup_state(void *arg) {
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

static void finalize_state(napi_env env, void *data, void *hint) {
  (void)hint;
  struct addon_state *st = data;
  if (st->exit_handler) napi_delete_reference(env, st->exit_handler);
  if (st->async_ctx) napi_async_destroy(env, st->async_ctx);
  free(st);
}

// ---------------------------------------------------------------------------------------------------------------
// JS entry points.

static napi_value throw_errno(napi_env env, int err) { return corral_throw_errno(env, err, NULL); }

// Reads a JS string into a fresh malloc'd buffer.
static char *get_string(napi_env env, napi_value v) {
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
static char **get_string_array(napi_env env, napi_value arr) {
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

// A new SCHED_OTHER child usually preempts its busy parent at once (EEVDF gives it the earlier deadline), and on a
// loaded machine the event loop then waits its turn among every runnable process: measured ~250 us of wall time per
// clone with 64 children starting at once on 2 cores. A SCHED_BATCH task is never preempted by a child's wake-up,
// so children are cloned while this thread is SCHED_BATCH; each child switches back to SCHED_OTHER itself before
// exec. Switching policy costs about as much as the preemption (the switch yields to runnable tasks), so it happens
// once per loop turn, not per spawn: the first spawn of a turn switches to SCHED_BATCH and a prepare handle (run when
// the loop is about to poll again) switches back.
// false: never SCHED_BATCH (the CORRAL_NO_BATCH switch; setSwitches).
static bool batch_allowed = true;

static void batch_finish(struct addon_state *st) {
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
  batch_allowed = batch;
  corral_pipes_allow_simd(simd);
  return NULL;
}

static napi_value js_watchdog_pid(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value v;
  napi_create_int32(env, watchdog_pid(), &v);
  return v;
}

static __thread char *vfork_stack;


static napi_value js_spawn(napi_env env, napi_callback_info info) {
  size_t argc = 13;
  napi_value args[13];
  struct addon_state *st;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 5) {
    napi_throw_type_error(env, NULL,
                          "spawn(file, argv, env, cwd, fds, waitExec, newPidNs, freshKeyring, cgroupFds, cgroupDirFd, "
                          "confine, nprocMax, supervise) expects 5 to 13 arguments");
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
  if (!wait_exec && (err = precheck(pe->file, pe->cwd)) != 0) goto fail;

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

#ifdef HAVE_RAW_SYSCALL
static void fill_errtext(void) {
  for (int e = 1; e < 256; e++) {
    char buf[256];
    const char *m = strerror_r(e, buf, sizeof buf);
    errtext[e] = strdup(m);
  }
}
#endif

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
  pthread_once(&once, fill_errtext);
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
  return exports;
}

