/* be_common.c: parameters, config checks and tensor helpers of the vision backends. */
#include "backends/vision/be.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "core/json.h"

cinfer_status *vp_err(const vp *p, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return cinfer_status_new(CINFER_INVALID_ARG, "%s model '%s': %s", p->backend,
                           p->info->model_name, msg);
}

cinfer_status *vp_open(vp *p, const cinfer_model_load_info *info, const char *backend,
                       const char *const *known) {
  p->info = info;
  p->backend = backend;
  if (!info->config_json) return NULL;
  json_doc *doc = NULL;
  cinfer_status *st = json_parse(info->config_json, strlen(info->config_json), 64, &doc);
  if (st) return cinfer_status_prefix(st, "%s model '%s': config JSON", backend, info->model_name);
  const json_value *params = json_get(json_root(doc), "parameters");
  for (const json_value *m = json_is(params, JSON_OBJECT) ? params->u.child : NULL; m; m = m->next) {
    bool ok = false;
    for (int i = 0; known[i]; i++)
      if (!strcmp(known[i], m->key)) ok = true;
    if (!ok) {
      char list[512] = "";
      size_t len = 0;
      for (int i = 0; known[i] && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", known[i]);
      st = vp_err(p, "unknown parameter '%s' (this backend takes: %s)", m->key, list);
      break;
    }
  }
  json_doc_free(doc);
  return st;
}

const char *vp_str(const vp *p, const char *key) {
  return cinfer_config_parameter(p->info->config, key);
}

cinfer_status *vp_int(const vp *p, const char *key, int64_t def, int64_t lo, int64_t hi,
                      int64_t *out) {
  const char *v = vp_str(p, key);
  *out = def;
  if (!v) return NULL;
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return vp_err(p, "parameter '%s' = '%s' is not an integer in [%lld, %lld]", key, v,
                  (long long)lo, (long long)hi);
  *out = x;
  return NULL;
}

cinfer_status *vp_float(const vp *p, const char *key, double def, double lo, double hi,
                        float *out) {
  const char *v = vp_str(p, key);
  *out = (float)def;
  if (!v) return NULL;
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi)
    return vp_err(p, "parameter '%s' = '%s' is not a number in [%g, %g]", key, v, lo, hi);
  *out = (float)x;
  return NULL;
}

cinfer_status *vp_bool(const vp *p, const char *key, bool def, bool *out) {
  const char *v = vp_str(p, key);
  *out = def;
  if (!v) return NULL;
  if (!strcmp(v, "true") || !strcmp(v, "1")) *out = true;
  else if (!strcmp(v, "false") || !strcmp(v, "0")) *out = false;
  else return vp_err(p, "parameter '%s' = '%s' is not true or false", key, v);
  return NULL;
}

cinfer_status *vp_floats(const vp *p, const char *key, int n_min, int n_max, float *out, int *n) {
  const char *v = vp_str(p, key);
  if (!v) return NULL;
  int k = 0;
  const char *s = v;
  for (;;) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || end == s || !isfinite(x) || k >= n_max) break;
    out[k++] = (float)x;
    while (*end == ' ') end++;
    if (*end == 0) {
      if (k < n_min) break;
      if (n) *n = k;
      return NULL;
    }
    if (*end != ',') break;
    s = end + 1;
  }
  if (n_min == n_max)
    return vp_err(p, "parameter '%s' = '%s' is not %d comma-separated numbers", key, v, n_min);
  return vp_err(p, "parameter '%s' = '%s' is not %d to %d comma-separated numbers", key, v, n_min,
                n_max);
}

cinfer_status *vp_enum(const vp *p, const char *key, int def, const char *const *choices, int *out) {
  const char *v = vp_str(p, key);
  *out = def;
  if (!v) return NULL;
  char list[256] = "";
  size_t len = 0;
  for (int i = 0; choices[i]; i++) {
    if (!strcmp(choices[i], v)) {
      *out = i;
      return NULL;
    }
    if (len < sizeof list)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", choices[i]);
  }
  return vp_err(p, "parameter '%s' = '%s' is not one of: %s", key, v, list);
}

cinfer_status *vp_norm(const vp *p, vis_norm *n) {
  static const char *const colors[] = {"rgb", "bgr", NULL};
  static const char *const layouts[] = {"nchw", "nhwc", NULL};
  float scale, mean[3] = {0, 0, 0}, sd[3] = {1, 1, 1};
  int color, layout;
  cinfer_status *st;
  if ((st = vp_float(p, "scale", 1, -1e6, 1e6, &scale)) ||
      (st = vp_floats(p, "mean", 3, 3, mean, NULL)) || (st = vp_floats(p, "std", 3, 3, sd, NULL)) ||
      (st = vp_enum(p, "color", 0, colors, &color)) || (st = vp_enum(p, "layout", 0, layouts, &layout)))
    return st;
  for (int c = 0; c < 3; c++)
    if (!(fabsf(sd[c]) > 1e-12f)) return vp_err(p, "parameter 'std' has a zero entry");
  vis_norm_make(n, scale, mean, sd, color == 1, layout == 0);
  return NULL;
}

static void dims_str(const int64_t *d, int n, char *out, size_t cap) {
  size_t len = (size_t)snprintf(out, cap, "[");
  for (int i = 0; i < n && len < cap; i++)
    len += (size_t)snprintf(out + len, cap - len, "%s%lld", i ? ", " : "", (long long)d[i]);
  if (len < cap) snprintf(out + len, cap - len, "]");
}

cinfer_status *vb_check_io(const vp *p, bool input, uint32_t i, cinfer_dtype dtype,
                           cinfer_dtype alt, int ndim, const int64_t *want, cinfer_config_io *io) {
  const cinfer_config *c = p->info->config;
  const char *what = input ? "input" : "output";
  bool ok = input ? cinfer_config_input(c, i, io) : cinfer_config_output(c, i, io);
  if (!ok) return vp_err(p, "needs %s %u (it has only %u)", what, i + 1,
                         input ? cinfer_config_input_count(c) : cinfer_config_output_count(c));
  if (io->dtype != dtype && (alt == CINFER_TYPE_INVALID || io->dtype != alt)) {
    if (alt != CINFER_TYPE_INVALID)
      return vp_err(p, "%s '%s' must be TYPE_%s or TYPE_%s, not TYPE_%s", what, io->name,
                    cinfer_dtype_name(dtype), cinfer_dtype_name(alt), cinfer_dtype_name(io->dtype));
    return vp_err(p, "%s '%s' must be TYPE_%s, not TYPE_%s", what, io->name,
                  cinfer_dtype_name(dtype), cinfer_dtype_name(io->dtype));
  }
  if (ndim >= 0) {
    bool match = io->ndim == ndim;
    for (int d = 0; match && d < ndim; d++)
      if (want[d] >= 0 && io->dims[d] != want[d]) match = false;
    if (!match) {
      char have[128], need[128];
      dims_str(io->dims, io->ndim, have, sizeof have);
      dims_str(want, ndim, need, sizeof need);
      return vp_err(p, "%s '%s' has dims %s; this configuration needs %s (-1: any)", what,
                    io->name, have, need);
    }
  }
  return NULL;
}

cinfer_status *vb_input(const cinfer_request *r, const char *name, cinfer_dtype dtype,
                        int64_t elements, const cinfer_tensor **t) {
  const cinfer_tensor *x = cinfer_request_input_by_name(r, name);
  if (!x) return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' is missing", name);
  cinfer_status *st = cinfer_tensor_check(x);
  if (st) return st;
  if (x->dtype != dtype)
    return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' must be %s, not %s", name,
                             cinfer_dtype_name(dtype), cinfer_dtype_name(x->dtype));
  int64_t el = cinfer_shape_elements(x->shape, x->ndim);
  if (elements >= 0 && el != elements)
    return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' has %lld elements; %lld expected",
                             name, (long long)el, (long long)elements);
  *t = x;
  return NULL;
}

void vb_store(void *dst, cinfer_dtype dtype, const float *src, size_t n) {
  if (dtype == CINFER_TYPE_FP16) {
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = float_to_half(src[i]);
  } else if (dst != src) {
    memcpy(dst, src, n * sizeof(float));
  }
}

size_t vb_put_bytes(uint8_t *dst, const char *s, size_t len) {
  dst[0] = (uint8_t)len, dst[1] = (uint8_t)(len >> 8), dst[2] = (uint8_t)(len >> 16),
  dst[3] = (uint8_t)(len >> 24);
  memcpy(dst + 4, s, len);
  return 4 + len;
}

void vb_labels_free(char **labels, int n) {
  for (int i = 0; labels && i < n; i++) free(labels[i]);
  free(labels);
}

/* Splits text at sep (and, for files, drops a trailing '\r' and empty last line). */
static cinfer_status *split(const vp *p, const char *what, const char *text, char sep,
                            char ***labels, int *n) {
  int cap = 8, k = 0;
  char **out = malloc((size_t)cap * sizeof *out);
  if (!out) return cinfer_status_oom("labels");
  const char *s = text;
  while (*s) {
    const char *e = strchr(s, sep);
    size_t len = e ? (size_t)(e - s) : strlen(s);
    size_t l = len;
    while (l && (s[l - 1] == '\r' || s[l - 1] == ' ')) l--;
    const char *b = s;
    while (l && *b == ' ') b++, l--;
    if (l == 0 && !(sep == '\n' && (!e || !e[1]))) {
      vb_labels_free(out, k);
      return vp_err(p, "%s: label %d is empty", what, k + 1);
    }
    if (l) {
      if (k == cap) {
        char **no = realloc(out, (size_t)(cap *= 2) * sizeof *out);
        if (!no) {
          vb_labels_free(out, k);
          return cinfer_status_oom("labels");
        }
        out = no;
      }
      if (!(out[k] = strndup(b, l))) {
        vb_labels_free(out, k);
        return cinfer_status_oom("labels");
      }
      k++;
    }
    if (!e) break;
    s = e + 1;
  }
  if (k == 0) {
    free(out);
    return vp_err(p, "%s has no labels", what);
  }
  *labels = out;
  *n = k;
  return NULL;
}

cinfer_status *vb_labels(const vp *p, const char *list_key, const char *file_key, char ***labels,
                         int *n) {
  const char *list = vp_str(p, list_key), *file = file_key ? vp_str(p, file_key) : NULL;
  *labels = NULL, *n = 0;
  if (list && file) return vp_err(p, "parameters '%s' and '%s' exclude each other", list_key, file_key);
  if (list) {
    char what[96];
    snprintf(what, sizeof what, "parameter '%s'", list_key);
    return split(p, what, list, ',', labels, n);
  }
  if (!file) return NULL;
  if (strstr(file, "..") || file[0] == '/')
    return vp_err(p, "parameter '%s' = '%s' must name a file inside the model directory",
                  file_key, file);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", p->info->model_dir, file);
  FILE *f = fopen(path, "rb");
  if (!f) return vp_err(p, "parameter '%s': cannot open '%s': %s", file_key, path, strerror(errno));
  char *text = malloc(65537);
  size_t len = text ? fread(text, 1, 65536, f) : 0;
  bool more = text && fgetc(f) != EOF;
  fclose(f);
  if (!text) return cinfer_status_oom("labels");
  if (more) {
    free(text);
    return vp_err(p, "parameter '%s': '%s' is over 64 KiB", file_key, path);
  }
  text[len] = 0;
  if (strlen(text) != len) {
    free(text);
    return vp_err(p, "parameter '%s': '%s' contains a NUL byte", file_key, path);
  }
  char what[4200];
  snprintf(what, sizeof what, "'%s'", path);
  cinfer_status *st = split(p, what, text, '\n', labels, n);
  free(text);
  return st;
}
