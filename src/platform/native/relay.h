// splice(2) relay between two sockets (relay.c): registered on the addon's exports by spawn.c's module init.
#pragma once
#include <node_api.h>

#include "reactor.h"

napi_status corral_relay_init(napi_env env, napi_value exports, struct reactor *reactor);
