// The child side of the native spawner: see spawn_child.h and, for the modes, spawn.c's header comment.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "spawn_child.h"

#ifndef KEYCTL_JOIN_SESSION_KEYRING
#define KEYCTL_JOIN_SESSION_KEYRING 1
#endif

// vfork mode: the parent thread is suspended until execve or _exit, so plain libc calls are safe here (errno lands in
// the suspended thread's TLS).
static void child_fail(struct child_args *a, int err) {
  a->err = err ? err : EINVAL;
  _exit(127);
}

int child_main_vfork(void *p) {
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

#ifdef HAVE_RAW_SYSCALL
// corral_clone3(args, size, fn, arg) and corral_clone(flags, stack, fn, arg): the system call, then in the child
// fn(arg) on its new stack and an exit with its result (there is no caller to return to). One body for both; only
// the system call's setup differs.
#if defined(__x86_64__)
#define CLONE_TRAMPOLINE(name, setup) \
  __asm__(".text\n"                   \
          ".globl " name "\n"         \
          ".hidden " name "\n"        \
          ".type " name ",@function\n" name ":\n" \
          "  mov %rdx, %r8\n"         \
          "  mov %rcx, %r9\n" setup   \
          "  syscall\n"               \
          "  test %rax, %rax\n"       \
          "  jz 1f\n"                 \
          "  ret\n"                   \
          "1:\n"                      \
          "  xor %ebp, %ebp\n"        \
          "  mov %r9, %rdi\n"         \
          "  call *%r8\n"             \
          "  mov %eax, %edi\n"        \
          "  mov $60, %eax\n"         \
          "  syscall\n"               \
          "  hlt\n"                   \
          ".size " name ", .-" name "\n");
CLONE_TRAMPOLINE("corral_clone3", "  mov $435, %eax\n")
CLONE_TRAMPOLINE("corral_clone", "  xor %edx, %edx\n  xor %r10d, %r10d\n  mov $56, %eax\n")
#elif defined(__aarch64__)
#define CLONE_TRAMPOLINE(name, setup) \
  __asm__(".text\n"                   \
          ".globl " name "\n"         \
          ".hidden " name "\n"        \
          ".type " name ",%function\n" name ":\n" \
          "  mov x10, x2\n"           \
          "  mov x11, x3\n" setup     \
          "  svc #0\n"                \
          "  cbz x0, 1f\n"            \
          "  ret\n"                   \
          "1:\n"                      \
          "  mov x29, xzr\n"          \
          "  mov x0, x11\n"           \
          "  blr x10\n"               \
          "  mov x8, #93\n"           \
          "  svc #0\n"                \
          "  brk #0\n"                \
          ".size " name ", .-" name "\n");
CLONE_TRAMPOLINE("corral_clone3", "  mov x8, #435\n")
CLONE_TRAMPOLINE("corral_clone", "  mov x2, xzr\n  mov x3, xzr\n  mov x4, xzr\n  mov x8, #220\n")
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

const struct kernel_sigaction corral_k_dfl;  // all zero (see spawn_child.h)
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

void child_reset_inherited(const struct child_args *a) {
  for (long s = 1; s <= 64; s++) {
    if (s == SIGKILL || s == SIGSTOP) continue;
    raw_syscall(SYS_rt_sigaction, s, (long)&corral_k_dfl, 0, sizeof(unsigned long));
  }
  if (a->restore_policy >= 0) {
    static const struct sched_param zero_param;
    raw_syscall(SYS_sched_setscheduler, 0, a->restore_policy, (long)&zero_param, 0);
  }
}

int child_main_async(void *p) {
  struct child_args *a = p;
  long r;
  child_reset_inherited(a);
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

void corral_child_errtext_init(void) {
  for (int e = 1; e < 256; e++) {
    char buf[256];
    const char *m = strerror_r(e, buf, sizeof buf);
    errtext[e] = strdup(m);
  }
}
#endif
