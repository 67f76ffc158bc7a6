// The group watchdog: unsandboxed children and everything in their process groups die with the server, however it
// dies (protocol.md §8.4). PR_SET_PDEATHSIG reaches only a direct child; a background grandchild would live on.
//
// One watchdog process per server, started on first use: a clone(CLONE_VM) child that shares our memory, blocks every
// signal and waits in read(2) on a pipe whose only write end we hold. When this process is gone (exit, crash,
// SIGKILL) the read returns EOF, and the watchdog SIGKILLs every process group still registered in a table in the
// shared memory, then exits. Registering a group is a store into that table: no system call per child.
//
// With per-command cgroups (src/process/cgroup.ts) the server tells the watchdog where they live instead
// (watchdog_set_cgroups), and on our death it empties every `p-*` cgroup below those directories — every process in
// them, `setsid` descendants included, which a process-group kill misses — and removes the directories. Process
// groups registered with watchdog_add are still killed first (children started without a cgroup).
//
// The watchdog runs on its own stack, with our memory but without our thread's state, so it uses raw system calls
// only (no errno, no locks, no allocation). Our memory stays mapped for it after we die: it holds a reference to it.
#define _GNU_SOURCE
#include "watchdog.h"

#include <dirent.h>
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

// ---- cgroup cleanup (raw system calls only: it runs in the watchdog) --------------------------------------------

#define CG_PATH 512
#define CG_SETS 4  // one per copy of the JS module in this process (sources and a bundle, say)
struct cg_set {
  int version;  // 1 or 2: cgroup v1 / v2
  int nbases;
  int remove_bases;  // rmdir the base directories too once their children are gone
  char bases[WATCHDOG_CG_BASES][CG_PATH];  // bases[0]: where the processes are killed (v1: the pids hierarchy)
};
static struct cg_set cg_sets[CG_SETS];
static int cg_count;  // published with release ordering after the set is filled in
static const struct cg_set *cg;  // the set being cleaned (watchdog only)

struct wd_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

static size_t wd_strlen(const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  return n;
}

// dst = a "/" b ["/" c]; 0, or -1 when it does not fit.
static int wd_join(char *dst, size_t cap, const char *a, const char *b, const char *c) {
  size_t la = wd_strlen(a), lb = wd_strlen(b), lc = c ? wd_strlen(c) : 0;
  if (la + lb + lc + 3 > cap) return -1;
  char *p = dst;
  for (size_t i = 0; i < la; i++) *p++ = a[i];
  *p++ = '/';
  for (size_t i = 0; i < lb; i++) *p++ = b[i];
  if (c) {
    *p++ = '/';
    for (size_t i = 0; i < lc; i++) *p++ = c[i];
  }
  *p = 0;
  return 0;
}

static long wd_write_file(const char *path, const char *text) {
  long fd = wd_syscall(SYS_openat, AT_FDCWD, (long)path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fd;
  long r = wd_syscall(SYS_write, fd, (long)text, (long)wd_strlen(text));
  wd_syscall(SYS_close, fd, 0, 0);
  return r;
}

// See watchdog.h.
int corral_kill_listed(const char *procs) {
  long fd = wd_syscall(SYS_openat, AT_FDCWD, (long)procs, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[4096];
  int n = 0;
  long pid = 0;
  int digits = 0;
  for (;;) {
    long r = wd_syscall(SYS_read, fd, (long)buf, sizeof buf);
    if (r == -EINTR) continue;
    if (r <= 0) break;
    for (long i = 0; i < r; i++) {
      char ch = buf[i];
      if (ch >= '0' && ch <= '9') {
        pid = pid * 10 + (ch - '0');
        digits = 1;
      } else {
        if (digits && pid > 1) {
          wd_syscall(SYS_kill, pid, SIGKILL, 0);
          n++;
        }
        pid = 0;
        digits = 0;
      }
    }
  }
  if (digits && pid > 1) {
    wd_syscall(SYS_kill, pid, SIGKILL, 0);
    n++;
  }
  wd_syscall(SYS_close, fd, 0, 0);
  return n;
}

// Calls fn(dir, name) for every subdirectory of dir whose name starts with "p-" (the per-command cgroups); returns
// the sum of what fn returned.
static int wd_each_command(const char *dir, int (*fn)(const char *dir, const char *name)) {
  long fd = wd_syscall(SYS_openat, AT_FDCWD, (long)dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[4096] __attribute__((aligned(8)));
  int sum = 0;
  for (;;) {
    long r = wd_syscall(SYS_getdents64, fd, (long)buf, sizeof buf);
    if (r == -EINTR) continue;
    if (r <= 0) break;
    for (long off = 0; off < r;) {
      struct wd_dirent64 *d = (struct wd_dirent64 *)(buf + off);
      off += d->d_reclen;
      if (d->d_type == DT_DIR && d->d_name[0] == 'p' && d->d_name[1] == '-') sum += fn(dir, d->d_name);
    }
  }
  wd_syscall(SYS_close, fd, 0, 0);
  return sum;
}

static int cg_kill_one(const char *dir, const char *name) {
  char path[CG_PATH];
  if (cg->version == 2 && wd_join(path, sizeof path, dir, name, "cgroup.kill") == 0 && wd_write_file(path, "1") > 0)
    return 0;  // the kernel kills everything in it, racing forks included
  if (wd_join(path, sizeof path, dir, name, "cgroup.procs") != 0) return 0;
  return corral_kill_listed(path);
}

static int cg_remove_one(const char *dir, const char *name) {
  char path[CG_PATH];
  if (wd_join(path, sizeof path, dir, name, NULL) != 0) return 0;
  long r = wd_syscall(SYS_unlinkat, AT_FDCWD, (long)path, AT_REMOVEDIR);
  return r == 0 || r == -ENOENT ? 0 : 1;
}

// Kills every process in our cgroups and removes them, retrying (10 ms apart, up to ~3 s) while processes are
// still exiting.
static void cg_cleanup(void) {
  int n = __atomic_load_n(&cg_count, __ATOMIC_ACQUIRE);
  if (n == 0) return;
  char path[CG_PATH];
  // pids.max is hierarchical: 0 on the base stops every fork below it (a fork bomb cannot outrun the kills).
  for (int s = 0; s < n; s++)
    if (wd_join(path, sizeof path, cg_sets[s].bases[0], "pids.max", NULL) == 0) wd_write_file(path, "0");
  for (int round = 0; round < 300; round++) {
    int left = 0;
    for (int s = 0; s < n; s++) {
      cg = &cg_sets[s];
      wd_each_command(cg->bases[0], cg_kill_one);
      for (int b = 0; b < cg->nbases; b++) {
        left += wd_each_command(cg->bases[b], cg_remove_one);
        if (cg->remove_bases) {
          long r = wd_syscall(SYS_unlinkat, AT_FDCWD, (long)cg->bases[b], AT_REMOVEDIR);
          if (r != 0 && r != -ENOENT) left++;
        }
      }
    }
    if (left == 0) break;
    static const struct timespec ten_ms = {0, 10 * 1000 * 1000};
    wd_syscall(SYS_nanosleep, (long)&ten_ms, 0, 0);
  }
}

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
  cg_cleanup();
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

int watchdog_ensure(void) {
  pthread_mutex_lock(&lock);
  int err = dog_alive() ? 0 : start_dog();
  pthread_mutex_unlock(&lock);
  return err;
}

int watchdog_set_cgroups(int version, const char *const *bases, int nbases, int remove_bases) {
  if ((version != 1 && version != 2) || nbases < 1 || nbases > WATCHDOG_CG_BASES) return EINVAL;
  for (int b = 0; b < nbases; b++)
    if (strlen(bases[b]) + 1 > CG_PATH) return ENAMETOOLONG;
  pthread_mutex_lock(&lock);
  int err = 0;
  if (cg_count == CG_SETS) {
    err = ENOSPC;
  } else {
    // A set is never changed once published: a running watchdog may be reading it.
    struct cg_set *set = &cg_sets[cg_count];
    for (int b = 0; b < nbases; b++) memcpy(set->bases[b], bases[b], strlen(bases[b]) + 1);
    set->nbases = nbases;
    set->remove_bases = remove_bases;
    set->version = version;
    __atomic_store_n(&cg_count, cg_count + 1, __ATOMIC_RELEASE);
    if (!dog_alive()) err = start_dog();
  }
  pthread_mutex_unlock(&lock);
  return err;
}
#else
int corral_kill_listed(const char *path) {
  (void)path;
  return 0;
}
int watchdog_add(pid_t pgid) {
  (void)pgid;
  return -1;
}
void watchdog_remove(int slot) { (void)slot; }
pid_t watchdog_pid(void) { return 0; }
int watchdog_ensure(void) { return ENOSYS; }
int watchdog_set_cgroups(int version, const char *const *bases, int nbases, int remove_bases) {
  (void)version;
  (void)bases;
  (void)nbases;
  (void)remove_bases;
  return ENOSYS;
}
#endif
