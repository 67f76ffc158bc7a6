// What the Linux sandbox needs from the kernel that Node cannot do (part of corral_spawn.node; see
// src/platform/sandbox.ts for the JS side).
//
//   sealFds()                  marks every fd >= 3 of this process close-on-exec (close_range CLOSE_RANGE_CLOEXEC,
//                              else a walk of /proc/self/fd). Also done once when the addon loads, so fds the server
//                              inherited from whoever started it never reach a child: node-pty's fork and
//                              child_process close nothing themselves, they rely on FD_CLOEXEC.
//   setInheritable(fd, bool)   clears (true) or sets (false) FD_CLOEXEC on one fd: to hand a pipe end to the one
//                              node-pty child that needs it (the launcher moves it into place and closes the rest).
//   pipe() -> [r, w]           an anonymous pipe, both ends O_CLOEXEC: the sandbox's setup channels (seccomp
//                              program, bwrap's info and block fds) are pipes, never files another sandbox could see.
//   pinSymlinks(pid, paths)    inside the mount namespace of `pid` (a sandbox that bwrap has set up and holds on its
//                              --block-fd), bind-mounts each symlink in `paths` onto itself, read-only. A mount point
//                              cannot be renamed, unlinked or replaced (EBUSY/EEXIST), so a protected name that is a
//                              symlink (.git -> elsewhere) keeps naming what it named. bwrap cannot do this: mount(2)
//                              follows a symlink at the target; open_tree + move_mount on O_PATH|O_NOFOLLOW fds do
//                              not. A short-lived helper process (a plain fork, as in netns.c) joins the user
//                              namespace that owns the sandbox's mount namespace and that mount namespace, makes the
//                              mounts and reports an errno; it runs only system calls.
//   holdMountTarget(lock, path) -> fd     a share of the missing protected name `path` (an empty placeholder
//   releaseMountTarget(fd, lock, path)    directory a read-only tmpfs is mounted on in a sandbox): every server of the
//                              user holds a shared flock on the lock file `lock` for as long as a sandbox of its own
//                              may use `path`, and the last one removes the placeholder. Removing it while another
//                              sandbox (of any server) has it mounted would detach that mount there and let that
//                              sandbox create the name. The lock files live in a directory no sandbox sees.
//   mountsChanged(fd) -> bool  whether the mount table behind `fd` (an open /proc/<pid>/mountinfo) changed since the
//                              last call on it, or since it was opened: poll() reports POLLPRI once per change of the
//                              mount namespace's event count (any mount, unmount, move, remount or propagation;
//                              fs/proc_namespace.c mounts_poll) and the call consumes it. true also when the poll
//                              fails (the caller then reads the table).

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <node_api.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "sandbox.h"
#include "rawfork.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOVE_MOUNT_T_EMPTY_PATH
#define MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#endif

#define MAX_PINS 64

struct kernel_mount_attr {
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};
#define K_MOUNT_ATTR_RDONLY 0x00000001
#define K_MOUNT_ATTR_NOSUID 0x00000002
#define K_MOUNT_ATTR_NODEV 0x00000004

void corral_seal_fds(unsigned int from) {
  if (syscall(SYS_close_range, from, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
  // Before Linux 5.11: every open fd, from the directory listing (its own fd is marked too, harmlessly).
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end;
    long fd = strtol(e->d_name, &end, 10);
    if (*end != '\0' || fd < (long)from) continue;
    int flags = fcntl((int)fd, F_GETFD);
    if (flags >= 0) fcntl((int)fd, F_SETFD, flags | FD_CLOEXEC);
  }
  closedir(d);
}

static napi_value js_seal_fds(napi_env env, napi_callback_info info) {
  corral_seal_fds(3);
  return NULL;
}

static napi_value js_set_inheritable(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  int32_t fd = -1;
  bool inheritable = false;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, args[0], &fd) != napi_ok || fd < 3 ||
      napi_get_value_bool(env, args[1], &inheritable) != napi_ok) {
    napi_throw_type_error(env, NULL, "setInheritable(fd: integer >= 3, inheritable: boolean)");
    return NULL;
  }
  int flags = fcntl(fd, F_GETFD);
  if (flags < 0 || fcntl(fd, F_SETFD, inheritable ? flags & ~FD_CLOEXEC : flags | FD_CLOEXEC) < 0)
    return corral_throw_errno(env, errno, "setInheritable");
  return NULL;
}

static napi_value js_pipe(napi_env env, napi_callback_info info) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return corral_throw_errno(env, errno, "pipe");
  napi_value result, v;
  napi_create_array_with_length(env, 2, &result);
  for (uint32_t i = 0; i < 2; i++) {
    napi_create_int32(env, p[i], &v);
    napi_set_element(env, result, i, v);
  }
  return result;
}

// The helper's work: returns 0, or an errno value with *failed the index of the path it concerns (-1: the namespaces).
static int pin_in(int userns, int mntns, int rootfd, char **paths, int n, int *failed) {
  *failed = -1;
  if (userns >= 0 && setns(userns, CLONE_NEWUSER) < 0) return errno;
  if (setns(mntns, CLONE_NEWNS) < 0) return errno;
  for (int i = 0; i < n; i++) {
    *failed = i;
    const char *rel = paths[i];
    while (*rel == '/') rel++;
    int link = openat(rootfd, rel, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (link < 0) return errno;
    struct stat st;
    if (fstatat(link, "", &st, AT_EMPTY_PATH) < 0) return errno;
    if (!S_ISLNK(st.st_mode)) return ENOLINK;  // replaced since the plan was made: refuse, never pin something else
    int tree = (int)syscall(SYS_open_tree, link, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    if (tree < 0) return errno;
    struct kernel_mount_attr attr = {.attr_set = K_MOUNT_ATTR_RDONLY | K_MOUNT_ATTR_NOSUID | K_MOUNT_ATTR_NODEV};
    syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr);  // best effort: a symlink is read-only anyway
    if (syscall(SYS_move_mount, tree, "", link, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) return errno;
  }
  *failed = -1;
  return 0;
}

static void free_paths(char **paths, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) free(paths[i]);
}

static napi_value js_pin_symlinks(napi_env env, napi_callback_info info) {
  int32_t pid;
  uint32_t n;
  napi_value list;
  if (!corral_pid_and_list(env, info, &pid, &list, &n, MAX_PINS,
                           "pinSymlinks(pid: positive integer, paths: 1..64 absolute paths)"))
    return NULL;
  char *paths[MAX_PINS] = {0};
  for (uint32_t i = 0; i < n; i++) {
    napi_value e;
    size_t len = 0;
    if (napi_get_element(env, list, i, &e) != napi_ok ||
        napi_get_value_string_utf8(env, e, NULL, 0, &len) != napi_ok || len == 0 || len > 4095 ||
        !(paths[i] = malloc(len + 1)) || napi_get_value_string_utf8(env, e, paths[i], len + 1, &len) != napi_ok ||
        paths[i][0] != '/') {
      free_paths(paths, n);
      napi_throw_type_error(env, NULL, "pinSymlinks: paths must be absolute path strings");
      return NULL;
    }
  }
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/ns/mnt", pid);
  int mntns = open(p, O_RDONLY | O_CLOEXEC);
  snprintf(p, sizeof p, "/proc/%d/root", pid);
  int rootfd = mntns < 0 ? -1 : open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
  int userns = -1;
  int e = mntns < 0 || rootfd < 0 ? errno : corral_owner_userns(mntns, &userns);
  int rp[2] = {-1, -1};
  if (e == 0 && pipe2(rp, O_CLOEXEC) < 0) e = errno;
  if (e != 0) {
    if (mntns >= 0) close(mntns);
    if (rootfd >= 0) close(rootfd);
    free_paths(paths, n);
    return corral_throw_errno(env, e, "pinSymlinks: open the sandbox's namespaces");
  }
  int fork_errno = 0;
  long child = corral_raw_fork(&fork_errno);
  if (child == 0) {
    int failed = -1;
    int result[2];
    result[0] = pin_in(userns, mntns, rootfd, paths, (int)n, &failed);
    result[1] = failed;
    ssize_t w;
    do w = write(rp[1], result, sizeof result);
    while (w < 0 && errno == EINTR);
    _exit(0);
  }
  close(rp[1]);
  close(mntns);
  close(rootfd);
  if (userns >= 0) close(userns);
  if (child < 0) {
    close(rp[0]);
    free_paths(paths, n);
    return corral_throw_errno(env, fork_errno, "pinSymlinks: fork");
  }
  int result[2] = {EPROTO, -1};
  ssize_t got;
  do got = read(rp[0], result, sizeof result);
  while (got < 0 && errno == EINTR);
  close(rp[0]);
  corral_reap(child);
  if (got != (ssize_t)sizeof result) result[0] = EPROTO;
  napi_value ret = NULL;
  if (result[0] != 0) {
    char what[240];
    if (result[1] >= 0 && result[1] < (int)n)
      snprintf(what, sizeof what, "pinSymlinks: %.200s", paths[result[1]]);
    else
      snprintf(what, sizeof what, "pinSymlinks: join the sandbox's mount namespace");
    corral_throw_errno(env, result[0], what);
  }
  free_paths(paths, n);
  return ret;
}

// The mode a placeholder is created with (what marks it as one; see resolve.ts, realFsProbe.kind).
#define PLACEHOLDER_MODE 0500

static bool same_file(int fd, const char *path) {
  struct stat a, b;
  return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static bool get_path(napi_env env, napi_value v, char *buf, size_t size) {
  size_t len = 0;
  return napi_get_value_string_utf8(env, v, buf, size, &len) == napi_ok && len > 0 && len < size - 1 && buf[0] == '/';
}

static napi_value js_hold_mount_target(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  char lock[4096], path[4096];
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 2 ||
      !get_path(env, args[0], lock, sizeof lock) || !get_path(env, args[1], path, sizeof path)) {
    napi_throw_type_error(env, NULL, "holdMountTarget(lockFile: absolute path, target: absolute path)");
    return NULL;
  }
  for (;;) {
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return corral_throw_errno(env, errno, "holdMountTarget: lock file");
    // Blocks only while another server removes the placeholder (an exclusive lock held for one rmdir).
    int r;
    do r = flock(fd, LOCK_SH);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
      int e = errno;
      close(fd);
      return corral_throw_errno(env, e, "holdMountTarget: flock");
    }
    if (!same_file(fd, lock)) {  // removed by the last user of the name meanwhile: take the new one
      close(fd);
      continue;
    }
    if (mkdir(path, PLACEHOLDER_MODE) < 0 && errno != EEXIST) {
      int e = errno;
      close(fd);
      return corral_throw_errno(env, e, "cannot create the mount point of a missing protected path");
    }
    napi_value v;
    napi_create_int32(env, fd, &v);
    return v;
  }
}

static napi_value js_release_mount_target(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value args[3];
  int32_t fd = -1;
  char lock[4096], path[4096];
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 3 ||
      napi_get_value_int32(env, args[0], &fd) != napi_ok || fd < 0 || !get_path(env, args[1], lock, sizeof lock) ||
      !get_path(env, args[2], path, sizeof path)) {
    napi_throw_type_error(env, NULL, "releaseMountTarget(fd, lockFile, target)");
    return NULL;
  }
  // Converting the shared lock is not atomic: another user may take a share meanwhile (then it is not ours to
  // remove), or be the last one and remove it (then the lock file is a new one).
  if (flock(fd, LOCK_EX | LOCK_NB) == 0 && same_file(fd, lock)) {
    struct stat st;
    // Only a placeholder of this user: the shares are per user, so another user's (shared by this user's sandboxes
    // too, see fsProbe.ts) may still be mounted in that user's sandboxes.
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == PLACEHOLDER_MODE &&
        st.st_uid == geteuid())
      rmdir(path);  // ENOTEMPTY: someone put something there on the host; it is theirs then
    unlink(lock);
  }
  close(fd);
  return NULL;
}

static napi_value js_mounts_changed(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value args[1];
  int32_t fd = -1;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_int32(env, args[0], &fd) != napi_ok || fd < 0) {
    napi_throw_type_error(env, NULL, "mountsChanged(fd)");
    return NULL;
  }
  struct pollfd p = {.fd = fd, .events = POLLPRI, .revents = 0};
  int r;
  do r = poll(&p, 1, 0);
  while (r < 0 && errno == EINTR);
  bool changed = r < 0 || (p.revents & (POLLPRI | POLLERR | POLLNVAL)) != 0;
  napi_value out;
  napi_get_boolean(env, changed, &out);
  return out;
}

napi_status corral_sandbox_init(napi_env env, napi_value exports) {
  static pthread_once_t sealed = PTHREAD_ONCE_INIT;
  pthread_once(&sealed, corral_seal_fds_at_load);
  napi_property_descriptor props[] = {
      {"sealFds", NULL, js_seal_fds, NULL, NULL, NULL, napi_default, NULL},
      {"setInheritable", NULL, js_set_inheritable, NULL, NULL, NULL, napi_default, NULL},
      {"pipe", NULL, js_pipe, NULL, NULL, NULL, napi_default, NULL},
      {"pinSymlinks", NULL, js_pin_symlinks, NULL, NULL, NULL, napi_default, NULL},
      {"holdMountTarget", NULL, js_hold_mount_target, NULL, NULL, NULL, napi_default, NULL},
      {"releaseMountTarget", NULL, js_release_mount_target, NULL, NULL, NULL, napi_default, NULL},
      {"mountsChanged", NULL, js_mounts_changed, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}

void corral_seal_fds_at_load(void) { corral_seal_fds(3); }
