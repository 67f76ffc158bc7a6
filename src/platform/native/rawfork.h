// A raw fork for helpers that must enter another process's namespaces (netns.c, sandbox.c): clone(2) with SIGCHLD
// only, so no atfork handler runs, and every signal blocked across it, so the child never runs a handler of ours.
#ifndef CORRAL_RAWFORK_H
#define CORRAL_RAWFORK_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

// Returns 0 in the child (signals still blocked: it makes system calls only and _exits), the pid in the parent (its
// mask restored), or -1 there with *fork_errno set.
static inline long corral_raw_fork(int *fork_errno) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  long child = syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
  if (child == 0) return 0;
  *fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return child;
}

// Waits for a raw-forked child, through EINTR.
static inline void corral_reap(long child) {
  while (waitpid((pid_t)child, NULL, 0) < 0 && errno == EINTR) {
  }
}

#endif
