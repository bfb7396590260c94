/* trace.c: request tracing (cinfer/trace.h), Triton's trace manager in our terms.
 *
 * Objects:
 *   trace_mgr     one per server: the start-up setting, the global setting, the per-model
 *                 settings (each field either the model's own or the global one's), the
 *                 trace files, the next trace id, and `any_on` (some setting traces).
 *   tset          one *generation* of a setting: its values, sampling counters and the
 *                 traces collected but not yet written. An update never changes a tset; it
 *                 makes a new one (counters start again, as in Triton), and the old one
 *                 lives until its last trace is done, then writes what it still holds.
 *   trace_file    one per file name, shared by the tsets that write to it: `name` gets
 *                 "[" at the first trace, "," between traces and "]" when the file is
 *                 closed (server shutdown); `name.N` files are whole JSON arrays.
 *   cinfer_trace  one per sampled request: its timestamps (0 = not reached) and TENSORS
 *                 entries; it holds a reference on its tset and is written when the
 *                 request is destroyed (after the frontend's HTTP_SEND_END).
 *
 * Sampling (Triton's TraceSetting::SampleTrace): every request submitted while the setting
 * is valid counts; every rate-th one is traced while count != 0 (count -1: no limit), and
 * count goes down by one per trace. Writing (WriteTrace): with log_frequency n the pending
 * traces go to name.<index> every n traces; when count reaches 0 and every trace taken is
 * collected, they go to name.<index> at once; otherwise they are appended to `name` when
 * the tset ends (replaced, or at shutdown).
 *
 * Locks: mgr->mu guards the setting tables and file list; tset->mu its counters and
 * pending text; file->mu the FILE and its index. Order: mgr->mu, then tset->mu, then
 * file->mu. No lock is held across a write to a file except file->mu.
 *
 * May call: nothing of src/server. */
#include "cinfer/trace.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/half.h"
#include "core/log.h"
#include "core/numfmt.h"
#include "server/server_int.h"
#include "server/trace_internal.h"

static const char *const point_names[CINFER_TRACE_POINT_COUNT_] = {
    "HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "COMPUTE_START",
    "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END",
    "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"};

typedef struct trace_file {
  int refs;              /* under mgr->mu */
  char *name;
  pthread_mutex_t mu;
  FILE *f;               /* `name`, open after its first trace */
  unsigned index;        /* next name.N */
  struct trace_file *next;
} trace_file;

typedef struct tset {
  _Atomic int refs;
  cinfer_trace_setting v;
  trace_file *file;      /* NULL when v.file is "" */
  pthread_mutex_t mu;
  uint64_t sample, created, collected;
  int32_t count;         /* left */
  cbuf pending;          /* traces collected, comma-separated, not yet written */
  uint32_t in_pending;
  struct trace_mgr *mgr;
} tset;

typedef struct model_ts {
  char *name;
  bool has_level, has_rate, has_count, has_log_frequency;
  cinfer_trace_setting own;
  tset *cur;
  struct model_ts *next;
} model_ts;

struct trace_mgr {
  pthread_mutex_t mu;
  cinfer_trace_setting startup;
  tset *global;
  model_ts *models;
  trace_file *files;
  _Atomic bool any_on;
  _Atomic uint64_t next_id;
};

struct cinfer_trace {
  tset *set;
  uint64_t id;
  uint64_t ts[CINFER_TRACE_POINT_COUNT_];
  cbuf tensors;          /* ,{"id":..,"activity":..,"tensor":{..}} entries */
};

/* ---- files ---------------------------------------------------------------------------- */

static trace_file *file_get_locked(trace_mgr *m, const char *name) {
  if (!name[0]) return NULL;
  for (trace_file *f = m->files; f; f = f->next)
    if (!strcmp(f->name, name)) {
      f->refs++;
      return f;
    }
  trace_file *f = calloc(1, sizeof *f);
  if (!f || !(f->name = strdup(name))) {
    free(f);
    return NULL;
  }
  pthread_mutex_init(&f->mu, NULL);
  f->refs = 1;
  f->next = m->files;
  m->files = f;
  return f;
}

static void file_close(trace_file *f) {
  if (f->f) {
    fputs("]", f->f);
    fclose(f->f);
  }
  pthread_mutex_destroy(&f->mu);
  free(f->name);
  free(f);
}

/* Drops a reference; the last one closes the file (under mgr->mu). */
static void file_put_locked(trace_mgr *m, trace_file *f) {
  if (!f || --f->refs > 0) return;
  for (trace_file **p = &m->files; *p; p = &(*p)->next)
    if (*p == f) {
      *p = f->next;
      break;
    }
  file_close(f);
}

/* Writes text (comma-separated trace entries) to name.N, or appends it to `name`. */
static void file_save(trace_file *f, const char *text, size_t len, bool indexed) {
  pthread_mutex_lock(&f->mu);
  if (indexed) {
    char path[1200];
    snprintf(path, sizeof path, "%s.%u", f->name, f->index++);
    FILE *o = fopen(path, "w");
    if (!o) {
      LOG_E("trace file '%s': cannot create it", path);
    } else {
      fputc('[', o);
      fwrite(text, 1, len, o);
      fputc(']', o);
      if (fclose(o) != 0) LOG_E("trace file '%s': write failed", path);
    }
  } else {
    if (!f->f) {
      if (!(f->f = fopen(f->name, "w"))) LOG_E("trace file '%s': cannot create it", f->name);
      else fputc('[', f->f);
    } else {
      fputc(',', f->f);
    }
    if (f->f) {
      fwrite(text, 1, len, f->f);
      fflush(f->f);
    }
  }
  pthread_mutex_unlock(&f->mu);
}

/* ---- settings ------------------------------------------------------------------------- */

static bool setting_on(const cinfer_trace_setting *v) {
  return v->level && v->rate > 0 && v->file[0] && v->count != 0;
}

static tset *tset_new_locked(trace_mgr *m, const cinfer_trace_setting *v) {
  tset *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  atomic_init(&t->refs, 1);
  t->v = *v;
  t->count = v->count;
  t->mgr = m;
  pthread_mutex_init(&t->mu, NULL);
  if (v->file[0] && !(t->file = file_get_locked(m, v->file))) {
    pthread_mutex_destroy(&t->mu);
    free(t);
    return NULL;
  }
  return t;
}

static void tset_ref(tset *t) { atomic_fetch_add(&t->refs, 1); }

/* The last reference: what is still pending goes to the file, then the file reference. */
static void tset_put(tset *t) {
  if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
  if (t->file && t->in_pending && t->pending.data && !t->pending.oom)
    file_save(t->file, t->pending.data, t->pending.len, t->v.log_frequency != 0);
  cbuf_free(&t->pending);
  trace_mgr *m = t->mgr;
  pthread_mutex_lock(&m->mu);
  file_put_locked(m, t->file);
  pthread_mutex_unlock(&m->mu);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

static void any_on_update_locked(trace_mgr *m) {
  bool on = m->global && setting_on(&m->global->v);
  for (model_ts *e = m->models; e && !on; e = e->next) on = e->cur && setting_on(&e->cur->v);
  atomic_store(&m->any_on, on);
}

static cinfer_trace_setting model_effective(const trace_mgr *m, const model_ts *e) {
  cinfer_trace_setting v = m->global->v;
  if (e->has_level) v.level = e->own.level;
  if (e->has_rate) v.rate = e->own.rate;
  if (e->has_count) v.count = e->own.count;
  if (e->has_log_frequency) v.log_frequency = e->own.log_frequency;
  return v;
}

static cinfer_status *check_setting(const cinfer_trace_setting *v) {
  if (!v->level) return NULL; /* Triton: the only invalid setting allowed is OFF */
  const char *why = v->rate == 0 ? "sample rate must be non-zero"
                    : !v->file[0] ? "trace file name is not given"
                                  : NULL;
  if (!why) return NULL;
  return cinfer_status_new(CINFER_INVALID_ARG, "Attempting to set invalid trace setting :%s", why);
}

trace_mgr *trace_mgr_create(void) {
  trace_mgr *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  pthread_mutex_init(&m->mu, NULL);
  m->startup = (cinfer_trace_setting){.level = 0, .rate = 1000, .count = -1, .log_frequency = 0};
  atomic_init(&m->next_id, 1);
  if (!(m->global = tset_new_locked(m, &m->startup))) {
    pthread_mutex_destroy(&m->mu);
    free(m);
    return NULL;
  }
  return m;
}

/* Called once every request is gone (the traces hold references on their tsets). */
void trace_mgr_destroy(trace_mgr *m) {
  if (!m) return;
  tset_put(m->global);
  for (model_ts *e = m->models, *nx; e; e = nx) {
    nx = e->next;
    tset_put(e->cur);
    free(e->name);
    free(e);
  }
  while (m->files) { /* only reachable if a trace leaked */
    trace_file *f = m->files;
    m->files = f->next;
    file_close(f);
  }
  pthread_mutex_destroy(&m->mu);
  free(m);
}

/* Swaps in a new tset for slot; the old one is released after mgr->mu is dropped (it may
 * write to its file). */
static cinfer_status *replace_locked(trace_mgr *m, tset **slot, const cinfer_trace_setting *v,
                                     tset **old) {
  tset *t = tset_new_locked(m, v);
  if (!t) return cinfer_status_oom("trace setting");
  *old = *slot;
  *slot = t;
  return NULL;
}

cinfer_status *cinfer_server_trace_init(cinfer_server *s, const cinfer_trace_setting *v) {
  cinfer_status *st = check_setting(v);
  if (st) return st;
  trace_mgr *m = server_trace_mgr(s);
  pthread_mutex_lock(&m->mu);
  tset *old = NULL;
  m->startup = *v;
  st = replace_locked(m, &m->global, v, &old);
  any_on_update_locked(m);
  pthread_mutex_unlock(&m->mu);
  tset_put(old);
  return st;
}

cinfer_status *cinfer_server_trace_update(cinfer_server *s, const char *model,
                                          const cinfer_trace_update *u) {
  trace_mgr *m = server_trace_mgr(s);
  if (u->has_file)
    return cinfer_status_new(CINFER_UNSUPPORTED,
                             "trace file location can not be updated through network protocol");
  enum { MAX_OLD = 64 };
  tset *olds[MAX_OLD + 1];
  size_t n_old = 0;
  cinfer_status *st = NULL;
  pthread_mutex_lock(&m->mu);
  if (!model) {
    cinfer_trace_setting v = m->global->v;
    if (u->clear_level) v.level = m->startup.level;
    if (u->clear_rate) v.rate = m->startup.rate;
    if (u->clear_count) v.count = m->startup.count;
    if (u->clear_log_frequency) v.log_frequency = m->startup.log_frequency;
    if (u->has_level) v.level = u->v.level;
    if (u->has_rate) v.rate = u->v.rate;
    if (u->has_count) v.count = u->v.count;
    if (u->has_log_frequency) v.log_frequency = u->v.log_frequency;
    if (!(st = check_setting(&v)) && !(st = replace_locked(m, &m->global, &v, &olds[n_old]))) {
      n_old++;
      /* Models that take some field from the global setting follow it. */
      for (model_ts *e = m->models; e && !st; e = e->next) {
        if (e->has_level && e->has_rate && e->has_count && e->has_log_frequency) continue;
        cinfer_trace_setting mv = model_effective(m, e);
        if (n_old == MAX_OLD) { /* release what we hold so far, keep going */
          pthread_mutex_unlock(&m->mu);
          for (size_t i = 0; i < n_old; i++) tset_put(olds[i]);
          n_old = 0;
          pthread_mutex_lock(&m->mu);
        }
        if (!(st = replace_locked(m, &e->cur, &mv, &olds[n_old]))) n_old++;
      }
    }
  } else {
    model_ts *e = m->models, **link = &m->models;
    for (; e && strcmp(e->name, model); link = &e->next, e = e->next) {
    }
    model_ts probe = {0};
    if (e) probe = *e;
    if (u->clear_level) probe.has_level = false;
    if (u->clear_rate) probe.has_rate = false;
    if (u->clear_count) probe.has_count = false;
    if (u->clear_log_frequency) probe.has_log_frequency = false;
    if (u->has_level) probe.has_level = true, probe.own.level = u->v.level;
    if (u->has_rate) probe.has_rate = true, probe.own.rate = u->v.rate;
    if (u->has_count) probe.has_count = true, probe.own.count = u->v.count;
    if (u->has_log_frequency) probe.has_log_frequency = true, probe.own.log_frequency = u->v.log_frequency;
    cinfer_trace_setting mv = model_effective(m, &probe);
    bool none = !probe.has_level && !probe.has_rate && !probe.has_count && !probe.has_log_frequency;
    if (!(st = check_setting(&mv))) {
      if (none) { /* the model follows the global setting again */
        if (e) {
          *link = e->next;
          olds[n_old++] = e->cur;
          free(e->name);
          free(e);
        }
      } else {
        if (!e) {
          e = calloc(1, sizeof *e);
          if (!e || !(e->name = strdup(model))) {
            free(e);
            e = NULL;
            st = cinfer_status_oom("trace setting");
          } else {
            e->next = m->models;
            m->models = e;
          }
        }
        if (e) {
          tset *cur = e->cur;
          char *name = e->name;
          model_ts *next = e->next;
          *e = probe;
          e->cur = cur;
          e->name = name;
          e->next = next;
          if (!(st = replace_locked(m, &e->cur, &mv, &olds[n_old]))) n_old++;
        }
      }
    }
  }
  any_on_update_locked(m);
  pthread_mutex_unlock(&m->mu);
  for (size_t i = 0; i < n_old; i++) tset_put(olds[i]);
  return st;
}

void cinfer_server_trace_get(cinfer_server *s, const char *model, cinfer_trace_setting *out) {
  trace_mgr *m = server_trace_mgr(s);
  pthread_mutex_lock(&m->mu);
  tset *t = m->global;
  for (model_ts *e = m->models; model && e; e = e->next)
    if (!strcmp(e->name, model)) t = e->cur;
  pthread_mutex_lock(&t->mu);
  *out = t->v;
  out->count = t->count; /* what is left, as Triton reports it (-1: no limit) */
  pthread_mutex_unlock(&t->mu);
  pthread_mutex_unlock(&m->mu);
}

/* ---- per request ---------------------------------------------------------------------- */

cinfer_trace *trace_sample(trace_mgr *m, const char *model) {
  if (!atomic_load_explicit(&m->any_on, memory_order_relaxed)) return NULL;
  pthread_mutex_lock(&m->mu);
  tset *t = m->global;
  for (model_ts *e = m->models; e; e = e->next)
    if (!strcmp(e->name, model)) t = e->cur;
  tset_ref(t);
  pthread_mutex_unlock(&m->mu);
  bool hit = false;
  pthread_mutex_lock(&t->mu);
  if (setting_on(&t->v) && t->count != 0) {
    hit = ++t->sample % t->v.rate == 0;
    if (hit && t->count > 0) t->count--;
    if (hit) t->created++;
  }
  pthread_mutex_unlock(&t->mu);
  cinfer_trace *tr = hit ? calloc(1, sizeof *tr) : NULL;
  if (!tr) {
    if (hit) { /* out of memory: the trace is lost, the request is not */
      pthread_mutex_lock(&t->mu);
      t->created--;
      pthread_mutex_unlock(&t->mu);
    }
    tset_put(t);
    return NULL;
  }
  tr->set = t;
  tr->id = atomic_fetch_add(&m->next_id, 1);
  return tr;
}

void cinfer_trace_stamp_at(cinfer_trace *t, cinfer_trace_point p, uint64_t ns) {
  if (t && (unsigned)p < CINFER_TRACE_POINT_COUNT_ && !t->ts[p]) t->ts[p] = ns ? ns : 1;
}

void cinfer_trace_stamp(cinfer_trace *t, cinfer_trace_point p) {
  if (t) cinfer_trace_stamp_at(t, p, clock_now_ns());
}

bool trace_wants_tensors(const cinfer_trace *t) {
  return t && (t->set->v.level & CINFER_TRACE_TENSORS);
}

static void put_elem(cbuf *b, cinfer_dtype dt, const unsigned char *p) {
  char nb[NUMFMT_BUF];
  switch (dt) {
    case CINFER_TYPE_BOOL: cbuf_puts(b, *p ? "1" : "0"); break;
    case CINFER_TYPE_UINT8: cbuf_printf(b, "%u", *p); break;
    case CINFER_TYPE_INT8: cbuf_printf(b, "%d", (int)(int8_t)*p); break;
#define INT_CASE(T, ct, fmt, cast)                     \
    case T: {                                          \
      ct v;                                            \
      memcpy(&v, p, sizeof v);                         \
      cbuf_printf(b, fmt, (cast)v);                    \
      break;                                           \
    }
    INT_CASE(CINFER_TYPE_UINT16, uint16_t, "%u", unsigned)
    INT_CASE(CINFER_TYPE_INT16, int16_t, "%d", int)
    INT_CASE(CINFER_TYPE_UINT32, uint32_t, "%" PRIu32, uint32_t)
    INT_CASE(CINFER_TYPE_INT32, int32_t, "%" PRId32, int32_t)
    INT_CASE(CINFER_TYPE_UINT64, uint64_t, "%" PRIu64, uint64_t)
    INT_CASE(CINFER_TYPE_INT64, int64_t, "%" PRId64, int64_t)
#undef INT_CASE
    case CINFER_TYPE_FP16: {
      uint16_t h;
      memcpy(&h, p, 2);
      cbuf_put(b, nb, numfmt_float(nb, half_to_float(h)));
      break;
    }
    case CINFER_TYPE_BF16: {
      uint16_t h;
      memcpy(&h, p, 2);
      cbuf_put(b, nb, numfmt_float(nb, bf16_to_float(h)));
      break;
    }
    case CINFER_TYPE_FP32: {
      float f;
      memcpy(&f, p, 4);
      cbuf_put(b, nb, numfmt_float(nb, f));
      break;
    }
    case CINFER_TYPE_FP64: {
      double d;
      memcpy(&d, p, 8);
      cbuf_put(b, nb, numfmt_double(nb, d));
      break;
    }
    default: break;
  }
}

/* Triton's TENSORS entry: data is the elements, comma-separated, in a JSON string (BYTES
 * elements each in escaped quotes). A tensor in device memory is not read. */
void trace_tensor(cinfer_trace *t, const char *activity, const cinfer_tensor *x) {
  if (!trace_wants_tensors(t)) return;
  if (x->memory_type != CINFER_MEMORY_CPU && x->memory_type != CINFER_MEMORY_CPU_PINNED) return;
  cbuf *b = &t->tensors;
  cbuf_printf(b, ",{\"id\":%" PRIu64 ",\"activity\":\"%s\",\"tensor\":{\"name\":", t->id, activity);
  cbuf_json_string(b, x->name ? x->name : "", x->name ? strlen(x->name) : 0);
  cbuf_puts(b, ",\"data\":\"");
  int64_t n = cinfer_shape_elements(x->shape, x->ndim);
  const unsigned char *p = x->data;
  if (x->dtype == CINFER_TYPE_BYTES) {
    size_t off = 0;
    cbuf s = {0};
    for (int64_t e = 0; e < n && off + 4 <= x->byte_size; e++) {
      uint32_t l = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 | (uint32_t)p[off + 2] << 16 |
                   (uint32_t)p[off + 3] << 24;
      off += 4;
      if (l > x->byte_size - off) break;
      if (e) cbuf_puts(&s, ",");
      cbuf_puts(&s, "\"");
      cbuf_put(&s, p + off, l);
      cbuf_puts(&s, "\"");
      off += l;
    }
    /* the whole data value is one JSON string: escape the quotes and the contents */
    if (s.data && !s.oom) {
      cbuf esc = {0};
      cbuf_json_string(&esc, s.data, s.len);
      if (esc.data && esc.len >= 2) cbuf_put(b, esc.data + 1, esc.len - 2);
      cbuf_free(&esc);
    }
    cbuf_free(&s);
  } else {
    size_t es = cinfer_dtype_size(x->dtype);
    for (int64_t e = 0; es && e < n && (size_t)(e + 1) * es <= x->byte_size; e++) {
      if (e) cbuf_puts(b, ",");
      put_elem(b, x->dtype, p + (size_t)e * es);
    }
  }
  cbuf_puts(b, "\",\"shape\":\"");
  for (int d = 0; d < x->ndim; d++) cbuf_printf(b, "%s%" PRId64, d ? "," : "", x->shape[d]);
  cbuf_printf(b, "\",\"dtype\":\"%s\"}}", cinfer_dtype_name(x->dtype));
}

/* The request is gone: the trace's entries join the setting's pending text, which is
 * written when Triton would write it. */
void trace_finish(cinfer_trace *t, const char *model, int64_t version, const char *request_id) {
  if (!t) return;
  tset *s = t->set;
  cbuf b = {0};
  cbuf_printf(&b, "{\"id\":%" PRIu64 ",\"model_name\":", t->id);
  cbuf_json_string(&b, model, strlen(model));
  cbuf_printf(&b, ",\"model_version\":%" PRId64, version);
  if (request_id && request_id[0]) {
    cbuf_puts(&b, ",\"request_id\":");
    cbuf_json_string(&b, request_id, strlen(request_id));
  }
  cbuf_puts(&b, "}");
  if (s->v.level & CINFER_TRACE_TIMESTAMPS)
    for (int p = 0; p < CINFER_TRACE_POINT_COUNT_; p++)
      if (t->ts[p])
        cbuf_printf(&b, ",{\"id\":%" PRIu64 ",\"timestamps\":[{\"name\":\"%s\",\"ns\":%" PRIu64 "}]}",
                    t->id, point_names[p], t->ts[p]);
  if (t->tensors.len && !t->tensors.oom) cbuf_put(&b, t->tensors.data, t->tensors.len);
  cbuf_free(&t->tensors);
  free(t);
  cbuf out = {0};
  bool indexed = false;
  pthread_mutex_lock(&s->mu);
  if (b.oom) {
    LOG_E("trace %s: out of memory, trace dropped", model);
  } else {
    if (s->in_pending++) cbuf_puts(&s->pending, ",");
    cbuf_put(&s->pending, b.data, b.len);
  }
  s->collected++;
  if ((s->count == 0 && s->collected == s->created) ||
      (s->v.log_frequency && s->in_pending >= s->v.log_frequency)) {
    if (s->in_pending) {
      out = s->pending;
      s->pending = (cbuf){0};
      indexed = true;
    }
    s->in_pending = 0;
  }
  pthread_mutex_unlock(&s->mu);
  cbuf_free(&b);
  if (indexed && s->file && out.data && !out.oom) file_save(s->file, out.data, out.len, true);
  cbuf_free(&out);
  tset_put(s);
}

void trace_request_start(trace_mgr *m, cinfer_request *r) {
  if (!(r->trace = trace_sample(m, r->model->name))) return;
  cinfer_trace *t = r->trace;
  if (r->recv_start_ns) cinfer_trace_stamp_at(t, CINFER_TRACE_HTTP_RECV_START, r->recv_start_ns);
  if (r->recv_end_ns) cinfer_trace_stamp_at(t, CINFER_TRACE_HTTP_RECV_END, r->recv_end_ns);
  cinfer_trace_stamp(t, CINFER_TRACE_REQUEST_START);
  for (uint32_t i = 0; i < r->n_inputs && trace_wants_tensors(t); i++)
    trace_tensor(t, "TENSOR_QUEUE_INPUT", &r->inputs[i].t);
}
