// The child side of the native spawner (spawn.c): what a child cloned with CLONE_VM runs in the server's memory until
// it execs (spawn_child.c: vfork mode, async mode), and the supervisor of a Landlock command no cgroup holds
// (spawn_supervisor.c). The parent side (arguments, stacks, exit watching) is spawn.c; the N-API glue spawn_addon.c.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "confine.h"

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

int child_main_vfork(void *p);

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
// clone(2) the same way (no cgroup to give, and clone3 may be refused with ENOSYS, as container profiles do): the child
// runs fn(arg) on `stack` (its top) and exits with its result. No CLONE_SETTLS, no tids. Returns the pid or -errno.
long corral_clone(long flags, void *stack, int (*fn)(void *), void *arg);

// The kernel's struct sigaction (x86_64 and arm64 share this layout); all zero = SIG_DFL, no flags, empty mask.
struct kernel_sigaction {
  void *handler;
  unsigned long flags;
  void *restorer;
  unsigned long mask;
};
extern const struct kernel_sigaction corral_k_dfl;

// Async mode's child (exec errors on its stderr, exit 127) and the supervisor (spawn_supervisor.c): clone targets.
// Each first calls child_reset_inherited: every catchable signal back to its default disposition (the server's
// handlers are not theirs) and, when asked, the scheduling policy the server had (the clone starts as SCHED_BATCH).
void child_reset_inherited(const struct child_args *a);
int child_main_async(void *p);
int supervisor_main(void *p);
// Fills the strerror texts the async child writes (it may not call strerror): once, at load.
void corral_child_errtext_init(void);
#endif
