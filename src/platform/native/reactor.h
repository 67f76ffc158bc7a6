// One epoll instance for every fd the addon watches (children's pidfds, their output pipes), polled by a single
// uv_poll handle on the Node loop.
//
// A uv_poll handle per fd costs about 5 epoll_ctl calls over its life (libuv checks each new fd by adding and removing
// it, then adds, removes and removes again on close) plus an ioctl, and every ready handle is its own JS callback
// with its own microtask and nextTick round. Here an fd costs an EPOLL_CTL_ADD and a DEL, and all
// events of one loop turn are delivered inside one callback scope: JS's nextTick queue (where the exec server
// batches its socket writes) runs once per turn, after all of them.
#pragma once
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct reactor;

struct reactor_item {
  // Called with the epoll events of the item's fd, inside the reactor's callback and handle scope.
  void (*on_event)(struct reactor_item *it, uint32_t events);
  // Called once the item is retired and no dispatch can still see it (its fd is closed by then).
  void (*on_retired)(struct reactor_item *it);
  struct reactor *r;
  int fd;
  bool retired;
  struct reactor_item *prev, *next;  // live items, or the list of items retired during a dispatch
};

struct reactor {
  napi_env env;
  napi_async_context async_ctx;
  napi_ref resource;  // the resource object of the callback scopes
  uv_poll_t poll;
  int epfd;
  int dispatching;
  bool poll_started;
  struct reactor_item *live;
  int nlive;  // the loop is kept alive (the poll handle referenced) while this is > 0
  struct reactor_item *retired;
};

// Returns 0 or an errno value.
int reactor_init(struct reactor *r, napi_env env, uv_loop_t *loop, napi_async_context async_ctx);
// Starts watching fd for input (EPOLLIN; hang-up and errors are always reported). Returns 0 or an errno value.
int reactor_add(struct reactor *r, struct reactor_item *it, int fd);
// Starts watching fd for the given epoll events (EPOLLIN, EPOLLOUT, EPOLLET, ...). Returns 0 or an errno value.
int reactor_add_events(struct reactor *r, struct reactor_item *it, int fd, uint32_t events);
// Stops (false) or restarts (true) reporting fd's input. Returns 0 or an errno value.
int reactor_enable(struct reactor *r, struct reactor_item *it, int fd, bool on);
// Stops watching the item's fd; call it BEFORE closing the fd. (Closing does not take an fd out of epoll while another
// copy of it is open, and children cloned but not yet exec'd hold copies of all of ours.) on_retired runs now, or
// after the current dispatch.
void reactor_retire(struct reactor_item *it);
// Calls fn(args) from an item's on_event: a JS exception becomes an uncaught exception, as for any other callback.
void reactor_call(struct reactor *r, napi_value fn, size_t argc, const napi_value *argv);
// Environment teardown: stops polling and closes the epoll fd. Live items are left to their owners.
void reactor_close(struct reactor *r);
