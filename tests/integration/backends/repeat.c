/* repeat.c: a decoupled test backend (shared object, backend name "repeat", in the spirit
 * of Triton's QA model repeat_int32) for the generate extension's tests. Input IN (INT32,
 * any number of elements): one response per element with OUT (INT32 [1]) = the element
 * and IDX (UINT32 [1]) = its position, then a FINAL response without outputs. A negative
 * element ends the request there with an error (a failure after responses have gone
 * out: what a streaming client must see mid-stream). Responds from execute itself.
 * Optional inputs as Triton's example repeat model has them (for its
 * simple_grpc_custom_repeat.py client): DELAY (UINT32, one per element: milliseconds to wait
 * before that element's response) and WAIT (UINT32 [1]: milliseconds before the FINAL one). */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "cinfer/backend.h"

static cinfer_status *rp_load(const cinfer_model_load_info *info, void **model) {
  (void)info;
  *model = NULL;
  return NULL;
}
static void rp_unload(void *model) { (void)model; }
static cinfer_status *rp_instance_create(void *model, const cinfer_instance_info *info, void **instance) {
  (void)model, (void)info;
  *instance = NULL;
  return NULL;
}
static void rp_instance_destroy(void *instance) { (void)instance; }

static void sleep_ms(uint32_t ms) {
  if (!ms) return; /* nanosleep(0) still waits for the timer slack (~50 us) */
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Element i of an optional UINT32 input, 0 when absent or short. */
static uint32_t u32_at(const cinfer_tensor *t, int64_t i) {
  uint32_t v = 0;
  if (t && t->dtype == CINFER_TYPE_UINT32 && (uint64_t)(i + 1) * 4 <= t->byte_size)
    memcpy(&v, (const char *)t->data + i * 4, 4);
  return v > 60000 ? 60000 : v;
}

static void run(cinfer_request *r) {
  const cinfer_tensor *in = cinfer_request_input_by_name(r, "IN");
  const cinfer_tensor *delay = cinfer_request_input_by_name(r, "DELAY");
  const cinfer_tensor *wait = cinfer_request_input_by_name(r, "WAIT");
  int64_t n = in ? cinfer_shape_elements(in->shape, in->ndim) : 0;
  for (int64_t i = 0; i < n; i++) {
    sleep_ms(u32_at(delay, i));
    int32_t v;
    memcpy(&v, (const char *)in->data + i * 4, 4);
    if (v < 0) {
      cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL,
                             cinfer_status_new(CINFER_INTERNAL, "repeat: element %lld is negative (%d)",
                                               (long long)i, v));
      return;
    }
    if (cinfer_request_is_cancelled(r)) {
      cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL,
                             cinfer_status_new(CINFER_CANCELLED, "repeat: cancelled"));
      return;
    }
    uint32_t idx = (uint32_t)i;
    cinfer_tensor out[2] = {
        {.name = "OUT", .dtype = CINFER_TYPE_INT32, .ndim = 1, .shape = {1}, .data = &v, .byte_size = 4},
        {.name = "IDX", .dtype = CINFER_TYPE_UINT32, .ndim = 1, .shape = {1}, .data = &idx, .byte_size = 4}};
    cinfer_status *st = cinfer_request_respond(r, out, 2, 0, NULL);
    if (st) { /* the core has finished the request with the error */
      cinfer_status_free(st);
      return;
    }
  }
  sleep_ms(u32_at(wait, 0));
  cinfer_status_free(cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL, NULL));
}

static cinfer_status *rp_execute(void *instance, cinfer_batch *b) {
  (void)instance;
  for (uint32_t k = 0; k < b->n_requests; k++) run(b->requests[k]);
  return NULL;
}

static const cinfer_backend_iface repeat_iface = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "repeat",
    .flags = CINFER_BACKEND_DECOUPLED,
    .model_load = rp_load,
    .model_unload = rp_unload,
    .instance_create = rp_instance_create,
    .instance_destroy = rp_instance_destroy,
    .execute = rp_execute,
};

CINFER_BACKEND_EXPORT const cinfer_backend_iface *cinfer_backend_entry(uint32_t core_abi_major,
                                                                       uint32_t core_abi_minor) {
  (void)core_abi_major, (void)core_abi_minor;
  return &repeat_iface;
}
