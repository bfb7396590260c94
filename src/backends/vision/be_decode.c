/* be_decode.c: the image_decode backend. BYTES (each element one JPEG or PNG file) ->
 * UINT8 HWC RGB.
 *
 * Config:
 *   input 0   TYPE_STRING, one image per element (dims [1] with max_batch_size > 0)
 *   output 0  TYPE_UINT8, dims [-1, -1, 3] (H, W, RGB), or [-1, -1, -1, 3] when the model
 *             does not batch and a request may carry several images
 *   parameters: max_pixels (default 67108864 = 64 Mpx): the most pixels one request may
 *             decode to, all its images together; checked from the headers first.
 *
 * Images of one request must have one size (they form one tensor); requests batched
 * together may differ, which is why this backend is decoupled: it answers each request
 * with its own output shape, and a bad image fails only its own request (400). */
#include <stdlib.h>
#include <string.h>

#include "backends/vision/be.h"

typedef struct dec_model {
  const char *model_name, *in, *out;
  bool batching;
  int out_ndim; /* 3: one image per request (or per row), 4: [n, H, W, 3] */
  uint64_t max_pixels;
} dec_model;

static cinfer_status *dec_load(const cinfer_model_load_info *info, void **model) {
  static const char *const known[] = {"max_pixels", NULL};
  vp p;
  cinfer_status *st = vp_open(&p, info, "image_decode", known);
  if (st) return st;
  cinfer_config_io in, out;
  int64_t maxpx;
  bool batching = cinfer_config_max_batch_size(info->config) > 0;
  if ((st = vp_int(&p, "max_pixels", 64ll << 20, 1, 1ll << 40, &maxpx)) ||
      (st = vb_check_io(&p, true, 0, CINFER_TYPE_BYTES, CINFER_TYPE_INVALID, -1, NULL, &in)) ||
      (st = vb_check_io(&p, false, 0, CINFER_TYPE_UINT8, CINFER_TYPE_INVALID, -1, NULL, &out)))
    return st;
  if (cinfer_config_input_count(info->config) != 1 || cinfer_config_output_count(info->config) != 1)
    return vp_err(&p, "takes one input (the encoded images) and one output (the pixels)");
  bool ok3 = out.ndim == 3 && out.dims[2] == 3 && out.dims[0] == -1 && out.dims[1] == -1;
  bool ok4 = !batching && out.ndim == 4 && out.dims[3] == 3 && out.dims[1] == -1 && out.dims[2] == -1;
  if (!ok3 && !ok4)
    return vp_err(&p, "output '%s' must have dims [-1, -1, 3]%s", out.name,
                  batching ? "" : " or [-1, -1, -1, 3]");
  dec_model *m = calloc(1, sizeof *m);
  if (!m) return cinfer_status_oom(NULL);
  *m = (dec_model){info->model_name, in.name, out.name, batching, out.ndim, (uint64_t)maxpx};
  *model = m;
  return NULL;
}

static void dec_unload(void *model) { free(model); }

static cinfer_status *dec_instance(void *model, const cinfer_instance_info *info, void **inst) {
  (void)info;
  *inst = model;
  return NULL;
}

static void dec_instance_destroy(void *inst) { (void)inst; }

/* Element i of a BYTES tensor already checked by cinfer_tensor_check. */
static const uint8_t *bytes_at(const cinfer_tensor *t, int64_t i, size_t *len) {
  const uint8_t *p = t->data;
  size_t off = 0;
  for (int64_t k = 0;; k++) {
    uint32_t l = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 | (uint32_t)p[off + 2] << 16 |
                 (uint32_t)p[off + 3] << 24;
    if (k == i) {
      *len = l;
      return p + off + 4;
    }
    off += 4 + (size_t)l;
  }
}

static cinfer_status *decode_request(const dec_model *m, cinfer_request *r) {
  const cinfer_tensor *t;
  cinfer_status *st = vb_input(r, m->in, CINFER_TYPE_BYTES, -1, &t);
  if (st) return st;
  int64_t n = cinfer_shape_elements(t->shape, t->ndim);
  if (n < 1) return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' holds no image", m->in);
  if (m->out_ndim == 3 && !m->batching && n != 1)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "input '%s' holds %lld images; this model takes one per request",
                             m->in, (long long)n);
  /* Headers first: sizes must agree and the total stay under the limit. */
  int w0 = 0, h0 = 0;
  uint64_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    size_t len;
    const uint8_t *d = bytes_at(t, i, &len);
    int w, h;
    if ((st = vis_probe(d, len, &w, &h)))
      return n > 1 ? cinfer_status_prefix(st, "image %lld of %lld", (long long)i + 1, (long long)n) : st;
    if (i == 0) w0 = w, h0 = h;
    else if (w != w0 || h != h0)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "image %lld is %dx%d but image 1 is %dx%d: the images of one "
                               "request form one tensor and must have one size",
                               (long long)i + 1, w, h, w0, h0);
    total += (uint64_t)w * (uint64_t)h;
    if (total > m->max_pixels)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "the request's images decode to more than %llu pixels "
                               "(parameter max_pixels)",
                               (unsigned long long)m->max_pixels);
  }
  size_t one = (size_t)w0 * (size_t)h0 * 3;
  uint8_t *px = NULL;
  if (n == 1) { /* the common case: the decoder's buffer is the output */
    size_t len;
    const uint8_t *d = bytes_at(t, 0, &len);
    int w, h;
    if ((st = vis_decode(d, len, m->max_pixels, &px, &w, &h))) return st;
    if (w != w0 || h != h0) {
      free(px);
      return cinfer_status_new(CINFER_INVALID_ARG, "image changed size while decoding");
    }
  } else if (!(px = malloc(one * (size_t)n))) {
    return cinfer_status_oom("decoded images");
  }
  for (int64_t i = 0; n > 1 && i < n; i++) {
    size_t len;
    const uint8_t *d = bytes_at(t, i, &len);
    uint8_t *rgb;
    int w, h;
    if ((st = vis_decode(d, len, m->max_pixels, &rgb, &w, &h))) {
      free(px);
      return n > 1 ? cinfer_status_prefix(st, "image %lld of %lld", (long long)i + 1, (long long)n) : st;
    }
    if (w != w0 || h != h0) { /* the header lied between probe and decode: cannot happen */
      free(rgb), free(px);
      return cinfer_status_new(CINFER_INVALID_ARG, "image %lld changed size while decoding", (long long)i + 1);
    }
    memcpy(px + one * (size_t)i, rgb, one);
    free(rgb);
  }
  cinfer_tensor out = {.name = m->out, .dtype = CINFER_TYPE_UINT8, .data = px,
                       .byte_size = one * (size_t)n};
  int64_t dims[3] = {h0, w0, 3};
  if (m->batching || m->out_ndim == 4) {
    out.ndim = 4;
    out.shape[0] = n;
    memcpy(out.shape + 1, dims, sizeof dims);
  } else {
    out.ndim = 3;
    memcpy(out.shape, dims, sizeof dims);
  }
  st = cinfer_request_respond(r, &out, 1, CINFER_RESPONSE_FINAL, NULL);
  free(px);
  cinfer_status_free(st); /* the core has already failed the request with it */
  return NULL;
}

static cinfer_status *dec_execute(void *inst, cinfer_batch *b) {
  const dec_model *m = inst;
  for (uint32_t k = 0; k < b->n_requests; k++) {
    cinfer_request *r = b->requests[k];
    cinfer_status *st = decode_request(m, r);
    if (st) {
      st = cinfer_status_prefix(st, "image_decode model '%s'", m->model_name);
      cinfer_status_free(cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL, st));
    }
  }
  return NULL;
}

const cinfer_backend_iface cinfer_image_decode_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "image_decode",
    /* Decoupled only to answer each request of a batch with its own image size: every
     * request gets exactly one response (gRPC ModelInfer, a plain ensemble step). */
    .flags = CINFER_BACKEND_DECOUPLED | CINFER_BACKEND_DECOUPLED_BY_CONFIG,
    .model_load = dec_load,
    .model_unload = dec_unload,
    .instance_create = dec_instance,
    .instance_destroy = dec_instance_destroy,
    .execute = dec_execute,
};
