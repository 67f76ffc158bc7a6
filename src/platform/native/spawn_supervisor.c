// The addon's supervisor of a Landlock command no cgroup holds (pipe mode, async mode): see below. The launcher has its
// own for every other way a command starts (supervise.c).
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spawn_child.h"
#include "watchdog.h"

#ifdef HAVE_RAW_SYSCALL
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

int supervisor_main(void *p) {
  struct child_args *a = p;
  long r;
  child_reset_inherited(a);
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
