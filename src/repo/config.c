/* config.c: maps a pbtxt tree onto cinfer_model_config (Triton's ModelConfig) and checks it.
 *
 * Two passes:
 *  1. map_*: walk the tree with one field table per message type. Unknown fields, a
 *     singular field given twice, a value of the wrong kind, an out-of-range number or an
 *     unknown enum fail here with the position of the offending token.
 *  2. check_config: rules across fields (duplicate names, reshape sizes, batching limits,
 *     priority levels, ensemble data flow, warmup). It runs at the end of parse
 *     (complete=false) and from model_config_validate (complete=true, which additionally
 *     requires data_type and dims on every tensor). Errors carry the position of the entry
 *     (pos), or the model name for entries added programmatically.
 *
 * Invariants: every string field of a config is non-NULL after parse except the optional
 * ones documented in config.h (label_filename, host_policy, input_data_file); every array
 * count matches its allocation; ndims never exceeds CINFER_MAX_DIMS.
 */
#include "repo/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small helpers ------------------------------------------------------------------ */

typedef struct mctx {
  const char *path;
  cinfer_status *err;
} mctx;

static bool fail_at(mctx *m, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool fail_at(mctx *m, int line, int col, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (m->err) return false;
  if (line > 0) m->err = cinfer_status_new(CINFER_INVALID_ARG, "%s:%d:%d: %s", m->path, line, col, msg);
  else m->err = cinfer_status_new(CINFER_INVALID_ARG, "%s: %s", m->path, msg); /* from JSON */
  return false;
}

/* A JSON string standing for an integer or an enum (see pbtxt_node.json): *tmp becomes the
 * node as the text format would have it, and is returned; any other node is returned as is. */
static const pbtxt_node *json_scalar(const pbtxt_node *n, pbtxt_node *tmp, bool enum_ok) {
  if (!n->json || n->kind != PBTXT_STRING || !n->str[0]) return n;
  *tmp = *n;
  const char *p = n->str;
  bool neg = *p == '-';
  if (neg) p++;
  if (*p >= '0' && *p <= '9') {
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
      if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return n;
      v = v * 10 + (uint64_t)(*p - '0');
    }
    if (*p) return n;
    tmp->kind = PBTXT_INT;
    tmp->neg = neg;
    tmp->mag = v;
    tmp->f = neg ? -(double)v : (double)v;
    return tmp;
  }
  if (!enum_ok) return n; /* "x" for an integer field stays a string (the error says so) */
  tmp->kind = PBTXT_IDENT;
  return tmp;
}

static bool oom(mctx *m) {
  if (!m->err) m->err = cinfer_status_oom(NULL);
  return false;
}

/* Grows *arr (of *n elements of size sz) by one zeroed element; returns it or NULL. */
static void *push(void **arr, size_t *n, size_t sz) {
  if (*n >= SIZE_MAX / sz - 1) return NULL;
  void *na = realloc(*arr, (*n + 1) * sz);
  if (!na) return NULL;
  *arr = na;
  void *e = (char *)na + *n * sz;
  memset(e, 0, sz);
  (*n)++;
  return e;
}
#define PUSH(m, arr, n) ((__typeof__(arr))push((void **)&(arr), &(n), sizeof *(arr)))

/* Caps every repeated field / map of a config at MODEL_CONFIG_MAX_ENTRIES entries, which
 * keeps the pairwise duplicate checks below cheap whatever the input. */
static bool room(mctx *m, const pbtxt_node *at, size_t n) {
  if (n < MODEL_CONFIG_MAX_ENTRIES) return true;
  return fail_at(m, at->line, at->col, "too many '%s' entries (limit %d)", at->name, MODEL_CONFIG_MAX_ENTRIES);
}
#define PUSHN(m, at, arr, n) (room(m, at, n) ? PUSH(m, arr, n) : NULL)

/* Where an entry starts: its field name, or its '{' when it is one element of a list
 * (`input [ {...}, {...} ]`), so errors tell the elements apart. */
static model_config_pos entry_pos(const pbtxt_node *n) {
  return n->in_list ? (model_config_pos){n->vline, n->vcol} : (model_config_pos){n->line, n->col};
}

static const char *kind_desc(const pbtxt_node *n) {
  switch (n->kind) {
    case PBTXT_MESSAGE: return "a message";
    case PBTXT_IDENT: return "an identifier";
    case PBTXT_INT: return "an integer";
    case PBTXT_FLOAT: return "a float";
    case PBTXT_STRING: return "a string";
  }
  return "?";
}

typedef struct fdef {
  const char *name;
  bool repeated;
} fdef;

/* Index of child's name in defs, checking unknown and duplicate singular fields. */
static int field_of(mctx *m, const pbtxt_node *child, const char *where, const fdef *defs, int n,
                    const pbtxt_node **seen) {
  for (int i = 0; i < n; i++) {
    if (strcmp(defs[i].name, child->name)) continue;
    if (!defs[i].repeated && seen[i]) {
      fail_at(m, child->line, child->col, "field '%s' in %s is specified more than once (first at %d:%d)",
              child->name, where, seen[i]->line, seen[i]->col);
      return -1;
    }
    if (!seen[i]) seen[i] = child;
    return i;
  }
  fail_at(m, child->line, child->col, "unknown field '%s' in %s", child->name, where);
  return -1;
}

static bool want_msg(mctx *m, const pbtxt_node *n) {
  if (n->kind == PBTXT_MESSAGE) return true;
  return fail_at(m, n->vline, n->vcol, "field '%s' expects a message ('{ ... }'), found %s", n->name,
                 kind_desc(n));
}

static bool get_str(mctx *m, const pbtxt_node *n, char **out) {
  if (n->kind != PBTXT_STRING)
    return fail_at(m, n->vline, n->vcol, "field '%s' expects a string, found %s", n->name, kind_desc(n));
  if (strlen(n->str) != n->len)
    return fail_at(m, n->vline, n->vcol, "field '%s': string contains a NUL byte", n->name);
  char *s = strdup(n->str);
  if (!s) return oom(m);
  free(*out);
  *out = s;
  return true;
}

static bool get_int(mctx *m, const pbtxt_node *n, int64_t lo, int64_t hi, int64_t *out) {
  int64_t v;
  pbtxt_node tmp;
  n = json_scalar(n, &tmp, false);
  if (n->kind != PBTXT_INT)
    return fail_at(m, n->vline, n->vcol, "field '%s' expects an integer, found %s", n->name, kind_desc(n));
  if (!pbtxt_as_int64(n, &v) || v < lo || v > hi)
    return fail_at(m, n->vline, n->vcol, "field '%s' value %s is out of range [%lld, %lld]", n->name, n->str,
                   (long long)lo, (long long)hi);
  *out = v;
  return true;
}

static bool get_u64(mctx *m, const pbtxt_node *n, uint64_t hi, uint64_t *out) {
  uint64_t v;
  pbtxt_node tmp;
  n = json_scalar(n, &tmp, false);
  if (n->kind != PBTXT_INT)
    return fail_at(m, n->vline, n->vcol, "field '%s' expects an integer, found %s", n->name, kind_desc(n));
  if (!pbtxt_as_uint64(n, &v) || v > hi)
    return fail_at(m, n->vline, n->vcol, "field '%s' value %s is out of range [0, %llu]", n->name, n->str,
                   (unsigned long long)hi);
  *out = v;
  return true;
}

static bool get_i32(mctx *m, const pbtxt_node *n, int32_t *out) {
  int64_t v;
  if (!get_int(m, n, INT32_MIN, INT32_MAX, &v)) return false;
  *out = (int32_t)v;
  return true;
}

static bool get_u32(mctx *m, const pbtxt_node *n, uint32_t *out) {
  uint64_t v;
  if (!get_u64(m, n, UINT32_MAX, &v)) return false;
  *out = (uint32_t)v;
  return true;
}

static bool get_bool(mctx *m, const pbtxt_node *n, bool *out) {
  if (pbtxt_as_bool(n, out)) return true;
  return fail_at(m, n->vline, n->vcol, "field '%s' expects true or false, found %s%s%s%s", n->name,
                 kind_desc(n), n->str ? " '" : "", n->str ? n->str : "", n->str ? "'" : "");
}

/* Enum by name (or by number, as protobuf allows). names[i] is the name of value i. */
static bool get_enum(mctx *m, const pbtxt_node *n, const char *const *names, int count, int *out) {
  pbtxt_node tmp;
  n = json_scalar(n, &tmp, true);
  if (n->kind == PBTXT_IDENT) {
    for (int i = 0; i < count; i++)
      if (names[i] && !strcmp(names[i], n->str)) {
        *out = i;
        return true;
      }
  } else if (n->kind == PBTXT_INT && !n->neg && n->mag < (uint64_t)count && names[n->mag]) {
    *out = (int)n->mag;
    return true;
  }
  char allowed[256] = "";
  size_t off = 0;
  for (int i = 0; i < count && off < sizeof allowed; i++)
    if (names[i]) off += (size_t)snprintf(allowed + off, sizeof allowed - off, "%s%s", off ? ", " : "", names[i]);
  if (n->kind == PBTXT_IDENT)
    return fail_at(m, n->vline, n->vcol, "invalid value '%s' for field '%s' (expected one of: %s)", n->str,
                   n->name, allowed);
  return fail_at(m, n->vline, n->vcol, "field '%s' expects one of: %s; found %s", n->name, allowed,
                 kind_desc(n));
}

static bool get_dtype(mctx *m, const pbtxt_node *n, cinfer_dtype *out) {
  pbtxt_node tmp;
  n = json_scalar(n, &tmp, true);
  if (n->kind != PBTXT_IDENT && n->kind != PBTXT_INT)
    return fail_at(m, n->vline, n->vcol, "field '%s' expects a TYPE_* name, found %s", n->name, kind_desc(n));
  if (n->kind == PBTXT_INT) { /* protobuf allows enum numbers; Triton's numbering = ours */
    if (n->neg || n->mag == 0 || n->mag >= CINFER_TYPE_COUNT_)
      return fail_at(m, n->vline, n->vcol, "invalid data type number %s for field '%s'", n->str, n->name);
    *out = (cinfer_dtype)n->mag;
    return true;
  }
  cinfer_dtype t = CINFER_TYPE_INVALID;
  if (!strncmp(n->str, "TYPE_", 5)) t = cinfer_dtype_parse(n->str, n->len);
  if (t == CINFER_TYPE_INVALID)
    return fail_at(m, n->vline, n->vcol,
                   "invalid data type '%s' for field '%s' (expected TYPE_BOOL, TYPE_UINT8, TYPE_UINT16, "
                   "TYPE_UINT32, TYPE_UINT64, TYPE_INT8, TYPE_INT16, TYPE_INT32, TYPE_INT64, TYPE_FP16, "
                   "TYPE_FP32, TYPE_FP64, TYPE_STRING or TYPE_BF16)",
                   n->str, n->name);
  *out = t;
  return true;
}

/* Appends one dim (value node n) to dims[*nd]; checks >= 1 or -1 and the rank limit. */
static bool add_dim(mctx *m, const pbtxt_node *n, const char *what, int64_t *dims, int *nd) {
  int64_t v;
  if (!get_int(m, n, INT64_MIN, INT64_MAX, &v)) return false;
  if (v < 1 && v != -1)
    return fail_at(m, n->vline, n->vcol, "%s: %s must be >= 1, or -1 for a variable-size dimension, got %lld",
                   what, n->name, (long long)v);
  if (*nd >= CINFER_MAX_DIMS)
    return fail_at(m, n->vline, n->vcol, "%s: more than %d %s (cinfer supports at most %d dimensions)", what,
                   CINFER_MAX_DIMS, n->name, CINFER_MAX_DIMS);
  dims[(*nd)++] = v;
  return true;
}

/* map<string,string> entry: { key: "k" value: "v" } */
static bool map_kv(mctx *m, const pbtxt_node *e, const char *where, model_config_kv **arr, size_t *n) {
  static const fdef defs[] = {{"key", false}, {"value", false}};
  const pbtxt_node *seen[2] = {0};
  if (!want_msg(m, e)) return false;
  model_config_kv *kv = PUSHN(m, e, *arr, *n);
  if (!kv) return oom(m);
  for (size_t i = 0; i < e->n_children; i++) {
    const pbtxt_node *c = e->children[i];
    int f = field_of(m, c, where, defs, 2, seen);
    if (f < 0) return false;
    if (!get_str(m, c, f == 0 ? &kv->key : &kv->value)) return false;
  }
  if (!kv->key) return fail_at(m, e->line, e->col, "%s entry must specify 'key'", where);
  if (!kv->value && !(kv->value = strdup(""))) return oom(m);
  for (size_t i = 0; i + 1 < *n; i++)
    if (!strcmp((*arr)[i].key, kv->key))
      return fail_at(m, e->line, e->col, "duplicate key '%s' in %s", kv->key, where);
  return true;
}

static char *xstrdup_or_empty(const char *s) { return strdup(s ? s : ""); }

/* ---- per-message mapping ------------------------------------------------------------ */

static const char *const format_names[] = {"FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW"};
static const char *const kind_names[] = {"KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"};
static const char *const action_names[] = {"REJECT", "DELAY"};

const char *model_instance_kind_name(model_instance_kind k) {
  return (unsigned)k < 4 ? kind_names[k] : "KIND_AUTO";
}
const char *model_io_format_name(model_io_format f) {
  return (unsigned)f < 3 ? format_names[f] : "FORMAT_NONE";
}
const char *model_timeout_action_name(model_timeout_action a) {
  return (unsigned)a < 2 ? action_names[a] : "REJECT";
}

static bool map_reshape(mctx *m, const pbtxt_node *n, const char *what, model_config_io *io) {
  static const fdef defs[] = {{"shape", true}};
  const pbtxt_node *seen[1] = {0};
  if (!want_msg(m, n)) return false;
  io->has_reshape = true;
  io->reshape_ndims = 0;
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    if (field_of(m, c, "reshape", defs, 1, seen) < 0) return false;
    if (!add_dim(m, c, what, io->reshape, &io->reshape_ndims)) return false;
  }
  return true;
}

static bool map_io(mctx *m, const pbtxt_node *n, bool input, model_config_io *io) {
  enum { F_NAME, F_TYPE, F_DIMS, F_RESHAPE, F_SHAPE_T, F_NONLIN, F_FORMAT, F_RAGGED, F_OPTIONAL, F_LABEL };
  static const fdef in_defs[] = {{"name", 0}, {"data_type", 0}, {"dims", 1}, {"reshape", 0},
                                 {"is_shape_tensor", 0}, {"is_non_linear_format_io", 0},
                                 {"format", 0}, {"allow_ragged_batch", 0}, {"optional", 0}};
  static const fdef out_defs[] = {{"name", 0}, {"data_type", 0}, {"dims", 1}, {"reshape", 0},
                                  {"is_shape_tensor", 0}, {"is_non_linear_format_io", 0},
                                  {"label_filename", 0}};
  const fdef *defs = input ? in_defs : out_defs;
  int nd = input ? 9 : 7;
  const pbtxt_node *seen[10] = {0};
  if (!want_msg(m, n)) return false;
  io->pos = entry_pos(n);
  const pbtxt_node *name_node = pbtxt_child(n, "name");
  char what[160];
  if (name_node && name_node->kind == PBTXT_STRING)
    snprintf(what, sizeof what, "%s '%.100s'", input ? "input" : "output", name_node->str);
  else
    snprintf(what, sizeof what, "%s", input ? "input" : "output");
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    int f = field_of(m, c, what, defs, nd, seen);
    bool ok = true;
    int e = 0;
    if (!input && f == 6) f = F_LABEL; /* out_defs[6] */
    switch (f) {
      case -1: return false;
      case F_NAME: ok = get_str(m, c, &io->name); break;
      case F_TYPE: ok = get_dtype(m, c, &io->data_type); break;
      case F_DIMS: ok = add_dim(m, c, what, io->dims, &io->ndims); break;
      case F_RESHAPE: ok = map_reshape(m, c, what, io); break;
      case F_SHAPE_T: ok = get_bool(m, c, &io->is_shape_tensor); break;
      case F_NONLIN: ok = get_bool(m, c, &io->is_non_linear_format_io); break;
      case F_FORMAT: ok = get_enum(m, c, format_names, 3, &e); io->format = (model_io_format)e; break;
      case F_RAGGED: ok = get_bool(m, c, &io->allow_ragged_batch); break;
      case F_OPTIONAL: ok = get_bool(m, c, &io->optional); break;
      case F_LABEL: ok = get_str(m, c, &io->label_filename); break;
    }
    if (!ok) return false;
  }
  if (!io->name && !(io->name = strdup(""))) return oom(m);
  return true;
}

static bool map_version_policy(mctx *m, const pbtxt_node *n, model_version_policy *vp) {
  static const fdef defs[] = {{"latest", 0}, {"all", 0}, {"specific", 0}};
  const pbtxt_node *seen[3] = {0};
  if (!want_msg(m, n)) return false;
  const pbtxt_node *chosen = NULL;
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    int f = field_of(m, c, "version_policy", defs, 3, seen);
    if (f < 0 || !want_msg(m, c)) return false;
    if (chosen && chosen != c)
      return fail_at(m, c->line, c->col, "version_policy may specify only one of latest, all, specific ('%s' already given at %d:%d)",
                     chosen->name, chosen->line, chosen->col);
    chosen = c;
    if (f == 0) {
      static const fdef ld[] = {{"num_versions", 0}};
      const pbtxt_node *ls[1] = {0};
      vp->kind = MODEL_VERSION_LATEST;
      vp->num_versions = 1;
      for (size_t j = 0; j < c->n_children; j++) {
        const pbtxt_node *d = c->children[j];
        if (field_of(m, d, "version_policy.latest", ld, 1, ls) < 0 || !get_u32(m, d, &vp->num_versions))
          return false;
        if (vp->num_versions == 0)
          return fail_at(m, d->vline, d->vcol, "version_policy.latest.num_versions must be >= 1");
      }
    } else if (f == 1) {
      vp->kind = MODEL_VERSION_ALL;
      if (c->n_children)
        return fail_at(m, c->children[0]->line, c->children[0]->col, "unknown field '%s' in version_policy.all",
                       c->children[0]->name);
    } else {
      static const fdef sd[] = {{"versions", 1}};
      const pbtxt_node *ss[1] = {0};
      vp->kind = MODEL_VERSION_SPECIFIC;
      for (size_t j = 0; j < c->n_children; j++) {
        const pbtxt_node *d = c->children[j];
        int64_t v;
        if (field_of(m, d, "version_policy.specific", sd, 1, ss) < 0 || !get_int(m, d, 0, INT64_MAX, &v))
          return false;
        int64_t *slot = PUSHN(m, d, vp->versions, vp->n_versions);
        if (!slot) return oom(m);
        *slot = v;
      }
      if (vp->n_versions == 0)
        return fail_at(m, c->line, c->col, "version_policy.specific must list at least one version");
    }
  }
  return true;
}

static bool map_instance_group(mctx *m, const pbtxt_node *n, model_instance_group *g) {
  enum { F_NAME, F_KIND, F_COUNT, F_GPUS, F_PROFILE, F_PASSIVE, F_HOST, F_RATE, F_SECONDARY };
  static const fdef defs[] = {{"name", 0}, {"kind", 0}, {"count", 0}, {"gpus", 1}, {"profile", 1},
                              {"passive", 0}, {"host_policy", 0}, {"rate_limiter", 0},
                              {"secondary_devices", 1}};
  const pbtxt_node *seen[9] = {0};
  if (!want_msg(m, n)) return false;
  g->pos = entry_pos(n);
  g->tree = n;
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    int f = field_of(m, c, "instance_group", defs, 9, seen);
    bool ok = true;
    int e = 0;
    switch (f) {
      case -1: return false;
      case F_NAME: ok = get_str(m, c, &g->name); break;
      case F_KIND: ok = get_enum(m, c, kind_names, 4, &e); g->kind = (model_instance_kind)e; break;
      case F_COUNT:
        ok = get_i32(m, c, &g->count);
        if (ok && g->count < 0)
          return fail_at(m, c->vline, c->vcol, "instance_group count must be >= 1, got %d", g->count);
        break;
      case F_GPUS: {
        int32_t v;
        ok = get_i32(m, c, &v);
        if (ok && v < 0) return fail_at(m, c->vline, c->vcol, "instance_group gpus must be >= 0, got %d", v);
        int32_t *slot = ok ? PUSHN(m, c, g->gpus, g->n_gpus) : NULL;
        if (ok && !slot) return oom(m);
        if (ok) *slot = v;
        break;
      }
      case F_PROFILE: {
        char *s = NULL;
        ok = get_str(m, c, &s);
        if (ok) {
          char *end = NULL;
          errno = 0;
          long v = strtol(s, &end, 10);
          if (!*s || *end || v < 0 || errno) {
            free(s);
            return fail_at(m, c->vline, c->vcol,
                           "instance_group profile '%s' must be the string form of a non-negative integer",
                           c->str);
          }
          char **slot = PUSHN(m, c, g->profiles, g->n_profiles);
          if (!slot) {
            free(s);
            return oom(m);
          }
          *slot = s;
        }
        break;
      }
      case F_PASSIVE: ok = get_bool(m, c, &g->passive); break;
      case F_HOST: ok = get_str(m, c, &g->host_policy); break;
      case F_RATE: case F_SECONDARY: ok = want_msg(m, c); break;
    }
    if (!ok) return false;
  }
  if (g->count == 0) g->count = 1;
  if (g->n_gpus && (g->kind == MODEL_INSTANCE_KIND_CPU || g->kind == MODEL_INSTANCE_KIND_MODEL))
    return fail_at(m, seen[F_GPUS]->line, seen[F_GPUS]->col,
                   "instance_group has kind %s but specifies gpus (only KIND_GPU and KIND_AUTO may)",
                   kind_names[g->kind]);
  return true;
}

static bool map_queue_policy(mctx *m, const pbtxt_node *n, const char *where, model_queue_policy *q) {
  static const fdef defs[] = {{"timeout_action", 0}, {"default_timeout_microseconds", 0},
                              {"allow_timeout_override", 0}, {"max_queue_size", 0}};
  const pbtxt_node *seen[4] = {0};
  if (!want_msg(m, n)) return false;
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    int f = field_of(m, c, where, defs, 4, seen), e = 0;
    bool ok = true;
    switch (f) {
      case -1: return false;
      case 0: ok = get_enum(m, c, action_names, 2, &e); q->timeout_action = (model_timeout_action)e; break;
      case 1: ok = get_u64(m, c, UINT64_MAX, &q->default_timeout_microseconds); break;
      case 2: ok = get_bool(m, c, &q->allow_timeout_override); break;
      case 3: ok = get_u32(m, c, &q->max_queue_size); break;
    }
    if (!ok) return false;
  }
  return true;
}

static bool map_dynamic_batching(mctx *m, const pbtxt_node *n, model_dynamic_batching *db) {
  enum { F_PREF, F_DELAY, F_ORDER, F_LEVELS, F_DEFLEVEL, F_DQP, F_PQP };
  static const fdef defs[] = {{"preferred_batch_size", 1}, {"max_queue_delay_microseconds", 0},
                              {"preserve_ordering", 0}, {"priority_levels", 0},
                              {"default_priority_level", 0}, {"default_queue_policy", 0},
                              {"priority_queue_policy", 1}};
  const pbtxt_node *seen[7] = {0};
  if (!want_msg(m, n)) return false;
  db->pos = entry_pos(n);
  db->tree = n;
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    int f = field_of(m, c, "dynamic_batching", defs, 7, seen);
    bool ok = true;
    switch (f) {
      case -1: return false;
      case F_PREF: {
        int32_t v;
        ok = get_i32(m, c, &v);
        if (ok && v < 1)
          return fail_at(m, c->vline, c->vcol, "dynamic_batching preferred_batch_size must be >= 1, got %d", v);
        int32_t *slot = ok ? PUSHN(m, c, db->preferred_batch_size, db->n_preferred_batch_size) : NULL;
        if (ok && !slot) return oom(m);
        if (ok) *slot = v;
        break;
      }
      case F_DELAY: ok = get_u64(m, c, UINT64_MAX, &db->max_queue_delay_microseconds); break;
      case F_ORDER: ok = get_bool(m, c, &db->preserve_ordering); break;
      case F_LEVELS: ok = get_u64(m, c, UINT64_MAX, &db->priority_levels); break;
      case F_DEFLEVEL: ok = get_u64(m, c, UINT64_MAX, &db->default_priority_level); break;
      case F_DQP:
        db->has_default_queue_policy = true;
        ok = map_queue_policy(m, c, "dynamic_batching.default_queue_policy", &db->default_queue_policy);
        break;
      case F_PQP: {
        static const fdef ed[] = {{"key", 0}, {"value", 0}};
        const pbtxt_node *es[2] = {0};
        if (!want_msg(m, c)) return false;
        model_priority_queue_policy *p = PUSHN(m, c, db->priority_queue_policy, db->n_priority_queue_policy);
        if (!p) return oom(m);
        p->pos = entry_pos(c);
        for (size_t j = 0; j < c->n_children && ok; j++) {
          const pbtxt_node *d = c->children[j];
          int g = field_of(m, d, "dynamic_batching.priority_queue_policy", ed, 2, es);
          if (g < 0) return false;
          ok = g == 0 ? get_u64(m, d, UINT64_MAX, &p->level)
                      : map_queue_policy(m, d, "dynamic_batching.priority_queue_policy.value", &p->policy);
        }
        if (ok && !es[0])
          return fail_at(m, c->line, c->col, "dynamic_batching.priority_queue_policy entry must specify 'key'");
        for (size_t j = 0; ok && j + 1 < db->n_priority_queue_policy; j++)
          if (db->priority_queue_policy[j].level == p->level)
            return fail_at(m, c->line, c->col, "duplicate priority_queue_policy for priority level %llu (first at %d:%d)",
                           (unsigned long long)p->level, db->priority_queue_policy[j].pos.line,
                           db->priority_queue_policy[j].pos.col);
        break;
      }
    }
    if (!ok) return false;
  }
  return true;
}

static bool map_ensemble(mctx *m, const pbtxt_node *n, cinfer_model_config *cfg) {
  static const fdef defs[] = {{"step", 1}};
  static const fdef sdefs[] = {{"model_name", 0}, {"model_version", 0}, {"input_map", 1},
                               {"output_map", 1}, {"model_namespace", 0}};
  const pbtxt_node *seen[1] = {0};
  if (!want_msg(m, n)) return false;
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    if (field_of(m, c, "ensemble_scheduling", defs, 1, seen) < 0 || !want_msg(m, c)) return false;
    model_ensemble_step *s = PUSHN(m, c, cfg->ensemble_steps, cfg->n_ensemble_steps);
    if (!s) return oom(m);
    s->model_version = -1;
    s->pos = entry_pos(c);
    const pbtxt_node *ss[5] = {0};
    char *ns = NULL;
    for (size_t j = 0; j < c->n_children; j++) {
      const pbtxt_node *d = c->children[j];
      int f = field_of(m, d, "ensemble_scheduling.step", sdefs, 5, ss);
      bool ok = true;
      switch (f) {
        case -1: return false;
        case 0: ok = get_str(m, d, &s->model_name); break;
        case 1: ok = get_int(m, d, -1, INT64_MAX, &s->model_version); break;
        case 2: ok = map_kv(m, d, "ensemble step input_map", &s->input_map, &s->n_input_map); break;
        case 3: ok = map_kv(m, d, "ensemble step output_map", &s->output_map, &s->n_output_map); break;
        case 4: ok = get_str(m, d, &ns); free(ns); ns = NULL; break;
      }
      if (!ok) return false;
    }
    if (!s->model_name && !(s->model_name = strdup(""))) return oom(m);
  }
  return true;
}

static bool map_parameters(mctx *m, const pbtxt_node *e, cinfer_model_config *cfg) {
  static const fdef defs[] = {{"key", 0}, {"value", 0}};
  const pbtxt_node *seen[2] = {0};
  if (!want_msg(m, e)) return false;
  model_config_kv *kv = PUSHN(m, e, cfg->parameters, cfg->n_parameters);
  if (!kv) return oom(m);
  for (size_t i = 0; i < e->n_children; i++) {
    const pbtxt_node *c = e->children[i];
    int f = field_of(m, c, "parameters", defs, 2, seen);
    if (f < 0) return false;
    if (f == 0) {
      if (!get_str(m, c, &kv->key)) return false;
    } else {
      static const fdef vd[] = {{"string_value", 0}};
      const pbtxt_node *vs[1] = {0};
      if (!want_msg(m, c)) return false;
      for (size_t j = 0; j < c->n_children; j++) {
        const pbtxt_node *d = c->children[j];
        if (field_of(m, d, "parameters.value", vd, 1, vs) < 0 || !get_str(m, d, &kv->value)) return false;
      }
    }
  }
  if (!kv->key) return fail_at(m, e->line, e->col, "parameters entry must specify 'key'");
  if (!kv->value && !(kv->value = strdup(""))) return oom(m);
  for (size_t i = 0; i + 1 < cfg->n_parameters; i++)
    if (!strcmp(cfg->parameters[i].key, kv->key))
      return fail_at(m, e->line, e->col, "duplicate parameter '%s'", kv->key);
  return true;
}

static bool map_warmup(mctx *m, const pbtxt_node *n, model_warmup *w) {
  static const fdef defs[] = {{"name", 0}, {"batch_size", 0}, {"inputs", 1}, {"count", 0}};
  const pbtxt_node *seen[4] = {0};
  if (!want_msg(m, n)) return false;
  w->pos = entry_pos(n);
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    int f = field_of(m, c, "model_warmup", defs, 4, seen);
    bool ok = true;
    switch (f) {
      case -1: return false;
      case 0: ok = get_str(m, c, &w->name); break;
      case 1: ok = get_u32(m, c, &w->batch_size); break;
      case 3: ok = get_u32(m, c, &w->count); break;
      case 2: {
        static const fdef ed[] = {{"key", 0}, {"value", 0}};
        static const fdef vd[] = {{"data_type", 0}, {"dims", 1}, {"zero_data", 0}, {"random_data", 0},
                                  {"input_data_file", 0}};
        const pbtxt_node *es[2] = {0};
        if (!want_msg(m, c)) return false;
        model_warmup_input *in = PUSHN(m, c, w->inputs, w->n_inputs);
        if (!in) return oom(m);
        in->pos = entry_pos(c);
        for (size_t j = 0; j < c->n_children; j++) {
          const pbtxt_node *d = c->children[j];
          int g = field_of(m, d, "model_warmup.inputs", ed, 2, es);
          if (g < 0) return false;
          if (g == 0) {
            if (!get_str(m, d, &in->key)) return false;
            continue;
          }
          if (!want_msg(m, d)) return false;
          const pbtxt_node *vs[5] = {0}, *source = NULL;
          for (size_t k = 0; k < d->n_children; k++) {
            const pbtxt_node *v = d->children[k];
            int h = field_of(m, v, "model_warmup input", vd, 5, vs);
            bool flag = false;
            if (h < 0) return false;
            if (h >= 2) {
              if (source)
                return fail_at(m, v->line, v->col,
                               "model_warmup input may specify only one of zero_data, random_data, "
                               "input_data_file ('%s' already given at %d:%d)",
                               source->name, source->line, source->col);
              source = v;
            }
            switch (h) {
              case 0: ok = get_dtype(m, v, &in->data_type); break;
              case 1: ok = add_dim(m, v, "model_warmup input", in->dims, &in->ndims); break;
              case 2: ok = get_bool(m, v, &flag); in->source = MODEL_WARMUP_ZERO_DATA; break;
              case 3: ok = get_bool(m, v, &flag); in->source = MODEL_WARMUP_RANDOM_DATA; break;
              case 4: ok = get_str(m, v, &in->input_data_file); in->source = MODEL_WARMUP_INPUT_DATA_FILE; break;
            }
            if (!ok) return false;
          }
          if (!source)
            return fail_at(m, d->line, d->col,
                           "model_warmup input must specify one of zero_data, random_data, input_data_file");
          if (!vs[0]) return fail_at(m, d->line, d->col, "model_warmup input must specify 'data_type'");
        }
        if (!in->key) return fail_at(m, c->line, c->col, "model_warmup.inputs entry must specify 'key'");
        if (!es[1]) return fail_at(m, c->line, c->col, "model_warmup.inputs entry '%s' must specify 'value'", in->key);
        for (size_t j = 0; j + 1 < w->n_inputs; j++)
          if (!strcmp(w->inputs[j].key, in->key))
            return fail_at(m, c->line, c->col, "duplicate model_warmup input '%s'", in->key);
        break;
      }
    }
    if (!ok) return false;
  }
  if (!w->name && !(w->name = strdup(""))) return oom(m);
  return true;
}

static bool map_bool_msg(mctx *m, const pbtxt_node *n, const char *where, const char *field, bool *out) {
  const fdef defs[] = {{field, 0}};
  const pbtxt_node *seen[1] = {0};
  if (!want_msg(m, n)) return false;
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    if (field_of(m, c, where, defs, 1, seen) < 0 || !get_bool(m, c, out)) return false;
  }
  return true;
}

static bool map_config(mctx *m, const pbtxt_node *root, cinfer_model_config *cfg) {
  enum {
    F_NAME, F_PLATFORM, F_BACKEND, F_RUNTIME, F_VERSION, F_MBS, F_INPUT, F_OUTPUT, F_BATCH_IN,
    F_BATCH_OUT, F_OPT, F_DYN, F_SEQ, F_ENS, F_GROUP, F_DEFAULT_FILE, F_CC, F_TAGS, F_PARAMS,
    F_WARMUP, F_OPS, F_TXN, F_AGENTS, F_CACHE, F_METRICS, F_COUNT_
  };
  static const fdef defs[] = {
      {"name", 0}, {"platform", 0}, {"backend", 0}, {"runtime", 0}, {"version_policy", 0},
      {"max_batch_size", 0}, {"input", 1}, {"output", 1}, {"batch_input", 1}, {"batch_output", 1},
      {"optimization", 0}, {"dynamic_batching", 0}, {"sequence_batching", 0},
      {"ensemble_scheduling", 0}, {"instance_group", 1}, {"default_model_filename", 0},
      {"cc_model_filenames", 1}, {"metric_tags", 1}, {"parameters", 1}, {"model_warmup", 1},
      {"model_operations", 0}, {"model_transaction_policy", 0}, {"model_repository_agents", 0},
      {"response_cache", 0}, {"model_metrics", 0}};
  const pbtxt_node *seen[F_COUNT_] = {0};
  const pbtxt_node *sched = NULL;
  for (size_t i = 0; i < root->n_children; i++) {
    const pbtxt_node *c = root->children[i];
    int f = field_of(m, c, "model config", defs, F_COUNT_, seen);
    bool ok = true;
    if (f == F_DYN || f == F_SEQ || f == F_ENS) {
      if (sched && sched != c)
        return fail_at(m, c->line, c->col,
                       "'%s' cannot be combined with '%s' (at %d:%d): a model has one scheduling choice",
                       c->name, sched->name, sched->line, sched->col);
      sched = c;
    }
    switch (f) {
      case -1: return false;
      case F_NAME: ok = get_str(m, c, &cfg->name); break;
      case F_PLATFORM: ok = get_str(m, c, &cfg->platform); break;
      case F_BACKEND: ok = get_str(m, c, &cfg->backend); break;
      case F_RUNTIME: ok = get_str(m, c, &cfg->runtime); break;
      case F_DEFAULT_FILE: ok = get_str(m, c, &cfg->default_model_filename); break;
      case F_VERSION: ok = map_version_policy(m, c, &cfg->version_policy); break;
      case F_MBS:
        ok = get_i32(m, c, &cfg->max_batch_size);
        if (ok && cfg->max_batch_size < 0)
          return fail_at(m, c->vline, c->vcol, "max_batch_size must be >= 0, got %d", cfg->max_batch_size);
        break;
      case F_INPUT:
      case F_OUTPUT: {
        model_config_io *io = f == F_INPUT ? PUSHN(m, c, cfg->inputs, cfg->n_inputs) : PUSHN(m, c, cfg->outputs, cfg->n_outputs);
        if (!io) return oom(m);
        ok = map_io(m, c, f == F_INPUT, io);
        break;
      }
      case F_GROUP: {
        model_instance_group *g = PUSHN(m, c, cfg->instance_groups, cfg->n_instance_groups);
        if (!g) return oom(m);
        ok = map_instance_group(m, c, g);
        break;
      }
      case F_DYN:
        cfg->has_dynamic_batching = true;
        ok = map_dynamic_batching(m, c, &cfg->dynamic_batching);
        break;
      case F_SEQ:
        ok = want_msg(m, c);
        cfg->sequence_batching = c;
        break;
      case F_ENS:
        cfg->ensemble_scheduling = c;
        ok = map_ensemble(m, c, cfg);
        break;
      case F_PARAMS: ok = map_parameters(m, c, cfg); break;
      case F_WARMUP: {
        model_warmup *w = PUSHN(m, c, cfg->warmups, cfg->n_warmups);
        if (!w) return oom(m);
        ok = map_warmup(m, c, w);
        break;
      }
      case F_OPT:
        ok = want_msg(m, c);
        cfg->optimization = c;
        break;
      case F_TXN:
        cfg->model_transaction_policy = c;
        ok = map_bool_msg(m, c, "model_transaction_policy", "decoupled", &cfg->decoupled);
        break;
      case F_CACHE:
        cfg->response_cache = c;
        ok = map_bool_msg(m, c, "response_cache", "enable", &cfg->response_cache_enable);
        break;
      case F_CC:
      case F_TAGS: {
        /* map<string,string>: check the entries' shape, keep the tree */
        model_config_kv *tmp = NULL;
        size_t nt = 0;
        ok = map_kv(m, c, c->name, &tmp, &nt);
        for (size_t j = 0; j < nt; j++) {
          free(tmp[j].key);
          free(tmp[j].value);
        }
        free(tmp);
      }
        /* fall through */
      default: { /* batch_input, batch_output, model_operations, agents, metrics */
        if (!ok || !want_msg(m, c)) return false;
        model_config_kept *k = PUSHN(m, c, cfg->kept, cfg->n_kept);
        if (!k) return oom(m);
        k->name = c->name;
        k->node = c;
        break;
      }
    }
    if (!ok) return false;
  }
  /* cc_model_filenames / metric_tags keys must be unique across entries */
  for (size_t i = 0; i < cfg->n_kept; i++) {
    const pbtxt_node *a = cfg->kept[i].node;
    if (strcmp(a->name, "cc_model_filenames") && strcmp(a->name, "metric_tags")) continue;
    const pbtxt_node *ka = pbtxt_child(a, "key");
    for (size_t j = 0; j < i; j++) {
      const pbtxt_node *b = cfg->kept[j].node, *kb = pbtxt_child(b, "key");
      if (!strcmp(a->name, b->name) && ka && kb && !strcmp(ka->str, kb->str))
        return fail_at(m, a->line, a->col, "duplicate key '%s' in %s", ka->str, a->name);
    }
  }
  return true;
}

/* ---- checks across fields ----------------------------------------------------------- */

typedef struct vctx {
  const cinfer_model_config *c;
  cinfer_status *err;
} vctx;

static bool vfail(vctx *v, model_config_pos pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool vfail(vctx *v, model_config_pos pos, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (v->err) return false;
  if (pos.line > 0)
    v->err = cinfer_status_new(CINFER_INVALID_ARG, "%s:%d:%d: %s",
                               v->c->source_path ? v->c->source_path : "<config>", pos.line, pos.col, msg);
  else
    v->err = cinfer_status_new(CINFER_INVALID_ARG, "model '%s': %s", v->c->name ? v->c->name : "", msg);
  return false;
}

/* Position of the value of field `name` under tree whose integer value is v (or of the
 * first `name` when v < 0); fallback when absent. Lets cross-field errors point at the
 * offending number rather than at the enclosing block. */
static model_config_pos value_pos(const pbtxt_node *tree, const char *name, int64_t v, model_config_pos fallback) {
  for (size_t i = 0; tree && i < tree->n_children; i++) {
    const pbtxt_node *n = tree->children[i];
    int64_t x;
    if (strcmp(n->name, name)) continue;
    if (v < 0 || (pbtxt_as_int64(n, &x) && x == v)) return (model_config_pos){n->vline, n->vcol};
  }
  return fallback;
}

/* Element count of dims with -1 treated as a separator: products of the runs between
 * wildcards go to runs[], their number to *nruns. False on overflow. */
static bool dim_runs(const int64_t *d, int n, int64_t runs[CINFER_MAX_DIMS + 1], int *nruns) {
  int64_t p = 1;
  *nruns = 0;
  for (int i = 0; i < n; i++) {
    if (d[i] == -1) {
      runs[(*nruns)++] = p;
      p = 1;
    } else if (__builtin_mul_overflow(p, d[i], &p)) {
      return false;
    }
  }
  runs[(*nruns)++] = p;
  return true;
}

static bool check_io(vctx *v, const model_config_io *ios, size_t n, bool input, bool complete) {
  const cinfer_model_config *c = v->c;
  const char *side = input ? "input" : "output";
  for (size_t i = 0; i < n; i++) {
    const model_config_io *io = &ios[i];
    if (!io->name || !io->name[0]) return vfail(v, io->pos, "%s %zu must specify 'name'", side, i);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(ios[j].name, io->name))
        return vfail(v, io->pos, "duplicate %s name '%s' (first at %d:%d)", side, io->name, ios[j].pos.line,
                     ios[j].pos.col);
    if ((unsigned)io->data_type >= CINFER_TYPE_COUNT_)
      return vfail(v, io->pos, "%s '%s' has an invalid data_type", side, io->name);
    if (complete && io->data_type == CINFER_TYPE_INVALID)
      return vfail(v, io->pos, "%s '%s' must specify 'data_type'", side, io->name);
    if (io->ndims < 0 || io->ndims > CINFER_MAX_DIMS || io->reshape_ndims < 0 || io->reshape_ndims > CINFER_MAX_DIMS)
      return vfail(v, io->pos, "%s '%s' has more than %d dims", side, io->name, CINFER_MAX_DIMS);
    if (complete && io->ndims == 0)
      return vfail(v, io->pos, "%s '%s' must specify 'dims'", side, io->name);
    for (int d = 0; d < io->ndims; d++)
      if (io->dims[d] < 1 && io->dims[d] != -1)
        return vfail(v, io->pos, "%s '%s': dims must be >= 1, or -1 for a variable-size dimension", side, io->name);
    if (io->has_reshape) {
      for (int d = 0; d < io->reshape_ndims; d++)
        if (io->reshape[d] < 1 && io->reshape[d] != -1)
          return vfail(v, io->pos, "%s '%s': reshape shape must be >= 1, or -1", side, io->name);
      if (io->reshape_ndims == 0 && c->max_batch_size == 0)
        return vfail(v, io->pos,
                     "%s '%s' cannot have an empty reshape in a model that does not batch "
                     "(scalar tensors are not supported)",
                     side, io->name);
      if (io->ndims > 0) {
        int64_t a[CINFER_MAX_DIMS + 1], b[CINFER_MAX_DIMS + 1];
        int na, nb;
        if (!dim_runs(io->dims, io->ndims, a, &na) || !dim_runs(io->reshape, io->reshape_ndims, b, &nb))
          return vfail(v, io->pos, "%s '%s': element count overflows", side, io->name);
        bool scalar_ok = io->reshape_ndims == 0 && na == 1 && a[0] == 1;
        if (!scalar_ok) {
          if (na != nb)
            return vfail(v, io->pos,
                         "%s '%s' has a different number of variable-size dimensions in dims and reshape",
                         side, io->name);
          for (int k = 0; k < na; k++)
            if (a[k] != b[k])
              return vfail(v, io->pos, "%s '%s' has different element counts for dims and reshape", side,
                           io->name);
        }
      }
    }
    if (input && (io->format == MODEL_FORMAT_NHWC || io->format == MODEL_FORMAT_NCHW) && io->ndims != 3 &&
        (complete || io->ndims != 0))
      return vfail(v, io->pos, "input '%s' has format %s, which requires exactly 3 dims, got %d", io->name,
                   model_io_format_name(io->format), io->ndims);
    bool trt = c->platform && !strcmp(c->platform, "tensorrt_plan");
    if (io->is_shape_tensor && !trt)
      return vfail(v, io->pos, "%s '%s': shape tensors are only supported for the tensorrt_plan platform", side,
                   io->name);
    if (io->is_non_linear_format_io && !trt)
      return vfail(v, io->pos, "%s '%s': non-linear IO formats are only supported for the tensorrt_plan platform",
                   side, io->name);
  }
  return true;
}

/* Ensemble tensor references, sorted by name so the data-flow checks below cost
 * O(n log n) in the number of map entries however large the ensemble. */
typedef struct tref {
  const char *name;
  size_t step; /* step index (or ensemble input index) */
} tref;

static int tref_cmp(const void *a, const void *b) {
  const tref *x = a, *y = b;
  int r = strcmp(x->name, y->name);
  if (r) return r;
  return (x->step > y->step) - (x->step < y->step);
}

static const tref *tref_find(const tref *arr, size_t n, const char *name) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int r = strcmp(arr[mid].name, name);
    if (r == 0) return &arr[mid];
    if (r < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

/* Sorted references to the values of every step's input_map (reads) or output_map (writes). */
static tref *collect_refs(const cinfer_model_config *c, bool writes, size_t *n) {
  size_t total = 0;
  for (size_t i = 0; i < c->n_ensemble_steps; i++)
    total += writes ? c->ensemble_steps[i].n_output_map : c->ensemble_steps[i].n_input_map;
  tref *r = malloc((total ? total : 1) * sizeof *r);
  if (!r) return NULL;
  *n = 0;
  for (size_t i = 0; i < c->n_ensemble_steps; i++) {
    const model_ensemble_step *s = &c->ensemble_steps[i];
    const model_config_kv *kv = writes ? s->output_map : s->input_map;
    size_t m = writes ? s->n_output_map : s->n_input_map;
    for (size_t k = 0; k < m; k++) r[(*n)++] = (tref){kv[k].value, i};
  }
  qsort(r, *n, sizeof *r, tref_cmp);
  return r;
}

static bool check_ensemble_flow(vctx *v, const tref *in, size_t nin, const tref *w, size_t nw, const tref *rd,
                                size_t nrd) {
  const cinfer_model_config *c = v->c;
  for (size_t i = 0; i < nw; i++) {
    const model_ensemble_step *s = &c->ensemble_steps[w[i].step];
    if (i > 0 && !strcmp(w[i - 1].name, w[i].name)) {
      if (w[i - 1].step == w[i].step)
        return vfail(v, s->pos, "ensemble tensor '%s' is written twice by step %zu", w[i].name, w[i].step);
      return vfail(v, s->pos, "ensemble tensor '%s' is written by step %zu and step %zu", w[i].name,
                   w[i - 1].step, w[i].step);
    }
    if (tref_find(in, nin, w[i].name))
      return vfail(v, s->pos, "ensemble step %zu writes '%s', which is an ensemble input", w[i].step, w[i].name);
  }
  for (size_t i = 0; i < c->n_ensemble_steps; i++) {
    const model_ensemble_step *s = &c->ensemble_steps[i];
    for (size_t k = 0; k < s->n_input_map; k++) {
      const char *t = s->input_map[k].value;
      if (!tref_find(in, nin, t) && !tref_find(w, nw, t))
        return vfail(v, s->pos,
                     "ensemble step %zu ('%s') reads '%s', which is neither an ensemble input nor written by a step",
                     i, s->model_name, t);
    }
  }
  for (size_t j = 0; j < c->n_outputs; j++)
    if (!tref_find(w, nw, c->outputs[j].name))
      return vfail(v, c->outputs[j].pos, "ensemble output '%s' is not written by any step", c->outputs[j].name);
  for (size_t j = 0; j < c->n_inputs; j++)
    if (!tref_find(rd, nrd, c->inputs[j].name))
      return vfail(v, c->inputs[j].pos, "ensemble input '%s' is not used by any step", c->inputs[j].name);
  return true;
}

static bool check_ensemble(vctx *v) {
  const cinfer_model_config *c = v->c;
  model_config_pos top = {c->ensemble_scheduling ? c->ensemble_scheduling->line : 0,
                          c->ensemble_scheduling ? c->ensemble_scheduling->col : 0};
  bool is_ens_platform = c->platform && !strcmp(c->platform, "ensemble");
  if (!c->ensemble_scheduling && c->n_ensemble_steps == 0) {
    if (is_ens_platform) return vfail(v, top, "platform 'ensemble' requires 'ensemble_scheduling'");
    return true;
  }
  if (!is_ens_platform)
    return vfail(v, top, "ensemble_scheduling requires platform: \"ensemble\" (got \"%s\")", c->platform ? c->platform : "");
  if (c->n_instance_groups) return vfail(v, c->instance_groups[0].pos, "an ensemble cannot specify instance_group");
  if (c->n_warmups) return vfail(v, c->warmups[0].pos, "an ensemble cannot specify model_warmup");
  if (c->optimization)
    return vfail(v, (model_config_pos){c->optimization->line, c->optimization->col},
                 "an ensemble cannot specify optimization");
  if (c->n_ensemble_steps == 0) return vfail(v, top, "ensemble_scheduling must specify at least one 'step'");
  for (size_t i = 0; i < c->n_ensemble_steps; i++) {
    const model_ensemble_step *s = &c->ensemble_steps[i];
    if (!s->model_name || !s->model_name[0]) return vfail(v, s->pos, "ensemble step %zu must specify 'model_name'", i);
    if (!s->n_input_map) return vfail(v, s->pos, "ensemble step %zu ('%s') must specify 'input_map'", i, s->model_name);
    if (!s->n_output_map) return vfail(v, s->pos, "ensemble step %zu ('%s') must specify 'output_map'", i, s->model_name);
  }
  size_t nin = c->n_inputs, nw = 0, nrd = 0;
  tref *in = malloc((nin ? nin : 1) * sizeof *in);
  tref *w = collect_refs(c, true, &nw), *rd = collect_refs(c, false, &nrd);
  bool ok = in && w && rd;
  if (ok) {
    for (size_t j = 0; j < nin; j++) in[j] = (tref){c->inputs[j].name, j};
    qsort(in, nin, sizeof *in, tref_cmp);
    ok = check_ensemble_flow(v, in, nin, w, nw, rd, nrd);
  } else if (!v->err) {
    v->err = cinfer_status_oom(NULL);
  }
  free(in);
  free(w);
  free(rd);
  return ok;
}

static cinfer_status *check_config(const cinfer_model_config *c, bool complete) {
  vctx v = {.c = c};
  model_config_pos none = {0, 0};
  if (c->max_batch_size < 0) return vfail(&v, none, "max_batch_size must be >= 0"), v.err;
  if (!check_io(&v, c->inputs, c->n_inputs, true, complete)) return v.err;
  if (!check_io(&v, c->outputs, c->n_outputs, false, complete)) return v.err;
  if (c->version_policy.kind == MODEL_VERSION_LATEST && c->version_policy.num_versions == 0)
    return vfail(&v, none, "version_policy.latest.num_versions must be >= 1"), v.err;

  for (size_t i = 0; i < c->n_instance_groups; i++) {
    const model_instance_group *g = &c->instance_groups[i];
    if (g->count < 1) return vfail(&v, g->pos, "instance_group count must be >= 1, got %d", g->count), v.err;
    if ((unsigned)g->kind > MODEL_INSTANCE_KIND_MODEL)
      return vfail(&v, g->pos, "instance_group has an invalid kind"), v.err;
    if (g->n_gpus && (g->kind == MODEL_INSTANCE_KIND_CPU || g->kind == MODEL_INSTANCE_KIND_MODEL))
      return vfail(&v, g->pos, "instance_group has kind %s but specifies gpus", model_instance_kind_name(g->kind)), v.err;
    for (size_t j = 0; j < i; j++)
      if (g->name && c->instance_groups[j].name && g->name[0] && !strcmp(g->name, c->instance_groups[j].name))
        return vfail(&v, g->pos, "duplicate instance_group name '%s'", g->name), v.err;
  }

  if (c->has_dynamic_batching) {
    const model_dynamic_batching *db = &c->dynamic_batching;
    for (size_t i = 0; i < db->n_preferred_batch_size; i++) {
      int32_t p = db->preferred_batch_size[i];
      if (p < 1) return vfail(&v, db->pos, "dynamic_batching preferred_batch_size must be >= 1, got %d", p), v.err;
      if (p > c->max_batch_size)
        return vfail(&v, value_pos(db->tree, "preferred_batch_size", p, db->pos), "dynamic_batching preferred_batch_size %d is larger than max_batch_size %d", p,
                     c->max_batch_size), v.err;
      for (size_t j = 0; j < i; j++)
        if (db->preferred_batch_size[j] == p)
          return vfail(&v, db->pos, "dynamic_batching preferred_batch_size %d is listed twice", p), v.err;
    }
    if (db->priority_levels == 0) {
      if (db->default_priority_level != 0)
        return vfail(&v, value_pos(db->tree, "default_priority_level", -1, db->pos), "dynamic_batching default_priority_level %llu requires priority_levels >= %llu",
                     (unsigned long long)db->default_priority_level,
                     (unsigned long long)db->default_priority_level), v.err;
      if (db->n_priority_queue_policy)
        return vfail(&v, db->priority_queue_policy[0].pos,
                     "dynamic_batching priority_queue_policy requires priority_levels > 0"), v.err;
    } else {
      if (db->default_priority_level < 1 || db->default_priority_level > db->priority_levels)
        return vfail(&v, value_pos(db->tree, "default_priority_level", -1, db->pos), "dynamic_batching default_priority_level %llu must be in [1, %llu] (priority_levels)",
                     (unsigned long long)db->default_priority_level, (unsigned long long)db->priority_levels), v.err;
      for (size_t i = 0; i < db->n_priority_queue_policy; i++) {
        const model_priority_queue_policy *p = &db->priority_queue_policy[i];
        if (p->level < 1 || p->level > db->priority_levels)
          return vfail(&v, p->pos, "dynamic_batching priority_queue_policy key %llu must be in [1, %llu] (priority_levels)",
                       (unsigned long long)p->level, (unsigned long long)db->priority_levels), v.err;
      }
    }
  }

  if (!check_ensemble(&v)) return v.err;

  for (size_t i = 0; i < c->n_warmups; i++) {
    const model_warmup *w = &c->warmups[i];
    if (!w->name || !w->name[0]) return vfail(&v, w->pos, "model_warmup %zu must specify 'name'", i), v.err;
    if (w->batch_size < 1) return vfail(&v, w->pos, "model_warmup '%s': batch_size must be >= 1", w->name), v.err;
    if (c->max_batch_size > 0 && w->batch_size > (uint32_t)c->max_batch_size)
      return vfail(&v, w->pos, "model_warmup '%s': batch_size %u is larger than max_batch_size %d", w->name,
                   w->batch_size, c->max_batch_size), v.err;
    if (c->max_batch_size == 0 && w->batch_size != 1)
      return vfail(&v, w->pos, "model_warmup '%s': batch_size must be 1 for a model that does not batch", w->name), v.err;
    if (w->n_inputs == 0) return vfail(&v, w->pos, "model_warmup '%s' must specify 'inputs'", w->name), v.err;
    for (size_t j = 0; j < w->n_inputs; j++) {
      const model_warmup_input *in = &w->inputs[j];
      if (in->data_type == CINFER_TYPE_INVALID || (unsigned)in->data_type >= CINFER_TYPE_COUNT_)
        return vfail(&v, in->pos, "model_warmup '%s' input '%s' must specify 'data_type'", w->name, in->key), v.err;
      if (in->source == MODEL_WARMUP_INPUT_DATA_FILE && (!in->input_data_file || !in->input_data_file[0] ||
                                                         strchr(in->input_data_file, '/')))
        return vfail(&v, in->pos, "model_warmup '%s' input '%s': input_data_file must be a file name inside the "
                                  "model's warmup/ folder", w->name, in->key), v.err;
      for (int d = 0; d < in->ndims; d++)
        if (in->dims[d] < 1)
          return vfail(&v, in->pos, "model_warmup '%s' input '%s': dims must be >= 1 (warmup data has a fixed shape)",
                       w->name, in->key), v.err;
      if (complete && c->n_inputs && !model_config_input(c, in->key))
        return vfail(&v, in->pos, "model_warmup '%s' names input '%s', which the model does not have", w->name,
                     in->key), v.err;
    }
  }
  return NULL;
}

/* ---- public API ---------------------------------------------------------------------- */

static void free_io(model_config_io *io) {
  free(io->name);
  free(io->label_filename);
}

void model_config_free(cinfer_model_config *c) {
  if (!c) return;
  free(c->source_path);
  free(c->name);
  free(c->platform);
  free(c->backend);
  free(c->runtime);
  free(c->default_model_filename);
  free(c->version_policy.versions);
  for (size_t i = 0; i < c->n_inputs; i++) free_io(&c->inputs[i]);
  free(c->inputs);
  for (size_t i = 0; i < c->n_outputs; i++) free_io(&c->outputs[i]);
  free(c->outputs);
  for (size_t i = 0; i < c->n_instance_groups; i++) {
    model_instance_group *g = &c->instance_groups[i];
    free(g->name);
    free(g->gpus);
    for (size_t j = 0; j < g->n_profiles; j++) free(g->profiles[j]);
    free(g->profiles);
    free(g->host_policy);
  }
  free(c->instance_groups);
  free(c->dynamic_batching.preferred_batch_size);
  free(c->dynamic_batching.priority_queue_policy);
  for (size_t i = 0; i < c->n_ensemble_steps; i++) {
    model_ensemble_step *s = &c->ensemble_steps[i];
    free(s->model_name);
    for (size_t j = 0; j < s->n_input_map; j++) free(s->input_map[j].key), free(s->input_map[j].value);
    for (size_t j = 0; j < s->n_output_map; j++) free(s->output_map[j].key), free(s->output_map[j].value);
    free(s->input_map);
    free(s->output_map);
  }
  free(c->ensemble_steps);
  for (size_t i = 0; i < c->n_parameters; i++) free(c->parameters[i].key), free(c->parameters[i].value);
  free(c->parameters);
  for (size_t i = 0; i < c->n_warmups; i++) {
    model_warmup *w = &c->warmups[i];
    free(w->name);
    for (size_t j = 0; j < w->n_inputs; j++) free(w->inputs[j].key), free(w->inputs[j].input_data_file);
    free(w->inputs);
  }
  free(c->warmups);
  free(c->kept);
  pbtxt_free(c->tree_);
  free(c);
}

static cinfer_status *config_alloc(const char *path, cinfer_model_config **out) {
  cinfer_model_config *c = calloc(1, sizeof *c);
  if (!c) return cinfer_status_oom(NULL);
  c->version_policy.kind = MODEL_VERSION_LATEST;
  c->version_policy.num_versions = 1;
  c->source_path = path ? strdup(path) : NULL;
  if (path && !c->source_path) {
    free(c);
    return cinfer_status_oom(NULL);
  }
  *out = c;
  return NULL;
}

static bool fill_empty_strings(cinfer_model_config *c) {
  char **fields[] = {&c->name, &c->platform, &c->backend, &c->runtime, &c->default_model_filename};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (!*fields[i] && !(*fields[i] = strdup(""))) return false;
  return true;
}

cinfer_status *model_config_new(const char *name, cinfer_model_config **out) {
  *out = NULL;
  cinfer_model_config *c = NULL;
  cinfer_status *st = config_alloc(NULL, &c);
  if (st) return st;
  if ((name && !(c->name = strdup(name))) || !fill_empty_strings(c)) {
    model_config_free(c);
    return cinfer_status_oom(NULL);
  }
  *out = c;
  return NULL;
}

cinfer_status *model_config_set_name(cinfer_model_config *c, const char *name) {
  char *n = strdup(name ? name : "");
  if (!n) return cinfer_status_oom(NULL);
  free(c->name);
  c->name = n;
  for (size_t i = 0; i < c->n_instance_groups; i++) {
    model_instance_group *g = &c->instance_groups[i];
    if (g->name && g->name[0]) continue;
    char *gn = NULL;
    if (asprintf(&gn, "%s_%zu", n, i) < 0) return cinfer_status_oom(NULL);
    free(g->name);
    g->name = gn;
  }
  return NULL;
}

/* Maps and checks a parsed tree (taken, even on failure). */
static cinfer_status *config_from_tree(const char *path, pbtxt_node *tree, cinfer_model_config **out) {
  cinfer_status *st;
  cinfer_model_config *c = NULL;
  if ((st = config_alloc(path, &c))) {
    pbtxt_free(tree);
    return st;
  }
  c->tree_ = tree;
  mctx m = {.path = path};
  if (!map_config(&m, tree, c)) {
    model_config_free(c);
    return m.err;
  }
  if (!fill_empty_strings(c)) {
    model_config_free(c);
    return cinfer_status_oom(NULL);
  }
  if (c->name[0] && (st = model_config_set_name(c, c->name))) {
    model_config_free(c);
    return st;
  }
  if ((st = check_config(c, false))) {
    model_config_free(c);
    return st;
  }
  *out = c;
  return NULL;
}

cinfer_status *model_config_parse(const char *path, const char *text, size_t len, cinfer_model_config **out) {
  *out = NULL;
  if (!path) path = "<config>";
  pbtxt_node *tree = NULL;
  cinfer_status *st = pbtxt_parse(path, text, len, &tree);
  if (st) return st;
  return config_from_tree(path, tree, out);
}

cinfer_status *model_config_parse_json(const char *path, const char *json, size_t len,
                                       cinfer_model_config **out) {
  *out = NULL;
  if (!path) path = "<config>";
  pbtxt_node *tree = NULL;
  cinfer_status *st = model_config_json_tree(path, json, len, &tree);
  if (st) return st;
  return config_from_tree(path, tree, out);
}

cinfer_status *model_config_load_file(const char *path, cinfer_model_config **out) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return cinfer_status_new(errno == ENOENT ? CINFER_NOT_FOUND : CINFER_INVALID_ARG, "%s: cannot open: %s", path,
                             strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: not a regular file", path);
  }
  if (sb.st_size > (off_t)MODEL_CONFIG_MAX_FILE) {
    close(fd);
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: file is too large (%lld bytes, limit %u)", path,
                             (long long)sb.st_size, MODEL_CONFIG_MAX_FILE);
  }
  /* Read up to the limit + 1 regardless of st_size, in case the file grows meanwhile. */
  size_t cap = (size_t)sb.st_size + 1, n = 0;
  char *buf = malloc(cap);
  if (!buf) {
    close(fd);
    return cinfer_status_oom(NULL);
  }
  for (;;) {
    if (n == cap) {
      if (cap > MODEL_CONFIG_MAX_FILE) break;
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        close(fd);
        return cinfer_status_oom(NULL);
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(buf);
      close(fd);
      return cinfer_status_new(CINFER_INVALID_ARG, "%s: read failed: %s", path, strerror(e));
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  cinfer_status *st = model_config_parse(path, buf, n, out);
  free(buf);
  return st;
}

cinfer_status *model_config_validate(const cinfer_model_config *c) {
  if (!c) return cinfer_status_new(CINFER_INVALID_ARG, "no model config");
  return check_config(c, true);
}

const char *model_config_parameter(const cinfer_model_config *c, const char *key) {
  if (!c || !key) return NULL;
  for (size_t i = 0; i < c->n_parameters; i++)
    if (!strcmp(c->parameters[i].key, key)) return c->parameters[i].value;
  return NULL;
}

cinfer_status *model_config_set_parameter(cinfer_model_config *c, const char *key, const char *value) {
  char *v = xstrdup_or_empty(value);
  if (!v) return cinfer_status_oom(NULL);
  for (size_t i = 0; i < c->n_parameters; i++)
    if (!strcmp(c->parameters[i].key, key)) {
      free(c->parameters[i].value);
      c->parameters[i].value = v;
      return NULL;
    }
  if (c->n_parameters >= MODEL_CONFIG_MAX_ENTRIES) {
    free(v);
    return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "model '%s': too many parameters (limit %d)", c->name,
                             MODEL_CONFIG_MAX_ENTRIES);
  }
  char *k = strdup(key);
  model_config_kv *kv = k ? PUSH(NULL, c->parameters, c->n_parameters) : NULL;
  if (!kv) {
    free(k);
    free(v);
    return cinfer_status_oom(NULL);
  }
  kv->key = k;
  kv->value = v;
  return NULL;
}

static const model_config_io *find_io(const model_config_io *ios, size_t n, const char *name) {
  for (size_t i = 0; name && i < n; i++)
    if (ios[i].name && !strcmp(ios[i].name, name)) return &ios[i];
  return NULL;
}
const model_config_io *model_config_input(const cinfer_model_config *c, const char *name) {
  return find_io(c->inputs, c->n_inputs, name);
}
const model_config_io *model_config_output(const cinfer_model_config *c, const char *name) {
  return find_io(c->outputs, c->n_outputs, name);
}

static cinfer_status *add_io(cinfer_model_config *c, bool input, const char *name, cinfer_dtype dtype, int ndims,
                             const int64_t *dims, model_config_io **out) {
  model_config_io **arr = input ? &c->inputs : &c->outputs;
  size_t *n = input ? &c->n_inputs : &c->n_outputs;
  if (!name || !name[0]) return cinfer_status_new(CINFER_INVALID_ARG, "model '%s': tensor name is empty", c->name);
  if (find_io(*arr, *n, name))
    return cinfer_status_new(CINFER_ALREADY_EXISTS, "model '%s': %s '%s' already exists", c->name,
                             input ? "input" : "output", name);
  if (ndims < 0 || ndims > CINFER_MAX_DIMS || (ndims && !dims))
    return cinfer_status_new(CINFER_INVALID_ARG, "model '%s': %s '%s': %d dims (limit %d)", c->name,
                             input ? "input" : "output", name, ndims, CINFER_MAX_DIMS);
  if (*n >= MODEL_CONFIG_MAX_ENTRIES)
    return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "model '%s': too many %ss (limit %d)", c->name,
                             input ? "input" : "output", MODEL_CONFIG_MAX_ENTRIES);
  char *nm = strdup(name);
  model_config_io *io = nm ? PUSH(NULL, *arr, *n) : NULL;
  if (!io) {
    free(nm);
    return cinfer_status_oom(NULL);
  }
  io->name = nm;
  io->data_type = dtype;
  io->ndims = ndims;
  if (ndims) memcpy(io->dims, dims, (size_t)ndims * sizeof *dims);
  if (out) *out = io;
  return NULL;
}

cinfer_status *model_config_add_input(cinfer_model_config *c, const char *name, cinfer_dtype dtype, int ndims,
                                      const int64_t *dims, model_config_io **io) {
  return add_io(c, true, name, dtype, ndims, dims, io);
}
cinfer_status *model_config_add_output(cinfer_model_config *c, const char *name, cinfer_dtype dtype, int ndims,
                                       const int64_t *dims, model_config_io **io) {
  return add_io(c, false, name, dtype, ndims, dims, io);
}
