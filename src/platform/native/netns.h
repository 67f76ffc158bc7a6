// Listening sockets in another process's network namespace (netns.c): registered on the addon's exports by spawn.c.
#pragma once
#include <node_api.h>

napi_status corral_netns_init(napi_env env, napi_value exports);
