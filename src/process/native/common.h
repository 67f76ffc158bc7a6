// Shared by the addon's C files: fallbacks for kernel constants older headers lack, and the one way a JS call reports
// an OS error. Include it after the system headers (sys/wait.h declares P_PIDFD as an enum member).
#pragma once
#include <node_api.h>
#include <stdio.h>
#include <string.h>

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
