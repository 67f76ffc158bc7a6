// The filesystem watch behind sandbox planning's kept answers (src/platform/fsWatch.ts; its user:
// src/sandbox/fsQuiet.ts): one inotify instance with a watch on every directory a start's checks looked in, so that the
// next start learns with one read() whether anything in them changed since, instead of asking about every path again.
//
//   fsWatchOpen() -> fd                   inotify_init1(IN_NONBLOCK | IN_CLOEXEC).
//   fsWatchAdd(fd, dir) -> wd | -errno    a watch on the directory `dir` names (IN_ONLYDIR | IN_DONT_FOLLOW: a symlink
//                                         or any other non-directory at its last component fails with -ENOTDIR),
//                                         for changes of its entries and attributes (FSWATCH_MASK). Only on a
//                                         filesystem whose changes all pass through this kernel's VFS, where inotify
//                                         sees every one of them (local disk filesystems, tmpfs, overlayfs: see
//                                         local_fs); any other (NFS, FUSE, 9p, SMB, proc, sysfs, ...): -EXDEV.
//                                         The caller adds the watches of a path's directories from `/` down, each
//                                         after its parent's: a component replaced after its parent is watched is an
//                                         event of the parent.
//   fsWatchDrain(fd, max) -> null | -1 | [wd, mask, name, ...]
//                                         every pending event, read without blocking: null when there is none; the
//                                         triples of at most `max` events (name: the entry's name, or null for an
//                                         event of the directory itself or a name that is not valid UTF-8, which the
//                                         caller must take as a change of the whole directory); -1 when there were
//                                         more, or the kernel's queue overflowed (IN_Q_OVERFLOW): the caller forgets
//                                         everything then. The queue is drained either way.
//   fsWatchPending(fd, mountsFd) -> bits  one poll() on the watch and on an open /proc/self/mountinfo, waiting for
//                                         nothing: 1 when the watch has events to drain, 2 when the mount table changed
//                                         (consumed, as sandbox.c mountsChanged does), both on any error (the caller
//                                         then drains and takes the mounts as changed). A start at which nothing
//                                         changed learns that with this one system call.
//   fsRevalidate(path) -> errno            statx(path, AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC): a filesystem that caches
//                                         what its server says (FUSE for its attribute timeout, NFS) asks it again, so
//                                         that the lstat after this one tells what is there now; 0, or the errno (EIO:
//                                         FUSE found the inode's type changed and dropped it, and the next lookup is
//                                         fresh). On a local filesystem a plain statx.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <node_api.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common.h"
#include "fswatch.h"

// Entries created, removed or renamed; the attributes of the directory or of an entry (mode, owner, times set by hand,
// link count: IN_ATTRIB); the directory itself removed, renamed or unmounted (reported unasked, as IN_UNMOUNT and
// IN_IGNORED are). Not IN_MODIFY: a file's content, size and times are no answer the checks keep (fsQuiet.ts).
#define FSWATCH_MASK                                                                                                 \
  (IN_ATTRIB | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_MOVED_FROM | IN_MOVED_TO | IN_EXCL_UNLINK | \
   IN_ONLYDIR | IN_DONT_FOLLOW)

// Filesystems whose every change is made through this kernel's VFS, which reports it to inotify as it happens.
// Overlayfs: changes made through the overlay; a change written straight into a layer's directory by another mount
// (the host of a container) is not seen, as it is not seen by the overlay's own caches.
static bool local_fs(long type) {
  switch ((unsigned long)type) {
    case 0xEF53:      // ext2/3/4
    case 0x58465342:  // xfs
    case 0x9123683E:  // btrfs
    case 0x01021994:  // tmpfs (also devtmpfs, shmem)
    case 0x858458F6:  // ramfs
    case 0x794C7630:  // overlayfs
    case 0xF2F52010:  // f2fs
    case 0x2FC12FC1:  // zfs
    case 0xCA451A4E:  // bcachefs
      return true;
    default:
      return false;
  }
}

static napi_value js_fswatch_open(napi_env env, napi_callback_info info) {
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return corral_throw_errno(env, errno, "inotify_init1");
  napi_value out;
  napi_create_int32(env, fd, &out);
  return out;
}

static napi_value js_fswatch_add(napi_env env, napi_callback_info info) {
  size_t argc = 2, len = 0;
  napi_value args[2];
  int32_t fd = -1;
  char path[PATH_MAX];
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, args[0], &fd) != napi_ok || fd < 0 ||
      napi_get_value_string_utf8(env, args[1], path, sizeof path, &len) != napi_ok || len == 0 ||
      len >= sizeof path - 1 || path[0] != '/' || strlen(path) != len) {
    napi_throw_type_error(env, NULL, "fsWatchAdd(fd, dir: absolute path)");
    return NULL;
  }
  // The directory itself, never through a symlink at its end (statfs(2) would follow one: a dangling link would say
  // ENOENT, "nothing there", when the way goes on elsewhere).
  int32_t result;
  int dir = open(path, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    result = -errno;
  } else {
    struct statfs sf;
    if (fstatfs(dir, &sf) < 0) {
      result = -errno;
    } else if (!local_fs(sf.f_type)) {
      result = -EXDEV;
    } else {
      // The same path looked up again: were it replaced in between, that is an event of its watched parent.
      int wd = inotify_add_watch(fd, path, FSWATCH_MASK);
      result = wd < 0 ? -errno : wd;
    }
    close(dir);
  }
  napi_value out;
  napi_create_int32(env, result, &out);
  return out;
}

// Whether `s[0..n)` is valid UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF): only then does the name
// the caller gets equal the one its paths spell.
static bool valid_utf8(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    size_t k;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      k = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      k = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      k = 3, cp = c & 0x07;
    } else {
      return false;
    }
    for (size_t j = 1; j <= k; j++) {
      if (i + j >= n || (s[i + j] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + j] & 0x3F);
    }
    if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += k + 1;
  }
  return true;
}

static napi_value js_fswatch_drain(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  int32_t fd = -1, max = 0;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, args[0], &fd) != napi_ok || fd < 0 ||
      napi_get_value_int32(env, args[1], &max) != napi_ok || max < 1) {
    napi_throw_type_error(env, NULL, "fsWatchDrain(fd, max: positive integer)");
    return NULL;
  }
  // Never a read that waits: an fd of fsWatchOpen is non-blocking.
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || !(flags & O_NONBLOCK)) {
    napi_throw_type_error(env, NULL, "fsWatchDrain: fd is not a non-blocking descriptor (fsWatchOpen)");
    return NULL;
  }
  // Room for many events per read; a read returns whole events only.
  static _Thread_local char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
  napi_value out = NULL;
  uint32_t n = 0;
  bool overflow = false, any = false;
  for (;;) {
    ssize_t got = read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      // EAGAIN: drained. Any other error: the watch cannot vouch for anything, the caller starts over.
      if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) overflow = true;
      break;
    }
    any = true;
    const char *end = buf + got;
    for (const char *p = buf; p < end;) {
      // Whole events only, as inotify gives them; anything else (not an inotify fd) is taken as a lost event.
      const struct inotify_event *ev = (const struct inotify_event *)p;
      if ((size_t)(end - p) < sizeof *ev || ev->len > (size_t)(end - p) - sizeof *ev || (ev->len % sizeof(int)) != 0) {
        overflow = true;
        break;
      }
      p += sizeof *ev + ev->len;
      if (overflow) continue;
      if ((ev->mask & IN_Q_OVERFLOW) || ev->wd < 0 || n >= (uint32_t)max) {
        overflow = true;
        continue;
      }
      if (!out) napi_create_array(env, &out);
      napi_value wd, mask, name;
      napi_create_int32(env, ev->wd, &wd);
      napi_create_uint32(env, ev->mask, &mask);
      size_t len = ev->len ? strnlen(ev->name, ev->len) : 0;
      if (len > 0 && valid_utf8((const unsigned char *)ev->name, len))
        napi_create_string_utf8(env, ev->name, len, &name);
      else
        napi_get_null(env, &name);
      napi_set_element(env, out, 3 * n, wd);
      napi_set_element(env, out, 3 * n + 1, mask);
      napi_set_element(env, out, 3 * n + 2, name);
      n++;
    }
  }
  napi_value result;
  if (overflow) {
    napi_create_int32(env, -1, &result);
  } else if (!any || !out) {
    napi_get_null(env, &result);
  } else {
    result = out;
  }
  return result;
}

static napi_value js_fswatch_pending(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  int32_t fd = -1, mounts = -1;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, args[0], &fd) != napi_ok || fd < 0 ||
      napi_get_value_int32(env, args[1], &mounts) != napi_ok || mounts < 0) {
    napi_throw_type_error(env, NULL, "fsWatchPending(fd, mountsFd)");
    return NULL;
  }
  struct pollfd p[2] = {{.fd = fd, .events = POLLIN, .revents = 0}, {.fd = mounts, .events = POLLPRI, .revents = 0}};
  int r;
  do r = poll(p, 2, 0);
  while (r < 0 && errno == EINTR);
  int32_t bits = 3;
  if (r >= 0) {
    bits = 0;
    if (p[0].revents) bits |= 1; // readable, or an error the drain reports
    if (p[1].revents & (POLLPRI | POLLERR | POLLNVAL)) bits |= 2;
  }
  napi_value out;
  napi_create_int32(env, bits, &out);
  return out;
}

static napi_value js_fs_revalidate(napi_env env, napi_callback_info info) {
  size_t argc = 1, len = 0;
  napi_value args[1];
  char path[PATH_MAX];
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_string_utf8(env, args[0], path, sizeof path, &len) != napi_ok || len == 0 ||
      len >= sizeof path - 1 || strlen(path) != len) {
    napi_throw_type_error(env, NULL, "fsRevalidate(path)");
    return NULL;
  }
  struct statx sx;
  int32_t err = statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_TYPE, &sx) == 0 ? 0 : errno;
  napi_value out;
  napi_create_int32(env, err, &out);
  return out;
}

napi_status corral_fswatch_init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"fsWatchOpen", NULL, js_fswatch_open, NULL, NULL, NULL, napi_default, NULL},
      {"fsWatchAdd", NULL, js_fswatch_add, NULL, NULL, NULL, napi_default, NULL},
      {"fsWatchDrain", NULL, js_fswatch_drain, NULL, NULL, NULL, napi_default, NULL},
      {"fsWatchPending", NULL, js_fswatch_pending, NULL, NULL, NULL, napi_default, NULL},
      {"fsRevalidate", NULL, js_fs_revalidate, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
