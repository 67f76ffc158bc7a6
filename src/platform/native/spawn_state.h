// The native spawner's per-environment state, shared by its parent side (spawn.c: starting children) and its N-API
// glue (spawn_addon.c: exit watching, the module's exports and teardown). The child side is spawn_child.h.
#pragma once
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "reactor.h"
#include "spawn_child.h"


// ---------------------------------------------------------------------------------------------------------------
// Per-environment state and exit watching.

struct watched;
struct pending_exec;
struct exit_watch;

#define STACK_CACHE 32

struct addon_state {
  napi_env env;
  napi_ref exit_handler;
  napi_async_context async_ctx;
  uv_loop_t *loop;
  struct reactor reactor;        // our children's pidfds and (pipes.c) their output pipes
  struct watched *head;
  struct pending_exec *pending;  // async mode: children that may still run in our memory
  struct exit_watch *watches;    // watchExit: processes of others
  void *stacks[STACK_CACHE];     // free child stacks
  int nstacks;
  int devnull;
  int self_pidfd;  // a pidfd of this process for newPidNs children (opened on first use), or -1
  // The spawning thread runs as SCHED_BATCH from its first async spawn of a loop turn until the loop is about to
  // poll again (see batch_begin).
  uv_prepare_t batch_end;
  bool batch_ready;   // batch_end initialised
  bool batch_active;  // the thread is SCHED_BATCH now, by our doing
};

struct watched {
  struct reactor_item item;  // first: the reactor hands us this pointer
  struct addon_state *st;
  int pidfd;
  pid_t pid;
  struct pending_exec *pe;  // async mode, until the child has left our memory
  struct watched *prev, *next;
};

// watchExit: a process we did not start, watched through a pidfd that we only poll (never waitid on).
struct exit_watch {
  uv_poll_t poll;
  struct addon_state *st;
  int pidfd;
  napi_ref cb;
  struct exit_watch *prev, *next;
};

// Everything a child started in async mode may use until it has exec'd or exited.
struct pending_exec {
  // CLONE_CHILD_CLEARTID: non-zero until the kernel zeroes it when the child execs or exits (mm_release).
  volatile pid_t ctid;
  struct addon_state *st;
  struct watched *w;  // the child's exit watch, while it exists
  void *stack;
  void *cmd_stack;  // supervise: the command's stack
  char *file, *cwd;
  char **argv, **envp;
  struct child_args a;
  struct pending_exec *prev, *next;
};

// spawn.c
napi_value js_spawn(napi_env env, napi_callback_info info);
void release_pending(struct pending_exec *pe);
void free_pending(struct pending_exec *pe);
void unlink_pending(struct pending_exec *pe);
void batch_finish(struct addon_state *st);
void corral_spawn_allow_batch(bool allow);
napi_value throw_errno(napi_env env, int err);
char *get_string(napi_env env, napi_value v);
char **get_string_array(napi_env env, napi_value arr);
void free_string_array(char **v);
// spawn_addon.c
void on_pidfd(struct reactor_item *it, uint32_t events);
void free_watched(struct reactor_item *it);
void unlink_watched(struct watched *w);

