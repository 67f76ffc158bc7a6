// The launcher's supervisor: see supervise.c.
#pragma once
#include <sys/types.h>

// Called by the launcher (P, the process `server` started) before it confines anything: forks the supervisor S, which
// forks the command C. Returns 0 in C, which goes on to confine itself and exec; never returns in P nor in S (each
// exits as the command did). Returns -1 in P when nothing could be started (it said why on stderr).
int corral_supervise_fork(pid_t server);
