// The last step of a Landlock sandbox launch, made by the child itself right before execve (see confine.c): shared by
// the native spawner's child (spawn.c, which runs in the parent's memory and may only make raw system calls) and the
// launcher executable (src/platform/native/launcher.c, for terminals and the child_process fallback).
#pragma once
#include <linux/filter.h>
#include <stdint.h>

// The BPF programs Corral generates are ~60 instructions (src/sandbox/linux/seccomp.ts); the kernel's limit is 4096.
#define CORRAL_CONFINE_MAX_INSNS 512

struct corral_confinement {
  int active;                 // 0: nothing to do
  int ruleset_fd;             // a Landlock ruleset (landlock_create_ruleset), built by the parent
  uint32_t restrict_flags;    // landlock_restrict_self flags (audit logging, ABI 7)
  uint32_t filter_len;        // instructions in filter
  int net_notify_chan;        // > 0: after the filter, the connect supervision filter (netnotify.c) is installed and
                              // its listener fd sent over this unix socket (SCM_RIGHTS), which is then closed
  struct sock_filter filter[CORRAL_CONFINE_MAX_INSNS];
};

// Confines the calling task for good: no new privileges, no capabilities (effective, permitted, inheritable,
// ambient; securebits locked too when it may change them; the bounding set is left, see confine.c), the Landlock
// ruleset, then the seccomp filter.
// Raw system calls only on x86_64 and arm64 (no libc, no errno, no allocation: safe in a CLONE_VM child). Returns 0,
// or a negative errno after writing "corral: cannot confine the sandbox (<step>): <error>" to fd 2.
long corral_confine_self(const struct corral_confinement *c);
// Only the connect supervision filter (no_new_privs first), its listener sent over chan: a bwrap sandbox's command
// under transparent TCP (the launcher's --net-notify without --landlock, run inside bwrap). 0 or -errno (said why).
long corral_net_notify_self(int chan);

// The user-notification filter of a Landlock command under managed-network enforcement (see netnotify.c): connect()
// goes to the server's supervisor, sendto() with a destination address is refused (EACCES). Fills prog (at least
// CORRAL_NETNOTIFY_INSNS entries) and returns the count.
#define CORRAL_NETNOTIFY_INSNS 14
unsigned corral_netnotify_program(struct sock_filter *prog);
