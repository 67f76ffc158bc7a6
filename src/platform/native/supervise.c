// The launcher's supervisor (corral-sandbox-exec --supervise, see launcher.c): what a Landlock command started through
// the launcher (a terminal, through node-pty; the native spawner in vfork mode; the child_process fallback) runs
// under, so that nothing it started outlives it, as in a bubblewrap sandbox's pid namespace. The addon's own
// supervisor (spawn.c supervisor_main) does the same for pipe-mode starts in async mode; this one is plain libc and
// works on every architecture.
//
// Three processes, so that every group kill the server sends keeps its meaning:
//   P  the launcher itself, the process the server started and knows (its pid is the one process/terminate and
//      process/signal kill as a group, node-pty's session leader with the terminal): PR_SET_PDEATHSIG(SIGKILL) towards
//      the server; blocks every signal, holds no fd, waits for S and exits as it did (the command's status);
//   S  the supervisor, P's child, in a process group of its own (no group kill of P reaches it): a child subreaper
//      (PR_SET_CHILD_SUBREAPER: every orphaned descendant of the command becomes its child, whatever session or group
//      it moved to), PR_SET_PDEATHSIG(SIGUSR1) towards P; holds no fd;
//   C  the command, S's child, back in P's process group (the terminal's foreground group: Ctrl-C, process/signal and
//      process/terminate reach it with P), PR_SET_PDEATHSIG(SIGKILL) towards S; it confines itself and execs.
// When C has terminated (its exit, a group kill), or P has (process/terminate's SIGKILL, the server's death through
// P's parent-death signal or the group watchdog), S SIGKILLs every child it has and reaps them, again and again as
// their orphans come to it, until it has none; then it exits as C did. Only C is confined: the command can signal
// neither P nor S (Landlock's signal scope, ABI 6) and ptrace neither.

#define _GNU_SOURCE
#include "supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

static void say(const char *what) {
  fprintf(stderr, "corral-sandbox-exec: cannot supervise the command: %s: %s\n", what, strerror(errno));
}

static void close_all(void) {
  if (syscall(SYS_close_range, 0U, ~0U, 0) < 0) {
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = 0; fd < (max > 0 && max < 1 << 20 ? max : 65536); fd++) close((int)fd);
  }
}

// Exits with the wait status `st`: the same code, or killed by the same signal (without a core file of ours).
static void exit_as(int st) {
  if (WIFEXITED(st)) _exit(WEXITSTATUS(st));
  int sig = WIFSIGNALED(st) ? WTERMSIG(st) : SIGKILL;
  struct rlimit none = {0, 0};
  setrlimit(RLIMIT_CORE, &none);
  signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  kill(getpid(), sig);
  sigprocmask(SIG_UNBLOCK, &one, NULL);
  _exit(128 + sig);
}

// SIGKILLs every pid listed in `path` (/proc/self/task/<tid>/children: our children).
static void kill_listed(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096];
  long pid = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        pid = pid * 10 + (buf[i] - '0');
      } else {
        if (pid > 1) kill((pid_t)pid, SIGKILL);
        pid = 0;
      }
    }
  }
  if (pid > 1) kill((pid_t)pid, SIGKILL);
  close(fd);
}

// S: waits for the command (or P's death), then kills and reaps every descendant; returns the command's status.
static int supervise(pid_t cmd, const char *children) {
  sigset_t wanted;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGCHLD);
  sigaddset(&wanted, SIGUSR1);
  int status = 127 << 8;
  for (int done = 0; !done;) {
    int sig = sigwaitinfo(&wanted, NULL);
    if (sig == SIGUSR1) break;  // P is gone: nobody to report to
    int st;
    pid_t r;
    while ((r = waitpid(-1, &st, WNOHANG)) > 0) {
      if (r == cmd) {
        status = st;
        done = 1;
      }
    }
  }
  for (;;) {
    kill_listed(children);
    if (waitpid(-1, NULL, 0) < 0 && errno == ECHILD) return status;
  }
}

int corral_supervise_fork(pid_t server) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) {
    say("PR_SET_PDEATHSIG");
    return -1;
  }
  if (getppid() != server) {
    errno = ESRCH;
    say("the server is gone");
    return -1;
  }
  pid_t group = getpgrp();
  pid_t p = getpid();
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid_t s = fork();
  if (s < 0) {
    say("fork");
    return -1;
  }
  if (s > 0) {
    // P: nothing of the command's (its fds, its terminal) is held here; the status of S is the command's.
    close_all();
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    int st;
    while (waitpid(s, &st, 0) < 0) {
      if (errno != EINTR) _exit(127);
    }
    exit_as(st);
  }
  // S
  char children[64];
  snprintf(children, sizeof children, "/proc/self/task/%d/children", (int)getpid());
  if (setpgid(0, 0) < 0) {
    say("setpgid");
    _exit(127);
  }
  if (prctl(PR_SET_PDEATHSIG, SIGUSR1) < 0 || getppid() != p) _exit(127);  // P is gone: nothing was started
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
    say("PR_SET_CHILD_SUBREAPER");
    _exit(127);
  }
  if (access(children, R_OK) < 0) {
    say(children);  // CONFIG_PROC_CHILDREN: without it nothing would find the command's descendants
    _exit(127);
  }
  pid_t self = getpid();
  pid_t c = fork();
  if (c < 0) {
    say("fork");
    _exit(127);
  }
  if (c == 0) {
    // C: dies with S; back in P's group (the terminal's foreground group); signals as the launcher got them.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != self) _exit(127);
    if (setpgid(0, group) < 0) {
      say("setpgid");
      _exit(127);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return 0;
  }
  close_all();
  struct rlimit none = {0, 0};
  setrlimit(RLIMIT_CORE, &none);
  exit_as(supervise(c, children));
  return -1;
}
