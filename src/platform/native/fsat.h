// fd-relative filesystem calls for confined fs/* requests (fsat.c): registered on the addon's exports by spawn.c.
#pragma once
#include <node_api.h>

napi_status corral_fsat_init(napi_env env, napi_value exports);
