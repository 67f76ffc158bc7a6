#pragma once
#include <node_api.h>

// Registers fsWatchOpen, fsWatchAdd and fsWatchDrain (see fswatch.c) on the addon's exports.
napi_status corral_fswatch_init(napi_env env, napi_value exports);
