#pragma once
#include <node_api.h>

// Marks every fd >= from close-on-exec.
void corral_seal_fds(unsigned int from);
void corral_seal_fds_at_load(void);
// Registers sealFds, setInheritable, pipe, pinSymlinks on the addon's exports (and seals this process's fds once).
napi_status corral_sandbox_init(napi_env env, napi_value exports);
