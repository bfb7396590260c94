/* kserve_rules.c: the KServe v2 request rules that do not depend on the encoding (JSON +
 * binary over HTTP, protobuf over gRPC). kserve_decode (kserve.c) and the gRPC codec
 * (src/grpc/grpc_codec.c) call these, so a limit or a check exists once; see kserve.h. */
#include "frontend/kserve.h"

#include "repo/config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BAD(...) cinfer_status_new(CINFER_INVALID_ARG, __VA_ARGS__)

cinfer_status *kserve_check_input_count(size_t n) {
  if (n == 0) return BAD("request must have a non-empty 'inputs' array");
  if (n > CINFER_MAX_INPUTS)
    return BAD("request has %zu inputs; the limit is CINFER_MAX_INPUTS = %d", n,
               CINFER_MAX_INPUTS);
  return NULL;
}

cinfer_status *kserve_check_output_count(size_t n) {
  if (n > CINFER_MAX_OUTPUTS)
    return BAD("request asks for %zu outputs; the limit is CINFER_MAX_OUTPUTS = %d", n,
               CINFER_MAX_OUTPUTS);
  return NULL;
}

cinfer_status *kserve_input_name(const kserve_input *prev, size_t n_prev, const char *name,
                                 cinfer_tensor *t) {
  if (!name || !name[0]) return BAD("inputs[%zu] needs a non-empty string 'name'", n_prev);
  for (size_t j = 0; j < n_prev; j++)
    if (!strcmp(prev[j].t.name, name)) return BAD("input '%s' appears more than once", name);
  t->name = name;
  return NULL;
}

cinfer_status *kserve_input_datatype(const char *name, const char *dt, size_t len,
                                     cinfer_tensor *t) {
  t->dtype = cinfer_dtype_parse(dt, len);
  if (t->dtype == CINFER_TYPE_INVALID || (len >= 5 && strncmp(dt, "TYPE_", 5) == 0))
    return BAD("input '%s': unknown datatype '%.*s'", name, (int)(len > 64 ? 64 : len), dt);
  return NULL;
}

cinfer_status *kserve_input_shape(const char *name, const int64_t *dims, size_t nd,
                                  const kserve_limits *lim, cinfer_tensor *t) {
  if (nd > CINFER_MAX_DIMS)
    return BAD("input '%s': shape has %zu dimensions; the limit is CINFER_MAX_DIMS = %d", name,
               nd, CINFER_MAX_DIMS);
  for (size_t i = 0; i < nd; i++) {
    if (dims[i] < 0 || dims[i] > (int64_t)9.0e15)
      return BAD("input '%s': shape[%zu] must be a non-negative integer", name, i);
    t->shape[i] = dims[i];
  }
  t->ndim = (int)nd;
  int64_t el = cinfer_shape_elements(t->shape, t->ndim);
  if (el < 0 || el > lim->max_tensor_elements)
    return BAD("input '%s': shape has more than the limit of %lld elements", name,
               (long long)lim->max_tensor_elements);
  return NULL;
}

cinfer_status *kserve_input_bytes(kserve_input *ki, const void *data, size_t len) {
  cinfer_tensor *t = &ki->t;
  t->data = data;
  t->byte_size = len;
  cinfer_status *st = cinfer_tensor_check(t);
  if (st) return st;
  /* Zero copy when the bytes sit at an address aligned for their element type; otherwise
   * copy them to aligned memory (kernels read typed elements). */
  size_t es = cinfer_dtype_size(t->dtype);
  if (es > 1 && ((uintptr_t)t->data % es) != 0) {
    void *copy = NULL;
    if (posix_memalign(&copy, 64, len ? len : 64)) return cinfer_status_oom(NULL);
    memcpy(copy, data, len);
    t->data = copy;
    free(ki->owned);
    ki->owned = copy;
  }
  return NULL;
}

cinfer_status *kserve_check_byte_size(const cinfer_tensor *t, const cinfer_config *cfg) {
  size_t es = cinfer_dtype_size(t->dtype);
  if (!cfg || t->dtype == CINFER_TYPE_BYTES || es == 0) return NULL;
  uint64_t want = (uint64_t)cinfer_shape_elements(t->shape, t->ndim) * es;
  if (want == t->byte_size) return NULL;
  return BAD("input byte size mismatch for input '%s' for model '%s'. Expected %llu, got %zu",
             t->name, cinfer_config_name(cfg), (unsigned long long)want, t->byte_size);
}

cinfer_status *kserve_input_shm(kserve_input *ki, shm_registry *r, const char *region,
                                uint64_t offset, uint64_t byte_size,
                                const cinfer_config *cfg) {
  cinfer_tensor *t = &ki->t;
  if (!r) return BAD("input '%s': shared memory is not available on this endpoint", t->name);
  void *addr;
  cinfer_status *st = shm_acquire(r, region, offset, byte_size, &ki->shm, &addr);
  if (st) return st;
  t->data = addr;
  t->byte_size = (size_t)byte_size;
  if ((st = kserve_check_byte_size(t, cfg))) return st;
  size_t es = cinfer_dtype_size(t->dtype);
  if (t->dtype == CINFER_TYPE_BYTES || (es > 1 && ((uintptr_t)t->data % es) != 0)) {
    void *copy = NULL;
    if (posix_memalign(&copy, 64, t->byte_size ? t->byte_size : 64)) return cinfer_status_oom(NULL);
    if (t->byte_size) memcpy(copy, t->data, t->byte_size);
    t->data = copy;
    free(ki->owned);
    ki->owned = copy;
  }
  return cinfer_tensor_check(t);
}

cinfer_status *kserve_output_shm(kserve_output_req *ko, shm_registry *r, const char *region,
                                 uint64_t offset, uint64_t byte_size) {
  if (!r) return BAD("output '%s': shared memory is not available on this endpoint", ko->name);
  cinfer_status *st = shm_acquire(r, region, offset, byte_size, &ko->shm, &ko->shm_addr);
  if (!st) ko->shm_size = byte_size;
  return st;
}

cinfer_status *kserve_output_to_shm(const kserve_output_req *ko, const cinfer_tensor *t) {
  if (t->byte_size > ko->shm_size)
    return BAD("shared memory size specified with the request for output '%s' (%llu bytes) "
               "should be at least %zu bytes to hold the results", t->name,
               (unsigned long long)ko->shm_size, t->byte_size);
  if (t->byte_size) memcpy(ko->shm_addr, t->data, t->byte_size);
  return NULL;
}

/* ---- request parameters and forwarded headers ---- */

cinfer_status *kserve_param_key_check(const char *key) {
  if (!strncmp(key, "triton_", 7))
    return BAD("parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.");
  return NULL;
}

cinfer_status *kserve_fwd_init(kserve_fwd *f, const char *flag, const char *pattern) {
  memset(f, 0, sizeof *f);
  if (!pattern || !*pattern) return NULL;
  int flags = REG_EXTENDED | REG_NOSUB | REG_ICASE; /* header names are case-insensitive */
  if (!strncmp(pattern, "(?-i)", 5)) pattern += 5, flags &= ~REG_ICASE;
  else if (!strncmp(pattern, "(?i)", 4)) pattern += 4;
  int rc = regcomp(&f->re, pattern, flags);
  if (rc) {
    char why[160];
    regerror(rc, &f->re, why, sizeof why);
    return BAD("%s '%s': %s (a POSIX extended regular expression, optionally after (?-i) or (?i))", flag,
               pattern, why);
  }
  f->on = true;
  return NULL;
}

void kserve_fwd_free(kserve_fwd *f) {
  if (f && f->on) regfree(&f->re);
  if (f) f->on = false;
}

static const char *const reserved_param_keys[] = {"sequence_id", "sequence_start", "sequence_end", "priority",
                                                  "timeout",     "headers",        "binary_data_output"};

bool kserve_fwd_match(const kserve_fwd *f, const char *name, size_t name_len) {
  if (!f->on) return false;
  char small[256], *key = name_len < sizeof small ? small : malloc(name_len + 1); /* regexec wants a C string */
  if (!key) return true; /* kserve_fwd_header reports the lack of memory */
  memcpy(key, name, name_len);
  key[name_len] = 0;
  bool m = regexec(&f->re, key, 0, NULL, 0) == 0;
  if (key != small) free(key);
  return m;
}

cinfer_status *kserve_fwd_header(const kserve_fwd *f, const char *name, size_t name_len, const char *value,
                                 size_t value_len, cinfer_request *r) {
  if (!kserve_fwd_match(f, name, name_len)) return NULL;
  char *key = strndup(name, name_len);
  if (!key) return cinfer_status_oom(NULL);
  bool reserved = !strncasecmp(key, "triton_", 7); /* header names are case-insensitive */
  for (size_t i = 0; !reserved && i < sizeof reserved_param_keys / sizeof *reserved_param_keys; i++)
    reserved = !strcasecmp(key, reserved_param_keys[i]);
  cinfer_status *st = reserved ? BAD("Header '%.200s' is reserved for Triton usage and cannot be forwarded.", key)
                               : cinfer_request_set_param_string(r, key, value, value_len);
  free(key);
  return st;
}
