// The group watchdog (watchdog.c): process groups registered here are SIGKILLed when this process dies.
#pragma once
#include <sys/types.h>

// Registers a process group; returns a slot for watchdog_remove, or -1 when there is no watchdog.
int watchdog_add(pid_t pgid);
void watchdog_remove(int slot);
// The watchdog's pid, or 0 when none is running.
pid_t watchdog_pid(void);
