// Shared by the addon's C files: fallbacks for kernel constants older headers lack, and the one way a JS call reports
// an OS error. Include it after the system headers (sys/wait.h declares P_PIDFD as an enum member).
#pragma once
#include <errno.h>
#include <linux/nsfs.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

// The interface version of the addon's exports (the `abi` property). src/platform/addon.ts loads the addon only when
// it equals the number it was written against: bump both together whenever a function is added, removed or changes
// its arguments or results.
#define CORRAL_NATIVE_ABI 12

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

// Throws Error { message: "<what>: <strerror>" (or just strerror when what is NULL), errno: err }; returns NULL for
// `return corral_throw_errno(...)` in napi callbacks.
static inline napi_value corral_throw_errno(napi_env env, int err, const char *what) {
  char buf[256], text[320];
  const char *msg = strerror_r(err, buf, sizeof buf);  // GNU variant
  if (what) snprintf(text, sizeof text, "%s: %s", what, msg);
  napi_value message, error, code;
  napi_create_string_utf8(env, what ? text : msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &error);
  napi_create_int32(env, err, &code);
  napi_set_named_property(env, error, "errno", code);
  napi_throw(env, error);
  return NULL;
}

// Opens the user namespace that owns the namespace `ns` into *fd when it is not ours (*fd = -1 when it is). Returns 0
// or an errno value. The owner, not the target process's current user namespace: bubblewrap creates the sandbox's
// namespaces in one user namespace and then moves the sandboxed process into a nested one, and entering that nested
// one gives no rights over its parent's namespaces (setns fails with EPERM).
static inline int corral_owner_userns(int ns, int *fd) {
  *fd = ioctl(ns, NS_GET_USERNS);
  if (*fd < 0) return errno;
  struct stat theirs, ours;
  if (fstat(*fd, &theirs) < 0 || stat("/proc/self/ns/user", &ours) < 0) {
    int e = errno;
    close(*fd);
    *fd = -1;
    return e;
  }
  if (theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino) {
    close(*fd);
    *fd = -1;  // our own: nothing to join
  }
  return 0;
}

// Reads the arguments (pid: positive integer, list: array of 1..max elements) of a call such as listenInNetns(pid,
// ports); on a mismatch throws a TypeError with `usage` and returns false.
static inline bool corral_pid_and_list(napi_env env, napi_callback_info info, int32_t *pid, napi_value *list,
                                       uint32_t *n, uint32_t max, const char *usage) {
  size_t argc = 2;
  napi_value args[2];
  bool is_array = false;
  *pid = 0;
  *n = 0;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, args[0], pid) != napi_ok || *pid <= 0 ||
      napi_is_array(env, args[1], &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, args[1], n) != napi_ok || *n == 0 || *n > max) {
    napi_throw_type_error(env, NULL, usage);
    return false;
  }
  *list = args[1];
  return true;
}
