// See reactor.h.
#define _GNU_SOURCE
#include "reactor.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#define MAX_EVENTS 128

static void unlink_live(struct reactor *r, struct reactor_item *it) {
  if (it->prev) it->prev->next = it->next;
  else if (r->live == it) r->live = it->next;
  if (it->next) it->next->prev = it->prev;
  it->prev = it->next = NULL;
}

static void run_retired(struct reactor *r) {
  while (r->retired) {
    struct reactor_item *it = r->retired;
    r->retired = it->next;
    it->next = NULL;
    it->on_retired(it);
  }
}

static void on_poll(uv_poll_t *handle, int status, int events) {
  (void)status;
  (void)events;
  struct reactor *r = handle->data;
  struct epoll_event ev[MAX_EVENTS];
  int n;
  do n = epoll_wait(r->epfd, ev, MAX_EVENTS, 0);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return;
  napi_env env = r->env;
  napi_handle_scope hs;
  if (napi_open_handle_scope(env, &hs) != napi_ok) return;
  napi_value resource;
  napi_callback_scope cs;
  bool scoped = napi_get_reference_value(env, r->resource, &resource) == napi_ok &&
                napi_open_callback_scope(env, resource, r->async_ctx, &cs) == napi_ok;
  r->dispatching++;
  for (int i = 0; i < n; i++) {
    struct reactor_item *it = ev[i].data.ptr;
    if (it->retired) continue;  // closed by an earlier callback of this round
    napi_handle_scope item_scope;
    if (napi_open_handle_scope(env, &item_scope) != napi_ok) continue;
    it->on_event(it, ev[i].events);
    napi_close_handle_scope(env, item_scope);
  }
  r->dispatching--;
  if (scoped) napi_close_callback_scope(env, cs);  // JS's nextTicks and microtasks run here
  napi_close_handle_scope(env, hs);
  if (r->dispatching == 0) run_retired(r);
}

int reactor_init(struct reactor *r, napi_env env, uv_loop_t *loop, napi_async_context async_ctx) {
  r->env = env;
  r->async_ctx = async_ctx;
  r->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (r->epfd < 0) return errno;
  napi_value resource;
  if (napi_create_object(env, &resource) != napi_ok || napi_create_reference(env, resource, 1, &r->resource) != napi_ok) {
    close(r->epfd);
    r->epfd = -1;
    return ENOMEM;
  }
  int e = uv_poll_init(loop, &r->poll, r->epfd);
  if (e == 0) {
    r->poll.data = r;
    e = uv_poll_start(&r->poll, UV_READABLE, on_poll);
    if (e != 0) uv_close((uv_handle_t *)&r->poll, NULL);
  }
  if (e != 0) {
    close(r->epfd);
    r->epfd = -1;
    return -e;
  }
  r->poll_started = true;
  // Like one uv_poll handle per fd: the loop stays alive while something is watched, not for an idle reactor.
  uv_unref((uv_handle_t *)&r->poll);
  return 0;
}

int reactor_add(struct reactor *r, struct reactor_item *it, int fd) { return reactor_add_events(r, it, fd, EPOLLIN); }

int reactor_add_events(struct reactor *r, struct reactor_item *it, int fd, uint32_t events) {
  struct epoll_event ev = {.events = events, .data.ptr = it};
  if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) return errno;
  it->r = r;
  it->fd = fd;
  it->retired = false;
  it->prev = NULL;
  it->next = r->live;
  if (r->live) r->live->prev = it;
  r->live = it;
  if (r->nlive++ == 0 && r->poll_started) uv_ref((uv_handle_t *)&r->poll);
  return 0;
}

int reactor_enable(struct reactor *r, struct reactor_item *it, int fd, bool on) {
  struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.ptr = it};
  return epoll_ctl(r->epfd, EPOLL_CTL_MOD, fd, &ev) < 0 ? errno : 0;
}

void reactor_retire(struct reactor_item *it) {
  struct reactor *r = it->r;
  if (it->retired) return;
  it->retired = true;
  if (!r) {
    it->on_retired(it);
    return;
  }
  if (r->epfd >= 0) epoll_ctl(r->epfd, EPOLL_CTL_DEL, it->fd, NULL);
  unlink_live(r, it);
  if (--r->nlive == 0 && r->poll_started) uv_unref((uv_handle_t *)&r->poll);
  if (r->dispatching > 0) {
    it->next = r->retired;
    r->retired = it;
  } else {
    it->on_retired(it);
  }
}

void reactor_call(struct reactor *r, napi_value fn, size_t argc, const napi_value *argv) {
  napi_env env = r->env;
  napi_value recv, result;
  napi_get_global(env, &recv);
  napi_status s = napi_call_function(env, recv, fn, argc, argv, &result);
  if (s == napi_pending_exception) {
    napi_value err;
    napi_get_and_clear_last_exception(env, &err);
    napi_fatal_exception(env, err);
  }
}

void reactor_close(struct reactor *r) {
  if (r->poll_started) {
    uv_poll_stop(&r->poll);
    uv_close((uv_handle_t *)&r->poll, NULL);
    r->poll_started = false;
  }
  if (r->epfd >= 0) close(r->epfd);
  r->epfd = -1;
  while (r->live) {
    struct reactor_item *it = r->live;
    unlink_live(r, it);
    it->r = NULL;
  }
  r->nlive = 0;
  run_retired(r);
}
