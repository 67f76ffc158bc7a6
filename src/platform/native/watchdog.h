// The group watchdog (watchdog.c): process groups registered here are SIGKILLed when this process dies.
#pragma once
#include <sys/types.h>

// Registers a process group; returns a slot for watchdog_remove, or -1 when there is no watchdog.
int watchdog_add(pid_t pgid);
void watchdog_remove(int slot);
// The watchdog's pid, or 0 when none is running.
pid_t watchdog_pid(void);
// Starts the watchdog if it is not running; 0 or an errno value.
int watchdog_ensure(void);
// SIGKILLs every pid listed in a file of decimal pids (a cgroup.procs, a /proc/<pid>/task/<tid>/children); returns
// how many it listed. Raw system calls only: safe in a CLONE_VM child (the watchdog, a command's supervisor).
int corral_kill_listed(const char *path);
#define WATCHDOG_CG_BASES 3
// Cgroup mode (up to 4 sets per process): on our death the watchdog kills every process in the `p-*` subdirectories of
// bases[0] (cgroup.kill on v2, else SIGKILL to each pid of their cgroup.procs after pids.max 0 on bases[0]), then
// removes the `p-*` directories of every base (and the bases, if remove_bases). Starts the watchdog. 0 or an errno.
int watchdog_set_cgroups(int version, const char *const *bases, int nbases, int remove_bases);
