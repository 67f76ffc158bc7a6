// The group watchdog: unsandboxed children and everything in their process groups die with the server, however it
// dies (protocol.md §8.4). PR_SET_PDEATHSIG reaches only a direct child; a background grandchild would live on.
//
// One watchdog process per server, started on first use: a clone(CLONE_VM) child that shares our memory, blocks every
// signal and waits in read(2) on a pipe whose only write end we hold. When this process is gone (exit, crash,
// SIGKILL) the read returns EOF, and the watchdog SIGKILLs every process group still registered in a table in the
// shared memory, then exits. Registering a group is a store into that table: no system call per child.
//
// The watchdog runs on its own stack, with our memory but without our thread's state, so it uses raw system calls
// only (no errno, no locks, no allocation). Our memory stays mapped for it after we die: it holds a reference to it.
#define _GNU_SOURCE
#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"  // after the system headers: its fallbacks must not shadow their definitions


#define SLOTS 65536
#define STACK_SIZE (64 * 1024)

#if defined(__x86_64__) || defined(__aarch64__)
#define HAVE_WATCHDOG 1
#endif

#ifdef HAVE_WATCHDOG
#if defined(__x86_64__)
static inline long wd_syscall(long n, long a, long b, long c) {
  long ret;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return ret;
}
#else
static inline long wd_syscall(long n, long a, long b, long c) {
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory", "cc");
  return x0;
}
#endif

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int32_t *slots;     // pgids (0 = free); read by the watchdog after we are gone
static int32_t *free_list;  // indexes of free slots below `used`
static int nfree, used;
static pid_t dog_pid;
static int dog_pidfd = -1;
static int pipe_wr = -1;
static void *dog_stack;
// What the watchdog reads at start, before it could be changed for a successor.
static struct {
  int rd;
} dog_args;

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

static int watchdog_main(void *arg) {
  (void)arg;
  int rd = dog_args.rd;
  // It starts with a copy of all our fds: keep only the read end. (Holding a client's socket or a child's pipe would
  // keep them open after we close them; the write end would keep the pipe from ever reaching EOF.)
  if (rd > 0) wd_syscall(SYS_close_range, 0, rd - 1, 0);
  if (wd_syscall(SYS_close_range, rd + 1, ~0U, 0) < 0) {
    for (int fd = 0; fd < 65536; fd++)
      if (fd != rd) wd_syscall(SYS_close, fd, 0, 0);
  }
  static const char root[] = "/";
  wd_syscall(SYS_chdir, (long)root, 0, 0);
  static const char name[] = "corral-watchdog";
  wd_syscall(SYS_prctl, PR_SET_NAME, (long)name, 0);
  char c;
  for (;;) {
    long r = wd_syscall(SYS_read, rd, (long)&c, 1);
    if (r == 0 || (r < 0 && r != -EINTR)) break;
  }
  for (int i = 0; i < SLOTS; i++) {
    int32_t pg = __atomic_load_n(&slots[i], __ATOMIC_RELAXED);
    if (pg > 1) wd_syscall(SYS_kill, -pg, SIGKILL, 0);
  }
  for (;;) wd_syscall(SYS_exit_group, 0, 0, 0);
  return 0;
}

// Whether the watchdog is running; reaps it if it has died (someone killed it). Called with the lock held.
static int dog_alive(void) {
  if (dog_pidfd < 0) return 0;
  // A pidfd polls readable once its process has exited. Anything else (no event, EINTR from a SIGCHLD, any error)
  // means alive: wrongly deciding it is dead would close its pipe, and it would kill every registered group.
  struct pollfd p = {.fd = dog_pidfd, .events = POLLIN, .revents = 0};
  int n;
  do n = poll(&p, 1, 0);
  while (n < 0 && errno == EINTR);
  if (n <= 0 || !(p.revents & POLLIN)) return 1;
  // Only our watchdog's own exit counts (should this fd number have been closed and reused behind our back, never act
  // on, or reap, another process).
  siginfo_t si;
  memset(&si, 0, sizeof si);
  if (waitid((idtype_t)P_PIDFD, (id_t)dog_pidfd, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid != dog_pid) return 1;
  waitid((idtype_t)P_PIDFD, (id_t)dog_pidfd, &si, WEXITED | WNOHANG);
  close(dog_pidfd);
  dog_pidfd = -1;
  close(pipe_wr);
  pipe_wr = -1;
  return 0;
}

// Starts a watchdog (again). Called with the lock held. Returns 0 or an errno value.
static int start_dog(void) {
  if (!slots) {
    slots = mmap(NULL, SLOTS * sizeof *slots, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (slots == MAP_FAILED) {
      slots = NULL;
      return ENOMEM;
    }
    free_list = malloc(SLOTS * sizeof *free_list);
    if (!free_list) return ENOMEM;
  }
  if (!dog_stack) {
    void *m = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) return ENOMEM;
    dog_stack = m;
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return errno;
  dog_args.rd = p[0];
  // Every signal stays blocked in the watchdog: our handlers must never run on its stack.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int pidfd = -1;
  pid_t pid = clone(watchdog_main, (char *)dog_stack + STACK_SIZE, CLONE_VM | CLONE_PIDFD | SIGCHLD, NULL, &pidfd);
  int err = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  close(p[0]);
  if (pid < 0) {
    close(p[1]);
    return err;
  }
  dog_pid = pid;
  dog_pidfd = pidfd;
  pipe_wr = p[1];
  return 0;
}

int watchdog_add(pid_t pgid) {
  if (pgid <= 1) return -1;
  pthread_mutex_lock(&lock);
  int slot = -1;
  if ((dog_alive() || start_dog() == 0) && slots) {
    if (nfree > 0) slot = free_list[--nfree];
    else if (used < SLOTS) slot = used++;
    if (slot >= 0) __atomic_store_n(&slots[slot], (int32_t)pgid, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&lock);
  return slot;
}

void watchdog_remove(int slot) {
  if (slot < 0 || slot >= SLOTS) return;
  pthread_mutex_lock(&lock);
  if (slots && slots[slot] != 0) {
    __atomic_store_n(&slots[slot], 0, __ATOMIC_RELAXED);
    free_list[nfree++] = slot;
  }
  pthread_mutex_unlock(&lock);
}

pid_t watchdog_pid(void) {
  pthread_mutex_lock(&lock);
  pid_t pid = dog_alive() ? dog_pid : 0;
  pthread_mutex_unlock(&lock);
  return pid;
}
#else
int watchdog_add(pid_t pgid) {
  (void)pgid;
  return -1;
}
void watchdog_remove(int slot) { (void)slot; }
pid_t watchdog_pid(void) { return 0; }
#endif
