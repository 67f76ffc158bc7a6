// corral-sandbox-exec: the first program of a sandbox launch that the native spawner does not start itself (a
// terminal, through node-pty's fork; the child_process fallback). Both close nothing and cannot change a child's
// keyring, so this does it before bwrap (or, for the Landlock backend, the command itself) runs:
//
//   corral-sandbox-exec [--fd N]... [--landlock FD --seccomp HEX [--landlock-flags F] [--net-notify FD]] [--supervise PID]
//                       -- PROGRAM [ARG]...
//
//   1. joins a fresh anonymous session keyring: the sandbox does not possess the server's session keyring, so
//      nothing in it is visible or readable there (the seccomp filter denies the keyring calls as well);
//   2. moves the listed fds to 3, 4, ... in that order, and closes every other fd above 2, whatever its flags;
//   3. with --landlock: confines itself as the native spawner's child does (src/platform/native/confine.c): no new
//      privileges, no capabilities, the Landlock ruleset at fd FD (the last of the moved fds of 2; closed
//      afterwards), then the seccomp program HEX (struct sock_filter[] as hex, ~1 KB: no secret, no fd needed);
//   4. with --supervise PID (PID: the server, this process's parent): the command runs under a supervisor that kills
//      everything it started once it has ended, been killed, or the server has died (supervise.c), and only the
//      command confines itself (3 happens in it);
//   5. execs PROGRAM (an absolute path; no PATH search), with argv[0] NAME when given --argv0 NAME (the in-sandbox
//      exec shim of a bwrap without --argv0: bwrap runs this, then it execs the command under the arg0 asked for).
// Any failure prints "corral-sandbox-exec: ..." (or "corral: cannot confine the sandbox ...") on stderr and exits
// 127: the sandbox never starts without these.

#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "confine.h"
#include "supervise.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#define KEYCTL_JOIN_SESSION_KEYRING 1
#define MAX_FDS 16

static void die(const char *what, const char *arg) {
  fprintf(stderr, "corral-sandbox-exec: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(errno));
  _exit(127);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// HEX (two digits per byte) into the confinement's filter; false when malformed or too long.
static bool parse_filter(const char *hex, struct corral_confinement *c) {
  size_t len = strlen(hex);
  if (len == 0 || len % (2 * sizeof(struct sock_filter)) != 0 ||
      len / (2 * sizeof(struct sock_filter)) > CORRAL_CONFINE_MAX_INSNS)
    return false;
  unsigned char *out = (unsigned char *)c->filter;
  for (size_t k = 0; k < len; k += 2) {
    int hi = hexval(hex[k]), lo = hexval(hex[k + 1]);
    if (hi < 0 || lo < 0) return false;
    out[k / 2] = (unsigned char)(hi << 4 | lo);
  }
  c->filter_len = (uint32_t)(len / (2 * sizeof(struct sock_filter)));
  return true;
}

static bool parse_number(const char *s, long max, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < 0 || v > max) return false;
  *out = v;
  return true;
}

static struct corral_confinement confinement;

int main(int argc, char **argv) {
  int src[MAX_FDS];
  int n = 0;
  int i = 1;
  long landlock_fd = -1, flags = 0, server = -1, net_notify = -1;
  const char *filter = NULL;
  const char *argv0 = NULL;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    long v;
    const char *opt = argv[i];
    const char *arg = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = arg != NULL;
    if (ok && strcmp(opt, "--fd") == 0) {
      ok = n < MAX_FDS && parse_number(arg, 1 << 20, &v);
      if (ok) src[n++] = (int)v;
    } else if (ok && strcmp(opt, "--landlock") == 0) {
      ok = parse_number(arg, 1 << 20, &landlock_fd);
    } else if (ok && strcmp(opt, "--landlock-flags") == 0) {
      ok = parse_number(arg, 0xffff, &flags);
    } else if (ok && strcmp(opt, "--supervise") == 0) {
      ok = parse_number(arg, 1 << 30, &server) && server > 0;
    } else if (ok && strcmp(opt, "--seccomp") == 0) {
      filter = arg;
    } else if (ok && strcmp(opt, "--net-notify") == 0) {
      ok = parse_number(arg, 1 << 20, &net_notify);
    } else if (ok && strcmp(opt, "--argv0") == 0) {
      argv0 = arg;
    } else {
      ok = false;
    }
    if (!ok) {
      errno = EINVAL;
      die("usage: corral-sandbox-exec [--fd N]... [--landlock FD --seccomp HEX] [--net-notify FD] [--supervise PID] "
          "[--argv0 NAME] -- PROGRAM [ARG]...; "
          "bad argument",
          opt);
    }
    i++;
  }
  if ((landlock_fd >= 0) != (filter != NULL)) {
    errno = EINVAL;
    die("--landlock and --seccomp go together", NULL);
  }
  if (filter) {
    if (n == 0 || landlock_fd != 2 + n || !parse_filter(filter, &confinement)) {
      errno = EINVAL;
      die("--landlock must name the last moved fd and --seccomp a whole BPF program in hex", NULL);
    }
    confinement.active = 1;
    confinement.ruleset_fd = (int)landlock_fd;
    confinement.restrict_flags = (uint32_t)flags;
    // --net-notify FD: the moved fd just before the ruleset (netnotify.c's channel), closed once the listener is sent.
    if (net_notify >= 0) {
      if (n < 2 || net_notify != 1 + n) {
        errno = EINVAL;
        die("--net-notify must name the moved fd just before the --landlock one", NULL);
      }
      confinement.net_notify_chan = (int)net_notify;
    }
  } else if (net_notify >= 0 && (n != 1 || net_notify != 3)) {
    // Without --landlock (inside bwrap, transparent TCP): only the supervision filter, its channel the one moved fd.
    errno = EINVAL;
    die("--net-notify needs --landlock, or without it must name the one moved fd, 3", NULL);
  }
  if (i + 1 >= argc || argv[i + 1][0] != '/') {
    errno = EINVAL;
    die("expected -- and an absolute program path", NULL);
  }
  char **prog = argv + i + 1;

  // EPERM/ENOSYS: keyrings are denied to this process (a container's seccomp profile): no keyring to leave behind.
  if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL, 0, 0, 0) < 0 && errno != ENOSYS && errno != EPERM)
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
  if (server > 0 && corral_supervise_fork((pid_t)server) < 0) _exit(127);  // it said why
  if (confinement.active) {
    if (corral_confine_self(&confinement) < 0) _exit(127);  // it said why
    top--;  // the ruleset (the last moved fd) is closed with the rest below: it is never passed on
    if (net_notify >= 0) top--;  // so is the supervisor's channel (already closed by the confinement)
  } else if (net_notify >= 0) {
    if (corral_net_notify_self(3) < 0) _exit(127);  // it said why; the channel (fd 3) is closed by it
    top = 3;  // nothing else was moved
  }
  if (syscall(SYS_close_range, (unsigned int)top, ~0U, 0) < 0) {
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = top; fd < (max > 0 && max < 1 << 20 ? max : 65536); fd++) close((int)fd);
  }
  const char *path = prog[0];
  if (argv0) prog[0] = (char *)argv0;
  execv(path, prog);
  die("cannot execute", path);
  return 127;
}
