// Confining a sandboxed child right before execve (the Landlock backend, src/sandbox/linux/landlock.ts): see
// confine.h. The parent has already built the Landlock ruleset (landlock.c) and the seccomp program; this file only
// applies them, in this order:
//   1. PR_SET_NO_NEW_PRIVS: nothing the command executes can gain privileges (setuid, file capabilities), and
//      Landlock and seccomp may be applied without CAP_SYS_ADMIN;
//   2. capabilities: the securebits locked (needs CAP_SETPCAP: as root), ambient capabilities cleared, then
//      effective, permitted and inheritable set to nothing (always allowed). With (1) an execve cannot give any back,
//      also to root: a sandbox started by root has CapEff, CapPrm, CapInh and CapAmb 0, as under bwrap --cap-drop ALL.
//      Two locks hold that, each alone: no_new_privs (the kernel intersects the permitted set after an execve with the
//      one before it, which is empty) and SECBIT_NOROOT (uid 0 gets nothing for being uid 0). The bounding set is
//      left as it is: it only bounds what an execve may add, and no execve may add anything here (a new user
//      namespace gets a full bounding set whatever this one holds, and the seccomp filter refuses one anyway).
//      Emptying it would cost a credential copy per capability (41 prctl calls, ~43 us of every Landlock start on
//      the 2-core dev machine, a fifth of the Landlock start's whole overhead; bwrap's --cap-drop ALL pays the same);
//   3. landlock_restrict_self: the filesystem, TCP and scope rules (a new Landlock domain: the sandbox can neither
//      ptrace nor signal anything outside it, from ABI 6 for signals);
//   4. the seccomp filter (the keyring calls it denies are made by the caller before this).

#define _GNU_SOURCE
#include "confine.h"

#include <errno.h>
#include <linux/capability.h>
#include <linux/prctl.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

// SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE (+ _LOCKED): uid 0
// gets no capabilities from execve, and none of this can be undone.
#define CONFINE_SECUREBITS 0xe3

#if defined(__x86_64__)
static inline long sys5(long n, long a, long b, long c, long d, long e) {
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8) : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
static inline long sys5(long n, long a, long b, long c, long d, long e) {
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4) : "memory", "cc");
  return x0;
}
#else
#include <unistd.h>
// Elsewhere the native spawner waits for the exec (vfork mode), so libc is safe to call here.
static inline long sys5(long n, long a, long b, long c, long d, long e) {
  long r = syscall(n, a, b, c, d, e);
  return r < 0 ? -errno : r;
}
#endif

static void say(const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  while (n > 0) {
    long w = sys5(SYS_write, 2, (long)s, (long)n, 0, 0);
    if (w == -EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static const char *errname(long err) {
  switch (err) {
    case EPERM: return "Operation not permitted";
    case EINVAL: return "Invalid argument";
    case ENOSYS: return "Function not implemented";
    case EBADF: return "Bad file descriptor";
    case EFAULT: return "Bad address";
    case ENOMEM: return "Cannot allocate memory";
    case E2BIG: return "Argument list too long";
    case EACCES: return "Permission denied";
    case EOPNOTSUPP: return "Operation not supported";
    default: return "error";
  }
}

static long fail(const char *step, long r) {
  say("corral: cannot confine the sandbox (");
  say(step);
  say("): ");
  say(errname(-r));
  say("\n");
  return r;
}

#ifndef SECCOMP_FILTER_FLAG_NEW_LISTENER
#define SECCOMP_FILTER_FLAG_NEW_LISTENER (1UL << 3)
#endif
#ifndef SECCOMP_RET_USER_NOTIF
#define SECCOMP_RET_USER_NOTIF 0x7fc00000U
#endif
#if defined(__x86_64__)
#define NETNOTIFY_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NETNOTIFY_ARCH AUDIT_ARCH_AARCH64
#else
#define NETNOTIFY_ARCH 0
#endif

// The program: a foreign architecture is killed (the main filter does so too; this one must not let it through by
// itself); connect → SECCOMP_RET_USER_NOTIF; sendto with a destination (args[4] != NULL, both halves) → EACCES (under
// the main filter's TCP-only sockets a destination could only matter to Fast Open, which that filter refuses; this
// makes the answer explicit); everything else: allowed by this filter (the main filter decides).
static unsigned netnotify_program(struct sock_filter *p) {
  const unsigned nr = offsetof(struct seccomp_data, nr), arch = offsetof(struct seccomp_data, arch);
  const unsigned a4 = offsetof(struct seccomp_data, args) + 4 * sizeof(uint64_t);
  unsigned n = 0;
  p[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arch);
  p[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NETNOTIFY_ARCH, 1, 0);
  p[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  p[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, nr);
  p[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_connect, 8, 0);   // → notify (the last)
  p[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sendto, 1, 0);    // → destination check
  p[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  p[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, a4);
  p[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 2);
  p[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, a4 + 4);
  p[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0);            // NULL → allow
  p[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES);
  p[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  p[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
  return n;
}

// Installs the connect supervision filter and sends its listener over chan (SCM_RIGHTS), then closes both: the
// command never holds its own listener.
static long send_net_listener(int chan) {
  struct sock_filter insns[CORRAL_NETNOTIFY_INSNS];
  unsigned n = netnotify_program(insns);
  struct sock_fprog prog = {.len = (unsigned short)n, .filter = insns};
  long listener = sys5(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, (long)&prog, 0, 0);
  if (listener < 0) return listener;
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  for (unsigned k = 0; k < sizeof ctl.buf; k++) ctl.buf[k] = 0;
  char byte = 'L';
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  int lfd = (int)listener;
  unsigned char *dst = CMSG_DATA(cm);
  const unsigned char *src = (const unsigned char *)&lfd;
  for (unsigned k = 0; k < sizeof lfd; k++) dst[k] = src[k];
  long r;
  do r = sys5(SYS_sendmsg, chan, (long)&msg, MSG_NOSIGNAL, 0, 0);
  while (r == -EINTR);
  sys5(SYS_close, listener, 0, 0, 0, 0);
  sys5(SYS_close, chan, 0, 0, 0, 0);
  return r < 0 ? r : 0;
}

long corral_net_notify_self(int chan) {
  long r;
  if ((r = sys5(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) < 0) return fail("no_new_privs", r);
  if ((r = send_net_listener(chan)) < 0) return fail("seccomp listener", r);
  return 0;
}

long corral_confine_self(const struct corral_confinement *c) {
  long r;
  if (!c->active) return 0;
  if ((r = sys5(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) < 0) return fail("no_new_privs", r);
  // Without CAP_SETPCAP (not root, or a root without it) this fails with EPERM: (1) alone then keeps every execve
  // from adding a capability. The bounding set stays (see the top of this file).
  sys5(SYS_prctl, PR_SET_SECUREBITS, CONFINE_SECUREBITS, 0, 0, 0);
  sys5(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3];
  for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++) none[i].effective = none[i].permitted = none[i].inheritable = 0;
  if ((r = sys5(SYS_capset, (long)&hdr, (long)none, 0, 0, 0)) < 0) return fail("capset", r);
  if ((r = sys5(SYS_landlock_restrict_self, c->ruleset_fd, c->restrict_flags, 0, 0, 0)) < 0)
    return fail("landlock_restrict_self", r);
  if (c->filter_len > 0) {
    struct sock_fprog prog = {.len = (unsigned short)c->filter_len, .filter = (struct sock_filter *)c->filter};
    if ((r = sys5(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, (long)&prog, 0, 0)) < 0) return fail("seccomp", r);
  }
  if (c->net_notify_chan > 0 && (r = send_net_listener(c->net_notify_chan)) < 0) return fail("seccomp listener", r);
  return 0;
}
