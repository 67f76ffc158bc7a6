// Reading children's output pipes, and base64 for the output notifications (Linux; part of corral_spawn.node).
//
// A net.Socket per pipe costs the server a stream object, its state machine and a JS callback per 64 KiB read, and
// about 60 us to create and tear down (two per child). Here a pipe is one fd in the addon's epoll set (reactor.h): when
// it is readable we read(2) into the caller's scratch buffer until the pipe is empty or the buffer full (other pipes get
// their turn then) and call JS once with the byte count. Nothing is allocated per read: JS copies what it keeps
// before it returns. EOF and read errors close the pipe and call back with 0.
//
// JS interface (see src/platform/pipes.ts):
//   pipeOpen(fd, scratch: Uint8Array, onData(n: number)) -> handle
//                                                          takes ownership of fd (made non-blocking);
//                                                          n > 0: scratch[0, n) holds new data, valid during the call;
//                                                          n = 0: EOF, the fd is closed
//   pipePause(handle), pipeResume(handle)                 stop / restart reading (backpressure)
//   pipeClose(handle)                                      closes the fd now; onData is not called again
//   base64Into(src: Uint8Array, dst: Uint8Array, offset) -> bytes written   standard alphabet with padding; dst must
//                                                          have room for 4 * ceil(src.length / 3) bytes at offset

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "pipes.h"
#include "reactor.h"

struct pipes_state {
  napi_env env;
  struct reactor *reactor;
  struct pipe_reader *head;
};

struct pipe_reader {
  struct reactor_item item;  // first: the reactor hands us this pointer
  struct pipes_state *st;    // NULL after environment teardown
  int fd;                    // -1 once closed
  int refs;                  // the reactor registration (until retired) + the JS external (until finalized)
  napi_ref cb;
  napi_ref scratch_ref;  // keeps the scratch buffer alive
  uint8_t *scratch;
  size_t scratch_len;
  struct pipe_reader *prev, *next;
};

// Frees the record once both the reactor and the JS external are done with it. Never touches references: this runs
// from finalizers too, possibly while the environment is being torn down.
static void release(struct pipe_reader *r) {
  if (--r->refs == 0) free(r);
}

static void on_retired(struct reactor_item *it) { release((struct pipe_reader *)it); }

static void unlink_reader(struct pipe_reader *r) {
  if (!r->st) return;
  if (r->prev) r->prev->next = r->next;
  else r->st->head = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
}

// Stops everything: retires the reader and closes its fd; returns the callback
// reference (caller deletes it). The scratch reference is dropped here too, except during environment teardown
// (env_alive false), which frees it.
static napi_ref shut(struct pipe_reader *r, bool env_alive) {
  napi_ref cb = r->cb;
  r->cb = NULL;
  if (r->scratch_ref && env_alive && r->st) napi_delete_reference(r->st->env, r->scratch_ref);
  r->scratch_ref = NULL;
  if (r->fd < 0) return cb;
  unlink_reader(r);
  int fd = r->fd;
  r->fd = -1;
  reactor_retire(&r->item);  // before close(): see reactor.h
  close(fd);
  return cb;
}

static void call_js(struct pipe_reader *r, napi_ref ref, size_t len) {
  napi_env env = r->st->env;
  napi_value fn, arg;
  if (napi_get_reference_value(env, ref, &fn) != napi_ok || !fn) return;
  napi_create_uint32(env, (uint32_t)len, &arg);
  reactor_call(r->st->reactor, fn, 1, &arg);
}

static void on_readable(struct reactor_item *it, uint32_t events) {
  (void)events;
  struct pipe_reader *r = (struct pipe_reader *)it;
  size_t got = 0;
  bool eof = false;
  // Read until EAGAIN, not just once: a busy writer refills the pipe while we copy, and bigger batches mean fewer
  // callbacks and socket writes (stopping after a short read cost ~15% of the 64 MiB throughput).
  while (!eof && got < r->scratch_len) {
    ssize_t n = read(r->fd, r->scratch + got, r->scratch_len - got);
    if (n > 0) got += (size_t)n;
    else if (n == 0) eof = true;
    else if (errno == EINTR) continue;
    else if (errno == EAGAIN) break;
    else eof = true;  // EIO and friends: nothing more will come
  }
  // The data callback may pause or close this reader: the reactor keeps r allocated until its dispatch is over.
  if (got > 0 && r->cb) call_js(r, r->cb, got);
  if (eof && r->fd >= 0) {
    napi_ref cb = shut(r, true);
    if (cb) {
      call_js(r, cb, 0);
      napi_delete_reference(r->st->env, cb);
    }
  }
}

static void finalize_external(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  release(data);
}

static struct pipes_state *state_of(napi_env env, napi_callback_info info, size_t *argc, napi_value *args) {
  void *data = NULL;
  if (napi_get_cb_info(env, info, argc, args, NULL, &data) != napi_ok) return NULL;
  return data;
}

static struct pipe_reader *reader_arg(napi_env env, napi_value v) {
  void *p = NULL;
  if (napi_get_value_external(env, v, &p) != napi_ok || !p) {
    napi_throw_type_error(env, NULL, "expected a pipe handle");
    return NULL;
  }
  return p;
}

static bool bytes_of(napi_env env, napi_value v, uint8_t **data, size_t *len);

static napi_value js_pipe_open(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value args[3];
  struct pipes_state *st = state_of(env, info, &argc, args);
  int32_t fd = -1;
  napi_valuetype t = napi_undefined;
  uint8_t *scratch = NULL;
  size_t scratch_len = 0;
  if (!st || argc < 3 || napi_get_value_int32(env, args[0], &fd) != napi_ok || fd < 0 ||
      !bytes_of(env, args[1], &scratch, &scratch_len) || scratch_len == 0 || napi_typeof(env, args[2], &t) != napi_ok ||
      t != napi_function) {
    napi_throw_type_error(env, NULL, "pipeOpen(fd: non-negative integer, scratch: non-empty Uint8Array, onData: function)");
    return NULL;
  }
  // Our pipes are created O_CLOEXEC only, so O_NONBLOCK is the only status flag to set.
  if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
    napi_throw_error(env, NULL, strerror(errno));
    return NULL;
  }
  struct pipe_reader *r = calloc(1, sizeof *r);
  napi_value ext;
  if (!r || napi_create_reference(env, args[1], 1, &r->scratch_ref) != napi_ok ||
      napi_create_reference(env, args[2], 1, &r->cb) != napi_ok ||
      napi_create_external(env, r, finalize_external, NULL, &ext) != napi_ok) {
    if (r && r->scratch_ref) napi_delete_reference(env, r->scratch_ref);
    if (r && r->cb) napi_delete_reference(env, r->cb);
    free(r);
    napi_throw_error(env, NULL, "pipeOpen: out of memory");
    return NULL;
  }
  // From here on the external owns one reference to r.
  r->refs = 1;
  r->st = st;
  r->fd = fd;
  r->scratch = scratch;
  r->scratch_len = scratch_len;
  r->item.on_event = on_readable;
  r->item.on_retired = on_retired;
  int e = reactor_add(st->reactor, &r->item, fd);
  if (e != 0) {
    napi_delete_reference(env, r->scratch_ref);
    napi_delete_reference(env, r->cb);
    r->scratch_ref = r->cb = NULL;
    r->fd = -1;
    close(fd);  // ours now, whatever happens
    napi_throw_error(env, NULL, strerror(e));
    return NULL;
  }
  r->refs++;  // the reactor's
  r->next = st->head;
  if (st->head) st->head->prev = r;
  st->head = r;
  return ext;
}

static napi_value js_pipe_pause(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value arg;
  if (!state_of(env, info, &argc, &arg) || argc < 1) return NULL;
  struct pipe_reader *r = reader_arg(env, arg);
  if (r && r->fd >= 0) reactor_enable(r->item.r, &r->item, r->fd, false);
  return NULL;
}

static napi_value js_pipe_resume(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value arg;
  if (!state_of(env, info, &argc, &arg) || argc < 1) return NULL;
  struct pipe_reader *r = reader_arg(env, arg);
  if (r && r->fd >= 0) reactor_enable(r->item.r, &r->item, r->fd, true);
  return NULL;
}

static napi_value js_pipe_close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value arg;
  if (!state_of(env, info, &argc, &arg) || argc < 1) return NULL;
  struct pipe_reader *r = reader_arg(env, arg);
  if (!r) return NULL;
  napi_ref cb = shut(r, true);
  if (cb) napi_delete_reference(env, cb);
  return NULL;
}

// ---- base64 ------------------------------------------------------------------------------------------------------

#if defined(__x86_64__)
static bool have_ssse3;
#endif
static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static uint16_t pair_table[4096];  // 12 input bits -> two output characters (little-endian byte order)

static void init_pairs(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  have_ssse3 = __builtin_cpu_supports("ssse3");
#endif
  for (int i = 0; i < 4096; i++) {
    uint8_t two[2] = {(uint8_t)B64[i >> 6], (uint8_t)B64[i & 63]};
    memcpy(&pair_table[i], two, 2);
  }
}

// See pipes.h.
void corral_pipes_allow_simd(bool allow) {
#if defined(__x86_64__)
  if (!allow) __atomic_store_n(&have_ssse3, false, __ATOMIC_RELAXED);
#else
  (void)allow;
#endif
}

#if defined(__x86_64__)
#include <immintrin.h>

// 12 input bytes -> 16 characters per round (the multiply-shift method of Muła and Lemire): each 32-bit lane gets one
// 3-byte group as [b1 b0 b2 b1], two multiplies move its four 6-bit fields into separate bytes, and a 16-entry
// table maps each field's range to the offset of its character. Reads 4 bytes past the 12 it encodes. (An AVX2
// version, 24 bytes per round, measured no faster: ~13 ms per 64 MiB either way, stores are the limit.)
__attribute__((target("ssse3"))) static size_t base64_ssse3(const uint8_t *src, size_t n, uint8_t *out, size_t *used) {
  const __m128i shuf = _mm_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
  const __m128i offsets = _mm_setr_epi8(71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 65, 0, 0);
  size_t i = 0, o = 0;
  for (; i + 16 <= n; i += 12, o += 16) {
    __m128i in = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(src + i)), shuf);
    __m128i t0 = _mm_and_si128(in, _mm_set1_epi32(0x0fc0fc00));
    __m128i t1 = _mm_mulhi_epu16(t0, _mm_set1_epi32(0x04000040));
    __m128i t2 = _mm_and_si128(in, _mm_set1_epi32(0x003f03f0));
    __m128i t3 = _mm_mullo_epi16(t2, _mm_set1_epi32(0x01000010));
    __m128i idx = _mm_or_si128(t1, t3);
    __m128i r = _mm_subs_epu8(idx, _mm_set1_epi8(51));
    __m128i below26 = _mm_cmpgt_epi8(_mm_set1_epi8(26), idx);
    r = _mm_or_si128(r, _mm_and_si128(below26, _mm_set1_epi8(13)));
    r = _mm_add_epi8(_mm_shuffle_epi8(offsets, r), idx);
    _mm_storeu_si128((__m128i *)(out + o), r);
  }
  *used = i;
  return o;
}
#endif

static size_t base64_encode(const uint8_t *src, size_t n, uint8_t *dst) {
  uint8_t *out = dst;
  size_t i = 0;
#if defined(__x86_64__)
  if (have_ssse3) out += base64_ssse3(src, n, out, &i);
#endif
  // 6 input bytes -> 8 output bytes per round, through two 24-bit groups.
  for (; i + 6 <= n; i += 6) {
    uint32_t a = ((uint32_t)src[i] << 16) | ((uint32_t)src[i + 1] << 8) | src[i + 2];
    uint32_t b = ((uint32_t)src[i + 3] << 16) | ((uint32_t)src[i + 4] << 8) | src[i + 5];
    uint64_t w = (uint64_t)pair_table[a >> 12] | ((uint64_t)pair_table[a & 0xfff] << 16) |
                 ((uint64_t)pair_table[b >> 12] << 32) | ((uint64_t)pair_table[b & 0xfff] << 48);
    memcpy(out, &w, 8);
    out += 8;
  }
  for (; i + 3 <= n; i += 3) {
    uint32_t a = ((uint32_t)src[i] << 16) | ((uint32_t)src[i + 1] << 8) | src[i + 2];
    uint32_t w = (uint32_t)pair_table[a >> 12] | ((uint32_t)pair_table[a & 0xfff] << 16);
    memcpy(out, &w, 4);
    out += 4;
  }
  size_t rest = n - i;
  if (rest == 1) {
    uint32_t a = (uint32_t)src[i] << 16;
    out[0] = (uint8_t)B64[(a >> 18) & 63];
    out[1] = (uint8_t)B64[(a >> 12) & 63];
    out[2] = '=';
    out[3] = '=';
    out += 4;
  } else if (rest == 2) {
    uint32_t a = ((uint32_t)src[i] << 16) | ((uint32_t)src[i + 1] << 8);
    out[0] = (uint8_t)B64[(a >> 18) & 63];
    out[1] = (uint8_t)B64[(a >> 12) & 63];
    out[2] = (uint8_t)B64[(a >> 6) & 63];
    out[3] = '=';
    out += 4;
  }
  return (size_t)(out - dst);
}

static bool bytes_of(napi_env env, napi_value v, uint8_t **data, size_t *len) {
  napi_typedarray_type type;
  size_t length;
  void *ptr;
  napi_value ab;
  size_t offset;
  if (napi_get_typedarray_info(env, v, &type, &length, &ptr, &ab, &offset) != napi_ok || type != napi_uint8_array)
    return false;
  *data = ptr;
  *len = length;
  return true;
}

static napi_value js_base64_into(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value args[3];
  uint8_t *src, *dst;
  size_t slen, dlen;
  int64_t off = -1;
  if (!state_of(env, info, &argc, args) || argc < 3 || !bytes_of(env, args[0], &src, &slen) ||
      !bytes_of(env, args[1], &dst, &dlen) || napi_get_value_int64(env, args[2], &off) != napi_ok || off < 0) {
    napi_throw_type_error(env, NULL, "base64Into(src: Uint8Array, dst: Uint8Array, offset: non-negative integer)");
    return NULL;
  }
  size_t need = (slen + 2) / 3 * 4;
  if ((size_t)off > dlen || dlen - (size_t)off < need) {
    napi_throw_range_error(env, NULL, "base64Into: destination too small");
    return NULL;
  }
  size_t n = base64_encode(src, slen, dst + off);
  napi_value res;
  napi_create_uint32(env, (uint32_t)n, &res);
  return res;
}

// ---- set-up ------------------------------------------------------------------------------------------------------

// Environment teardown (runs before the reactor's, which spawn.c registered first): close every pipe; the references
// go with the environment.
static void cleanup_pipes(void *arg) {
  struct pipes_state *st = arg;
  while (st->head) {
    struct pipe_reader *r = st->head;
    (void)shut(r, false);  // unlinks r from st->head and retires it
    r->st = NULL;
  }
  free(st);
}

napi_status corral_pipes_init(napi_env env, napi_value exports, struct reactor *reactor) {
  static uv_once_t once = UV_ONCE_INIT;
  uv_once(&once, init_pairs);
  struct pipes_state *st = calloc(1, sizeof *st);
  if (!st) return napi_generic_failure;
  st->env = env;
  st->reactor = reactor;
  napi_add_env_cleanup_hook(env, cleanup_pipes, st);
  napi_property_descriptor props[] = {
      {"pipeOpen", NULL, js_pipe_open, NULL, NULL, NULL, napi_default, st},
      {"pipePause", NULL, js_pipe_pause, NULL, NULL, NULL, napi_default, st},
      {"pipeResume", NULL, js_pipe_resume, NULL, NULL, NULL, napi_default, st},
      {"pipeClose", NULL, js_pipe_close, NULL, NULL, NULL, napi_default, st},
      {"base64Into", NULL, js_base64_into, NULL, NULL, NULL, napi_default, st},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
