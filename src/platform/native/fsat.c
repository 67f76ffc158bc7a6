// fd-relative filesystem calls for fs/* requests that carry a sandbox context (Linux; part of corral_spawn.node).
//
// Checking a path against the policy and then using it by name is a race: a sandboxed process can swap a directory
// for a symlink to anywhere between the two (renameat2 RENAME_EXCHANGE). The server instead walks every path one
// component at a time from an fd of "/", opening each component with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS) and O_NOFOLLOW relative to its parent's fd, and decides on what it opened (src/server/
// fsConfined.ts); a symlink is never followed by the kernel, only read (readlinkat on the link's own O_PATH fd) and
// walked again by the server. Everything it then does is relative to those fds (mkdirat, unlinkat, symlinkat,
// getdents64 of the opened directory, statx of the opened fd).
//
// Every call takes single path components only (no "/", not "." or "..", no NUL): the walk is the caller's, and a
// name can never reach further than one directory below its fd. Calls return -errno instead of throwing: a missing
// path is routine in a walk, and an exception per ENOENT costs more than the syscall.
//
// JS interface (see src/platform/confinedFs.ts):
//   fsProbe() -> 0 | errno            whether openat2 works here (ENOSYS before Linux 5.6, EPERM under some seccomp)
//   fsOpenRoot() -> fd | -errno       O_PATH fd of "/"
//   fsOpenAt(dirfd, name, flags, mode) -> fd | -errno
//                                     openat2 with the RESOLVE_* flags above and O_NOFOLLOW | O_CLOEXEC added:
//                                     O_PATH opens a symlink itself, anything else gets ELOOP for a symlink
//   fsStat(fd) -> [ident, mode, size, mtimeMs, birthtimeMs, nlink, uid] | -errno
//                                     statx of the fd itself; ident is "dev:ino", birthtimeMs 0 when unknown
//   fsDup(fd) -> fd | -errno          a close-on-exec duplicate
//   fsReadlink(fd) -> string | -errno the target of the symlink an O_PATH fd refers to
//   fsMkdirAt(dirfd, name, mode) -> 0 | -errno
//   fsUnlinkAt(dirfd, name, isDir) -> 0 | -errno
//   fsSymlinkAt(target, dirfd, name) -> 0 | -errno
//   fsReadDir(fd, max) -> [name0, type0, name1, type1, ...] | -errno
//                                     the entries (d_type values) of the directory fd refers to, at most max + 1 of
//                                     them (so that the caller can tell that there are more than max)

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"
#include "fsat.h"

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

#define RESOLVE_CONFINED (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

static int openat2_confined(int dirfd, const char *name, int flags, mode_t mode) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC);
  // The kernel rejects a mode with flags that create nothing.
  if (flags & (O_CREAT | O_TMPFILE)) how.mode = mode & 07777;
  how.resolve = RESOLVE_CONFINED;
  for (int tries = 0;; tries++) {
    long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof how);
    if (fd >= 0) return (int)fd;
    // EAGAIN: a concurrent rename or mount made the kernel give up on a RESOLVE_BENEATH lookup; retry a few times.
    if (errno == EINTR || (errno == EAGAIN && tries < 16)) continue;
    return -errno;
  }
}

static napi_value num(napi_env env, double v) {
  napi_value r;
  napi_create_double(env, v, &r);
  return r;
}

static int get_int(napi_env env, napi_value v, int32_t *out) {
  return napi_get_value_int32(env, v, out) == napi_ok ? 0 : EINVAL;
}

// Copies a JS string argument into buf (size bytes). EINVAL for a non-string or an embedded NUL, ENAMETOOLONG when it
// does not fit.
static int get_str(napi_env env, napi_value v, char *buf, size_t size) {
  size_t len;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) return EINVAL;
  if (len + 1 > size) return ENAMETOOLONG;
  if (napi_get_value_string_utf8(env, v, buf, size, &len) != napi_ok) return EINVAL;
  if (strlen(buf) != len) return EINVAL;
  return 0;
}

// One path component: not empty, no "/", not "." or "..".
static int get_name(napi_env env, napi_value v, char *buf, size_t size) {
  int e = get_str(env, v, buf, size);
  if (e) return e;
  if (buf[0] == '\0' || strchr(buf, '/') || strcmp(buf, ".") == 0 || strcmp(buf, "..") == 0) return EINVAL;
  return 0;
}

#define ARGS(n)                                                    \
  size_t argc = (n);                                               \
  napi_value argv[(n) > 0 ? (n) : 1];                              \
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);            \
  if (argc < (n)) return num(env, -EINVAL)

static napi_value js_probe(napi_env env, napi_callback_info info) {
  int fd = openat2_confined(AT_FDCWD, ".", O_PATH | O_DIRECTORY, 0);
  if (fd < 0) return num(env, -fd);
  close(fd);
  return num(env, 0);
}

static napi_value js_open_root(napi_env env, napi_callback_info info) {
  int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  return num(env, fd >= 0 ? fd : -errno);
}

static napi_value js_open_at(napi_env env, napi_callback_info info) {
  ARGS(4);
  int32_t dirfd, flags, mode;
  char name[NAME_MAX + 1];
  int e = get_int(env, argv[0], &dirfd);
  if (!e) e = get_name(env, argv[1], name, sizeof name);
  if (!e) e = get_int(env, argv[2], &flags);
  if (!e) e = get_int(env, argv[3], &mode);
  if (e) return num(env, -e);
  return num(env, openat2_confined(dirfd, name, flags, (mode_t)mode));
}

static napi_value js_stat(napi_env env, napi_callback_info info) {
  ARGS(1);
  int32_t fd;
  if (get_int(env, argv[0], &fd)) return num(env, -EINVAL);
  struct statx sx;
  if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS | STATX_BTIME, &sx) != 0)
    return num(env, -errno);
  char ident[64];
  snprintf(ident, sizeof ident, "%u.%u:%llu", sx.stx_dev_major, sx.stx_dev_minor, (unsigned long long)sx.stx_ino);
  napi_value r, s;
  napi_create_array_with_length(env, 7, &r);
  napi_create_string_utf8(env, ident, NAPI_AUTO_LENGTH, &s);
  napi_set_element(env, r, 0, s);
  napi_set_element(env, r, 1, num(env, sx.stx_mode));
  napi_set_element(env, r, 2, num(env, (double)sx.stx_size));
  napi_set_element(env, r, 3, num(env, (double)sx.stx_mtime.tv_sec * 1e3 + sx.stx_mtime.tv_nsec / 1e6));
  double birth = (sx.stx_mask & STATX_BTIME) ? (double)sx.stx_btime.tv_sec * 1e3 + sx.stx_btime.tv_nsec / 1e6 : 0;
  napi_set_element(env, r, 4, num(env, birth));
  napi_set_element(env, r, 5, num(env, sx.stx_nlink));
  napi_set_element(env, r, 6, num(env, sx.stx_uid));
  return r;
}

static napi_value js_dup(napi_env env, napi_callback_info info) {
  ARGS(1);
  int32_t fd;
  if (get_int(env, argv[0], &fd)) return num(env, -EINVAL);
  int r = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  return num(env, r >= 0 ? r : -errno);
}

static napi_value js_readlink(napi_env env, napi_callback_info info) {
  ARGS(1);
  int32_t fd;
  if (get_int(env, argv[0], &fd)) return num(env, -EINVAL);
  char buf[PATH_MAX + 1];
  ssize_t n = readlinkat(fd, "", buf, sizeof buf);
  if (n < 0) return num(env, -errno);
  if ((size_t)n >= sizeof buf) return num(env, -ENAMETOOLONG);
  napi_value s;
  napi_create_string_utf8(env, buf, (size_t)n, &s);
  return s;
}

static napi_value js_mkdir_at(napi_env env, napi_callback_info info) {
  ARGS(3);
  int32_t dirfd, mode;
  char name[NAME_MAX + 1];
  int e = get_int(env, argv[0], &dirfd);
  if (!e) e = get_name(env, argv[1], name, sizeof name);
  if (!e) e = get_int(env, argv[2], &mode);
  if (e) return num(env, -e);
  return num(env, mkdirat(dirfd, name, (mode_t)mode & 07777) == 0 ? 0 : -errno);
}

static napi_value js_unlink_at(napi_env env, napi_callback_info info) {
  ARGS(3);
  int32_t dirfd;
  bool is_dir;
  char name[NAME_MAX + 1];
  int e = get_int(env, argv[0], &dirfd);
  if (!e) e = get_name(env, argv[1], name, sizeof name);
  if (!e && napi_get_value_bool(env, argv[2], &is_dir) != napi_ok) e = EINVAL;
  if (e) return num(env, -e);
  return num(env, unlinkat(dirfd, name, is_dir ? AT_REMOVEDIR : 0) == 0 ? 0 : -errno);
}

static napi_value js_symlink_at(napi_env env, napi_callback_info info) {
  ARGS(3);
  int32_t dirfd;
  char target[PATH_MAX + 1], name[NAME_MAX + 1];
  int e = get_str(env, argv[0], target, sizeof target);
  if (!e && target[0] == '\0') e = ENOENT;
  if (!e) e = get_int(env, argv[1], &dirfd);
  if (!e) e = get_name(env, argv[2], name, sizeof name);
  if (e) return num(env, -e);
  return num(env, symlinkat(target, dirfd, name) == 0 ? 0 : -errno);
}

struct linux_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

static napi_value js_read_dir(napi_env env, napi_callback_info info) {
  ARGS(2);
  int32_t fd, max;
  if (get_int(env, argv[0], &fd) || get_int(env, argv[1], &max) || max < 0) return num(env, -EINVAL);
  // The directory the (O_PATH) fd refers to, opened for reading: "." names that very directory, whatever its path
  // is by now.
  int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
  if (dfd < 0) return num(env, -errno);
  napi_value r;
  napi_create_array(env, &r);
  uint32_t k = 0;
  uint32_t limit = (uint32_t)max + 1;
  char buf[32768];
  int err = 0;
  while (k / 2 < limit) {
    long n = syscall(SYS_getdents64, dfd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    if (n == 0) break;
    for (long off = 0; off < n && k / 2 < limit;) {
      struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
      off += d->d_reclen;
      if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0) continue;
      napi_value s;
      napi_create_string_utf8(env, d->d_name, NAPI_AUTO_LENGTH, &s);
      napi_set_element(env, r, k++, s);
      napi_set_element(env, r, k++, num(env, d->d_type));
    }
  }
  close(dfd);
  if (err) return num(env, -err);
  return r;
}

napi_status corral_fsat_init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"fsProbe", NULL, js_probe, NULL, NULL, NULL, napi_default, NULL},
      {"fsOpenRoot", NULL, js_open_root, NULL, NULL, NULL, napi_default, NULL},
      {"fsOpenAt", NULL, js_open_at, NULL, NULL, NULL, napi_default, NULL},
      {"fsStat", NULL, js_stat, NULL, NULL, NULL, napi_default, NULL},
      {"fsDup", NULL, js_dup, NULL, NULL, NULL, napi_default, NULL},
      {"fsReadlink", NULL, js_readlink, NULL, NULL, NULL, napi_default, NULL},
      {"fsMkdirAt", NULL, js_mkdir_at, NULL, NULL, NULL, napi_default, NULL},
      {"fsUnlinkAt", NULL, js_unlink_at, NULL, NULL, NULL, napi_default, NULL},
      {"fsSymlinkAt", NULL, js_symlink_at, NULL, NULL, NULL, napi_default, NULL},
      {"fsReadDir", NULL, js_read_dir, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
