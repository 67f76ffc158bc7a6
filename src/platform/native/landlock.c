// The Landlock backend's kernel calls that Node cannot make (part of corral_spawn.node; the JS side is
// src/sandbox/linux/landlockNative.ts, the policy is planned in src/sandbox/linux/landlock.ts):
//
//   landlockAbi() -> [abi, errata, errno]
//                        the kernel's Landlock ABI version (0 when there is none: errno says why, ENOSYS when the
//                        kernel lacks it, EOPNOTSUPP when it was not enabled at boot) and its errata bitmask.
//   landlockRuleset(handledFs, handledNet, scoped, paths: string[], rights: number[], ports: number[])
//                     -> [fd, dev0, ino0, dev1, ino1, ...]
//                        a new ruleset (O_CLOEXEC) handling those access rights and scopes, with one path_beneath
//                        rule per path (rights[i] on paths[i], opened O_PATH | O_NOFOLLOW: a path that is now a
//                        symlink, or gone, or not reachable by this user gets no rule, which only takes access
//                        away; directory-only rights are dropped for anything but a directory) and one TCP connect
//                        rule per port; after the fd, the device and inode each path opened as (what its rule is
//                        bound to; a symlink's own), -1 -1 where it opened as nothing. Throws Error { errno,
//                        message naming the path } on anything else.
//
// spawn(...)'s confine argument (the eleventh), { rulesetFd, seccomp: Buffer, flags, netNotifyFd? }, is read by corral_confinement_from_js: the
// child applies it right before execve (confine.c).

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"
#include "confine.h"
#include "landlock.h"

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif

#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_CREATE_RULESET_ERRATA (1U << 1)
#define LL_RULE_PATH_BENEATH 1
#define LL_RULE_NET_PORT 2
#define LL_ACCESS_NET_CONNECT_TCP (1ULL << 1)
// The rights that apply to files (anything else is for directories only): execute, write_file, read_file, truncate,
// ioctl_dev.
#define LL_FILE_RIGHTS ((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | (1ULL << 14) | (1ULL << 15))
#define MAX_RULES 65536
#define MAX_PORTS 64

// Our own copies of the uapi structs (Debian 12's headers stop at ABI 3).
struct ll_ruleset_attr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
struct ll_path_beneath_attr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));
struct ll_net_port_attr {
  uint64_t allowed_access;
  uint64_t port;
};

static napi_value js_landlock_abi(napi_env env, napi_callback_info info) {
  (void)info;
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
  int err = abi < 0 ? errno : 0;
  long errata = abi > 0 ? syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_ERRATA) : 0;
  napi_value out, v;
  napi_create_array_with_length(env, 3, &out);
  napi_create_int32(env, abi < 0 ? 0 : (int32_t)abi, &v);
  napi_set_element(env, out, 0, v);
  napi_create_int32(env, errata < 0 ? 0 : (int32_t)errata, &v);
  napi_set_element(env, out, 1, v);
  napi_create_int32(env, err, &v);
  napi_set_element(env, out, 2, v);
  return out;
}

static bool get_u64(napi_env env, napi_value v, uint64_t *out) {
  double d;
  if (napi_get_value_double(env, v, &d) != napi_ok || d < 0 || d > 9007199254740991.0 || d != (double)(uint64_t)d)
    return false;
  *out = (uint64_t)d;
  return true;
}

static bool get_array(napi_env env, napi_value v, uint32_t *n, uint32_t max) {
  bool is = false;
  return napi_is_array(env, v, &is) == napi_ok && is && napi_get_array_length(env, v, n) == napi_ok && *n <= max;
}

// One path_beneath rule; 0 when added or deliberately skipped, else an errno value. *dev and *ino: what the path
// opened as (-1 when it opened as nothing).
static int add_path_rule(int ruleset, const char *path, uint64_t rights, double *dev, double *ino) {
  *dev = *ino = -1;
  // The plan's paths are canonical: a symlink on the way was put there since (by a sandbox, in a writable root) and
  // would move the rule elsewhere. RESOLVE_NO_SYMLINKS fails with ELOOP then; a trailing symlink opens as itself.
  struct {
    uint64_t flags, mode, resolve;
  } how = {O_PATH | O_CLOEXEC | O_NOFOLLOW, 0, 0x04 /* RESOLVE_NO_SYMLINKS */};
  int fd = (int)syscall(437 /* openat2, the same number on every architecture */, AT_FDCWD, path, &how, sizeof how);
  if (fd < 0 && errno == ENOSYS) fd = open(path, O_PATH | O_CLOEXEC | O_NOFOLLOW);  // Linux < 5.6
  // Not there (or no longer reachable without a symlink): no rule, which grants nothing.
  if (fd < 0) return errno == ENOENT || errno == ENOTDIR || errno == EACCES || errno == ELOOP ? 0 : errno;
  struct stat st;
  int err = 0;
  if (fstat(fd, &st) < 0) err = errno;
  else {
    // As doubles, the way Node's lstat gives them (src/sandbox/linux/landlockReuse.ts compares the two).
    *dev = (double)st.st_dev;
    *ino = (double)st.st_ino;
  }
  if (err == 0 && !S_ISLNK(st.st_mode)) {
    if (!S_ISDIR(st.st_mode)) rights &= LL_FILE_RIGHTS;
    struct ll_path_beneath_attr pb = {.allowed_access = rights, .parent_fd = fd};
    if (rights != 0 && syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &pb, 0) < 0) err = errno;
  }
  close(fd);
  return err;
}

static napi_value js_landlock_ruleset(napi_env env, napi_callback_info info) {
  size_t argc = 6;
  napi_value args[6];
  struct ll_ruleset_attr attr = {0, 0, 0};
  uint32_t npaths = 0, nrights = 0, nports = 0;
  const char *usage =
      "landlockRuleset(handledFs, handledNet, scoped: number, paths: string[], rights: number[], ports: number[])";
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 6 ||
      !get_u64(env, args[0], &attr.handled_access_fs) || !get_u64(env, args[1], &attr.handled_access_net) ||
      !get_u64(env, args[2], &attr.scoped) || !get_array(env, args[3], &npaths, MAX_RULES) ||
      !get_array(env, args[4], &nrights, MAX_RULES) || nrights != npaths || !get_array(env, args[5], &nports, MAX_PORTS)) {
    napi_throw_type_error(env, NULL, usage);
    return NULL;
  }
  // The attr size tells the kernel which members we use: an older ABI rejects a non-zero member it does not know.
  size_t size = attr.scoped ? sizeof attr : attr.handled_access_net ? offsetof(struct ll_ruleset_attr, scoped)
                                                                     : offsetof(struct ll_ruleset_attr, handled_access_net);
  int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
  if (ruleset < 0) return corral_throw_errno(env, errno, "landlock_create_ruleset");
  char path[PATH_MAX];
  napi_value out;
  if (napi_create_array_with_length(env, 1 + 2 * (size_t)npaths, &out) != napi_ok) {
    close(ruleset);
    return corral_throw_errno(env, ENOMEM, "landlockRuleset");
  }
  for (uint32_t i = 0; i < npaths; i++) {
    napi_value p, r;
    size_t len = 0;
    uint64_t rights = 0;
    if (napi_get_element(env, args[3], i, &p) != napi_ok || napi_get_element(env, args[4], i, &r) != napi_ok ||
        napi_get_value_string_utf8(env, p, path, sizeof path, &len) != napi_ok || len == 0 || len >= sizeof path - 1 ||
        path[0] != '/' || !get_u64(env, r, &rights)) {
      close(ruleset);
      napi_throw_type_error(env, NULL, usage);
      return NULL;
    }
    double dev, ino;
    int err = add_path_rule(ruleset, path, rights, &dev, &ino);
    if (err != 0) {
      char what[200];
      snprintf(what, sizeof what, "landlock rule for %.160s", path);
      close(ruleset);
      return corral_throw_errno(env, err, what);
    }
    napi_value d, n;
    napi_create_double(env, dev, &d);
    napi_create_double(env, ino, &n);
    napi_set_element(env, out, 1 + 2 * i, d);
    napi_set_element(env, out, 2 + 2 * i, n);
  }
  for (uint32_t i = 0; i < nports; i++) {
    napi_value p;
    uint64_t port = 0;
    if (napi_get_element(env, args[5], i, &p) != napi_ok || !get_u64(env, p, &port) || port > 65535) {
      close(ruleset);
      napi_throw_type_error(env, NULL, usage);
      return NULL;
    }
    struct ll_net_port_attr np = {.allowed_access = LL_ACCESS_NET_CONNECT_TCP, .port = port};
    if (syscall(SYS_landlock_add_rule, ruleset, LL_RULE_NET_PORT, &np, 0) < 0) {
      int e = errno;
      close(ruleset);
      return corral_throw_errno(env, e, "landlock_add_rule (TCP port)");
    }
  }
  napi_value fdv;
  napi_create_int32(env, ruleset, &fdv);
  napi_set_element(env, out, 0, fdv);
  return out;
}

int corral_confinement_from_js(napi_env env, napi_value v, struct corral_confinement *out) {
  napi_valuetype t = napi_undefined;
  out->active = 0;
  if (napi_typeof(env, v, &t) != napi_ok) return EINVAL;
  if (t == napi_undefined || t == napi_null) return 0;
  if (t != napi_object) return EINVAL;
  napi_value fd, filter, flags;
  int32_t rfd = -1;
  uint32_t fl = 0;
  bool has_flags = false, is_buffer = false;
  void *data = NULL;
  size_t len = 0;
  if (napi_get_named_property(env, v, "rulesetFd", &fd) != napi_ok || napi_get_value_int32(env, fd, &rfd) != napi_ok ||
      rfd < 0 || napi_get_named_property(env, v, "seccomp", &filter) != napi_ok ||
      napi_is_buffer(env, filter, &is_buffer) != napi_ok || !is_buffer ||
      napi_get_buffer_info(env, filter, &data, &len) != napi_ok || len % sizeof(struct sock_filter) != 0 ||
      len / sizeof(struct sock_filter) > CORRAL_CONFINE_MAX_INSNS)
    return EINVAL;
  if (napi_has_named_property(env, v, "flags", &has_flags) == napi_ok && has_flags &&
      (napi_get_named_property(env, v, "flags", &flags) != napi_ok || napi_get_value_uint32(env, flags, &fl) != napi_ok))
    return EINVAL;
  // netNotifyFd (optional): the command's end of netNotifyPair (netnotify.c), for the connect supervisor.
  napi_value nn;
  bool has_nn = false;
  int32_t nfd = 0;
  if (napi_has_named_property(env, v, "netNotifyFd", &has_nn) == napi_ok && has_nn &&
      (napi_get_named_property(env, v, "netNotifyFd", &nn) != napi_ok || napi_get_value_int32(env, nn, &nfd) != napi_ok ||
       nfd <= 2))
    return EINVAL;
  out->net_notify_chan = nfd;
  out->ruleset_fd = rfd;
  out->restrict_flags = fl;
  out->filter_len = (uint32_t)(len / sizeof(struct sock_filter));
  memcpy(out->filter, data, len);
  out->active = 1;
  return 0;
}

napi_status corral_landlock_init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"landlockAbi", NULL, js_landlock_abi, NULL, NULL, NULL, napi_default, NULL},
      {"landlockRuleset", NULL, js_landlock_ruleset, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
