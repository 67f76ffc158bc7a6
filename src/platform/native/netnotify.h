#pragma once
#include <node_api.h>

// Registers netNotifyProbe, netNotifyPair, netNotifyWatch and netNotifyCounts (see netnotify.c) on the addon's exports.
napi_status corral_netnotify_init(napi_env env, napi_value exports);
