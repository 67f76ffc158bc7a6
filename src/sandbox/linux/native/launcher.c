// corral-sandbox-exec: the first program of a sandbox launch that the native spawner does not start itself (a
// terminal, through node-pty's fork; the child_process fallback). Both close nothing and cannot change a child's
// keyring, so this does it before bwrap runs:
//
//   corral-sandbox-exec [--fd N]... -- PROGRAM [ARG]...
//
//   1. joins a fresh anonymous session keyring: the sandbox does not possess the server's session keyring, so
//      nothing in it is visible or readable there (the seccomp filter denies the keyring calls as well);
//   2. moves the listed fds to 3, 4, ... in that order, and closes every other fd above 2, whatever its flags;
//   3. execs PROGRAM (an absolute path; no PATH search).
// Any failure prints "corral-sandbox-exec: ..." on stderr and exits 127: the sandbox never starts without these.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#define KEYCTL_JOIN_SESSION_KEYRING 1
#define MAX_FDS 16

static void die(const char *what, const char *arg) {
  fprintf(stderr, "corral-sandbox-exec: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(errno));
  _exit(127);
}

int main(int argc, char **argv) {
  int src[MAX_FDS];
  int n = 0;
  int i = 1;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    char *end;
    long fd;
    if (strcmp(argv[i], "--fd") != 0 || i + 1 >= argc || n == MAX_FDS ||
        (fd = strtol(argv[i + 1], &end, 10)) < 0 || *end != '\0' || fd > 1 << 20) {
      errno = EINVAL;
      die("usage: corral-sandbox-exec [--fd N]... -- PROGRAM [ARG]...; bad argument", argv[i]);
    }
    src[n++] = (int)fd;
    i++;
  }
  if (i + 1 >= argc || argv[i + 1][0] != '/') {
    errno = EINVAL;
    die("expected -- and an absolute program path", NULL);
  }
  char **prog = argv + i + 1;

  if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL, 0, 0, 0) < 0 && errno != ENOSYS)
    die("cannot join a new session keyring", NULL);

  // Sources inside the target range [3, 3 + n) are moved above it first, so no placement overwrites one.
  int top = 3 + n;
  for (int k = 0; k < n; k++) {
    if (src[k] >= 3 && src[k] < top) {
      int moved = fcntl(src[k], F_DUPFD_CLOEXEC, top);
      if (moved < 0) die("cannot move fd", NULL);
      src[k] = moved;
    }
  }
  for (int k = 0; k < n; k++) {
    if (dup2(src[k], 3 + k) < 0) die("cannot place fd", NULL);
  }
  if (syscall(SYS_close_range, (unsigned int)top, ~0U, 0) < 0) {
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = top; fd < (max > 0 && max < 1 << 20 ? max : 65536); fd++) close((int)fd);
  }
  execv(prog[0], prog);
  die("cannot execute", prog[0]);
  return 127;
}
