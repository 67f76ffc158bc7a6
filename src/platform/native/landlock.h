#pragma once
#include <node_api.h>

#include "confine.h"

// Registers landlockAbi and landlockRuleset (see landlock.c) on the addon's exports.
napi_status corral_landlock_init(napi_env env, napi_value exports);
// Reads spawn()'s confinement argument ({ rulesetFd, seccomp: Buffer, flags? }; undefined or null: none) into *out.
// Returns 0, or EINVAL for a malformed value.
int corral_confinement_from_js(napi_env env, napi_value v, struct corral_confinement *out);
