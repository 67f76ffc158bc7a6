/*
 * The machine's floor for the hot-path bench (test/bench/hotpath.bench.ts): what starting a command and seeing it
 * end costs with no server at all. posix_spawn with stdin from /dev/null and stdout/stderr piped, read both to EOF,
 * waitpid. Built by the bench with cc.
 *   floor seq N -- argv...        N starts one after the other: prints each start→end in microseconds, one a line
 *   floor conc ROUNDS W -- argv... ROUNDS batches of W at once: prints the rate (commands per second)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Starts argv with its stdout and stderr on two new pipes; their read ends go to fds[0], fds[1]. */
static pid_t start(char **argv, int *fds) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) { perror("pipe2"); exit(1); }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  pid_t pid;
  int e = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (e) { fprintf(stderr, "posix_spawn %s: %s\n", argv[0], strerror(e)); exit(1); }
  close(out[1]);
  close(err[1]);
  fds[0] = out[0];
  fds[1] = err[0];
  return pid;
}

/* Runs n commands at once: reads every pipe to EOF, then reaps every child. */
static void batch(char **argv, int n) {
  pid_t pids[1024];
  struct pollfd p[2048];
  char buf[65536];
  int open = 2 * n;
  for (int i = 0; i < n; i++) {
    int fds[2];
    pids[i] = start(argv, fds);
    p[2 * i] = (struct pollfd){.fd = fds[0], .events = POLLIN};
    p[2 * i + 1] = (struct pollfd){.fd = fds[1], .events = POLLIN};
  }
  while (open > 0) {
    if (poll(p, 2 * n, -1) < 0) { perror("poll"); exit(1); }
    for (int i = 0; i < 2 * n; i++) {
      if (p[i].fd < 0 || !p[i].revents) continue;
      if (read(p[i].fd, buf, sizeof buf) <= 0) { close(p[i].fd); p[i].fd = -1; open--; }
    }
  }
  for (int i = 0; i < n; i++) {
    int st;
    if (waitpid(pids[i], &st, 0) < 0) { perror("waitpid"); exit(1); }
  }
}

int main(int argc, char **argv) {
  int sep = 1;
  while (sep < argc && strcmp(argv[sep], "--") != 0) sep++;
  if (argc < 4 || sep >= argc - 1) { fprintf(stderr, "usage: floor seq N -- argv | floor conc ROUNDS W -- argv\n"); return 2; }
  char **cmd = argv + sep + 1;
  if (strcmp(argv[1], "seq") == 0) {
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
      double t = now_us();
      batch(cmd, 1);
      printf("%.1f\n", now_us() - t);
    }
  } else {
    int rounds = atoi(argv[2]), w = atoi(argv[3]);
    if (w < 1 || w > 1024) { fprintf(stderr, "W: 1..1024\n"); return 2; }
    double t = now_us();
    for (int r = 0; r < rounds; r++) batch(cmd, w);
    printf("%.1f\n", rounds * w / ((now_us() - t) / 1e6));
  }
  return 0;
}
