// Pipe reading and base64 (pipes.c): registered on the addon's exports by spawn.c's module init.
#pragma once
#include <node_api.h>
#include <stdbool.h>

#include "reactor.h"

napi_status corral_pipes_init(napi_env env, napi_value exports, struct reactor *reactor);
// false: base64 without SSSE3 from now on (the CORRAL_NO_SIMD switch, read by src/platform/addon.ts).
void corral_pipes_allow_simd(bool allow);
