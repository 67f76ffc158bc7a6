// Listening sockets inside another process's network namespace (Linux; part of corral_spawn.node), for the managed
// network of a sandbox: the sandbox's proxy variables point at 127.0.0.1:<port> in its own network namespace, and
// the server accepts there and tunnels to the proxy itself. Before, a Node forwarder process was started in the
// namespace for every such sandbox (nsenter + node: ~50 ms per start and a ~40 MB process for the command's life).
//
// A socket stays in the namespace it was created in, whoever holds it. A short-lived helper process (a plain fork: a
// process that shares its memory may not enter a user namespace) joins the user namespace that owns the target's
// network namespace (when it is not ours) and that network namespace, creates, binds and listens, passes the fds back over a socketpair and exits.
// The helper runs only system calls after the fork.
//
// JS interface (see src/sandbox/linux/managedNet.ts):
//   listenInNetns(pid, ports: number[]) -> fds: number[]   listening TCP sockets on 127.0.0.1:port in pid's network
//                                                           namespace (O_CLOEXEC, blocking: hand them to libuv);
//                                                           throws Error { errno } when that fails

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <node_api.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "netns.h"
#include "rawfork.h"

#define MAX_PORTS 16

// The helper's work. Returns 0 or an errno value; on success fds[0..n) are listening sockets.
static int listen_in(int userns, int netns, const uint32_t *ports, int n, int *fds) {
  if (userns >= 0 && setns(userns, CLONE_NEWUSER) < 0) return errno;
  if (setns(netns, CLONE_NEWNET) < 0) return errno;
  for (int i = 0; i < n; i++) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return errno;
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ports[i]),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 128) < 0) return errno;
    fds[i] = s;
  }
  return 0;
}

// Sends err and, when 0, the fds.
static void send_result(int sock, int err, const int *fds, int n) {
  char control[CMSG_SPACE(sizeof(int) * MAX_PORTS)];
  memset(control, 0, sizeof control);
  struct iovec iov = {.iov_base = &err, .iov_len = sizeof err};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  if (err == 0 && n > 0) {
    m.msg_control = control;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n);
  }
  while (sendmsg(sock, &m, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

static napi_value js_listen_in_netns(napi_env env, napi_callback_info info) {
  int32_t pid;
  uint32_t n;
  napi_value list;
  if (!corral_pid_and_list(env, info, &pid, &list, &n, MAX_PORTS,
                           "listenInNetns(pid: positive integer, ports: 1..16 port numbers)"))
    return NULL;
  uint32_t ports[MAX_PORTS];
  for (uint32_t i = 0; i < n; i++) {
    napi_value e;
    if (napi_get_element(env, list, i, &e) != napi_ok || napi_get_value_uint32(env, e, &ports[i]) != napi_ok ||
        ports[i] == 0 || ports[i] > 65535) {
      napi_throw_type_error(env, NULL, "listenInNetns: ports must be integers in 1..65535");
      return NULL;
    }
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/net", pid);
  int netns = open(path, O_RDONLY | O_CLOEXEC);
  if (netns < 0) return corral_throw_errno(env, errno, "listenInNetns: open net namespace");
  int userns = -1;
  int ue = corral_owner_userns(netns, &userns);
  if (ue != 0) {
    close(netns);
    return corral_throw_errno(env, ue, "listenInNetns: open user namespace");
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
    int e = errno;
    close(netns);
    if (userns >= 0) close(userns);
    return corral_throw_errno(env, e, "listenInNetns: socketpair");
  }
  int fork_errno = 0;
  long child = corral_raw_fork(&fork_errno);
  if (child == 0) {
    close(sv[0]);
    int fds[MAX_PORTS];
    int err = listen_in(userns, netns, ports, (int)n, fds);
    send_result(sv[1], err, fds, (int)n);
    _exit(0);
  }
  close(sv[1]);
  close(netns);
  if (userns >= 0) close(userns);
  if (child < 0) {
    close(sv[0]);
    return corral_throw_errno(env, fork_errno, "listenInNetns: fork");
  }
  int err = 0;
  int fds[MAX_PORTS];
  char control[CMSG_SPACE(sizeof(int) * MAX_PORTS)];
  struct iovec iov = {.iov_base = &err, .iov_len = sizeof err};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
  ssize_t got;
  do got = recvmsg(sv[0], &m, MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  int recv_errno = errno;
  close(sv[0]);
  corral_reap(child);
  if (got != (ssize_t)sizeof err) return corral_throw_errno(env, got < 0 ? recv_errno : EPROTO, "listenInNetns: helper");
  if (err != 0) return corral_throw_errno(env, err, "listenInNetns");
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int) * n)) {
    return corral_throw_errno(env, EPROTO, "listenInNetns: helper");
  }
  memcpy(fds, CMSG_DATA(c), sizeof(int) * n);
  napi_value result;
  napi_create_array_with_length(env, n, &result);
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    napi_create_int32(env, fds[i], &v);
    napi_set_element(env, result, i, v);
  }
  return result;
}

napi_status corral_netns_init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"listenInNetns", NULL, js_listen_in_netns, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, 1, props);
}
