/* sequence_config.c: a model's `sequence_batching` parsed and checked into a seqmodel
 * (strategy, control_input, state with initial_state, max_sequence_idle_microseconds).
 * Every field cinfer does not implement fails the load naming it; every error names the
 * field and the config line. The runtime side is sequence.c.
 *
 * May call: handle.c, sequence_state.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "repo/config.h"
#include "repo/pbtxt.h"
#include "server/sequence_int.h"
#include "server/server_int.h"

static const char *const ctl_kind_names[CTL_N] = {"CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END",
                                                  "CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_CORRID"};

typedef struct pctx {
  const char *src;
  cinfer_status *err;
} pctx;

static bool pfail(pctx *p, const pbtxt_node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool pfail(pctx *p, const pbtxt_node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!p->err) {
    if (n && n->line > 0) p->err = cinfer_status_new(CINFER_INVALID_ARG, "%s:%d: %s", p->src, n->line, msg);
    else p->err = cinfer_status_new(CINFER_INVALID_ARG, "%s: %s", p->src, msg);
  }
  return false;
}

static bool pnot_impl(pctx *p, const pbtxt_node *n, const char *field) {
  if (!p->err) {
    if (n && n->line > 0)
      p->err = cinfer_status_new(CINFER_UNSUPPORTED, "%s:%d: %s is not implemented by cinfer; the model "
                                 "cannot load with it (remove it)", p->src, n->line, field);
    else
      p->err = cinfer_status_new(CINFER_UNSUPPORTED, "%s: %s is not implemented by cinfer; the model "
                                 "cannot load with it (remove it)", p->src, field);
  }
  return false;
}

/* A JSON config writes 64-bit integers and enums as strings. */
static const pbtxt_node *scalar(const pbtxt_node *n, pbtxt_node *tmp) {
  if (!n->json || n->kind != PBTXT_STRING || !n->str[0]) return n;
  *tmp = *n;
  const char *s = n->str;
  bool neg = *s == '-';
  if (neg) s++;
  if (*s >= '0' && *s <= '9') {
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
      if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return n;
      v = v * 10 + (uint64_t)(*s - '0');
    }
    if (*s) return n;
    tmp->kind = PBTXT_INT;
    tmp->neg = neg;
    tmp->mag = v;
    tmp->f = neg ? -(double)v : (double)v;
    return tmp;
  }
  tmp->kind = PBTXT_IDENT;
  return tmp;
}

static bool get_u64(pctx *p, const pbtxt_node *n, const char *field, uint64_t *out) {
  pbtxt_node t;
  if (!pbtxt_as_uint64(scalar(n, &t), out)) return pfail(p, n, "%s must be a non-negative integer", field);
  return true;
}

static bool get_i64(pctx *p, const pbtxt_node *n, const char *field, int64_t *out) {
  pbtxt_node t;
  if (!pbtxt_as_int64(scalar(n, &t), out)) return pfail(p, n, "%s must be an integer", field);
  return true;
}

static bool get_double(pctx *p, const pbtxt_node *n, const char *field, double *out) {
  pbtxt_node t;
  if (!pbtxt_as_double(scalar(n, &t), out)) return pfail(p, n, "%s must be a number", field);
  return true;
}

static bool get_bool(pctx *p, const pbtxt_node *n, const char *field, bool *out) {
  if (!pbtxt_as_bool(n, out)) return pfail(p, n, "%s must be true or false", field);
  return true;
}

static const char *get_ident(const pbtxt_node *n, pbtxt_node *tmp) {
  const pbtxt_node *s = scalar(n, tmp);
  return s->kind == PBTXT_IDENT ? s->str : NULL;
}

static bool get_str(pctx *p, const pbtxt_node *n, const char *field, const char **out) {
  if (n->kind != PBTXT_STRING || strlen(n->str) != n->len) return pfail(p, n, "%s must be a string", field);
  *out = n->str;
  return true;
}

static bool get_dtype(pctx *p, const pbtxt_node *n, const char *field, cinfer_dtype *out) {
  pbtxt_node t;
  const char *id = get_ident(n, &t);
  cinfer_dtype d = id && !strncmp(id, "TYPE_", 5) ? cinfer_dtype_parse(id, strlen(id)) : CINFER_TYPE_INVALID;
  if (d == CINFER_TYPE_INVALID) return pfail(p, n, "%s: unknown data type", field);
  *out = d;
  return true;
}

static bool parse_direct(pctx *p, const pbtxt_node *n, seqsched_config *sc) {
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    if (!strcmp(c->name, "max_queue_delay_microseconds")) {
      if (!get_u64(p, c, "sequence_batching.direct.max_queue_delay_microseconds", &sc->max_queue_delay_us)) return false;
    } else if (!strcmp(c->name, "minimum_slot_utilization")) {
      if (!get_double(p, c, "sequence_batching.direct.minimum_slot_utilization", &sc->minimum_slot_utilization)) return false;
    } else {
      return pfail(p, c, "unknown field 'sequence_batching.direct.%s'", c->name);
    }
  }
  return true;
}

static bool parse_oldest(pctx *p, const pbtxt_node *n, seqsched_config *sc, int64_t *pref, size_t *npref) {
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    if (!strcmp(c->name, "max_candidate_sequences")) {
      uint64_t v;
      if (!get_u64(p, c, "sequence_batching.oldest.max_candidate_sequences", &v)) return false;
      if (v > SEQSCHED_MAX_SLOTS)
        return pfail(p, c, "sequence_batching.oldest.max_candidate_sequences %llu is more than %u",
                     (unsigned long long)v, SEQSCHED_MAX_SLOTS);
      sc->max_candidate_sequences = (uint32_t)v;
    } else if (!strcmp(c->name, "preferred_batch_size")) {
      int64_t v;
      if (!get_i64(p, c, "sequence_batching.oldest.preferred_batch_size", &v)) return false;
      if (*npref >= 64) return pfail(p, c, "sequence_batching.oldest.preferred_batch_size: at most 64 sizes");
      pref[(*npref)++] = v;
    } else if (!strcmp(c->name, "max_queue_delay_microseconds")) {
      if (!get_u64(p, c, "sequence_batching.oldest.max_queue_delay_microseconds", &sc->max_queue_delay_us)) return false;
    } else if (!strcmp(c->name, "preserve_ordering")) {
      bool b;
      if (!get_bool(p, c, "sequence_batching.oldest.preserve_ordering", &b)) return false;
      if (b) return pnot_impl(p, c, "sequence_batching.oldest.preserve_ordering");
    } else {
      return pfail(p, c, "unknown field 'sequence_batching.oldest.%s'", c->name);
    }
  }
  return true;
}

static bool parse_control_input(pctx *p, const pbtxt_node *n, seqmodel *sm) {
  const char *name = NULL;
  int n_controls = 0;
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    if (!strcmp(c->name, "name")) {
      if (!get_str(p, c, "sequence_batching.control_input.name", &name)) return false;
    } else if (strcmp(c->name, "control")) {
      return pfail(p, c, "unknown field 'sequence_batching.control_input.%s'", c->name);
    }
  }
  if (!name || !name[0]) return pfail(p, n, "sequence_batching.control_input must have a 'name'");
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    if (strcmp(c->name, "control")) continue;
    n_controls++;
    int kind = -1;
    int32_t iv[2];
    double fv[2];
    bool bv[2];
    int ni = 0, nf = 0, nb = 0;
    cinfer_dtype dt = CINFER_TYPE_INVALID;
    for (size_t j = 0; j < c->n_children; j++) {
      const pbtxt_node *f = c->children[j];
      if (!strcmp(f->name, "kind")) {
        pbtxt_node t;
        const char *id = get_ident(f, &t);
        for (int k = 0; id && k < CTL_N; k++)
          if (!strcmp(id, ctl_kind_names[k])) kind = k;
        if (kind < 0) return pfail(p, f, "sequence_batching.control_input '%s': unknown control kind", name);
      } else if (!strcmp(f->name, "int32_false_true")) {
        int64_t v;
        if (!get_i64(p, f, "sequence_batching.control_input.control.int32_false_true", &v)) return false;
        if (ni >= 2 || v < INT32_MIN || v > INT32_MAX)
          return pfail(p, f, "sequence_batching.control_input '%s': int32_false_true must be two int32 values", name);
        iv[ni++] = (int32_t)v;
      } else if (!strcmp(f->name, "fp32_false_true")) {
        double v;
        if (!get_double(p, f, "sequence_batching.control_input.control.fp32_false_true", &v)) return false;
        if (nf >= 2) return pfail(p, f, "sequence_batching.control_input '%s': fp32_false_true must be two values", name);
        fv[nf++] = v;
      } else if (!strcmp(f->name, "bool_false_true")) {
        bool v;
        if (!get_bool(p, f, "sequence_batching.control_input.control.bool_false_true", &v)) return false;
        if (nb >= 2) return pfail(p, f, "sequence_batching.control_input '%s': bool_false_true must be two values", name);
        bv[nb++] = v;
      } else if (!strcmp(f->name, "data_type")) {
        if (!get_dtype(p, f, "sequence_batching.control_input.control.data_type", &dt)) return false;
      } else {
        return pfail(p, f, "unknown field 'sequence_batching.control_input.control.%s'", f->name);
      }
    }
    if (kind < 0) return pfail(p, c, "sequence_batching.control_input '%s': control must have a 'kind'", name);
    seq_ctl *ctl = &sm->ctl[kind];
    if (ctl->on)
      return pfail(p, c, "sequence_batching specifies multiple %s tensors", ctl_kind_names[kind]);
    if (kind == CTL_CORRID) {
      if (ni || nf || nb)
        return pfail(p, c, "sequence_batching control %s for '%s' must not have *_false_true values",
                     ctl_kind_names[kind], name);
      if (dt == CINFER_TYPE_INVALID)
        return pfail(p, c, "sequence_batching control %s for '%s' must specify a data_type",
                     ctl_kind_names[kind], name);
      if (dt != CINFER_TYPE_UINT64 && dt != CINFER_TYPE_INT64 && dt != CINFER_TYPE_UINT32 &&
          dt != CINFER_TYPE_INT32 && dt != CINFER_TYPE_BYTES)
        return pfail(p, c, "unexpected data type for control CONTROL_SEQUENCE_CORRID for %s. Allowed data "
                     "types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING", name);
    } else {
      if (dt != CINFER_TYPE_INVALID)
        return pfail(p, c, "sequence_batching control %s for '%s' must not have a data_type",
                     ctl_kind_names[kind], name);
      if ((ni != 0) + (nf != 0) + (nb != 0) != 1 || (ni && ni != 2) || (nf && nf != 2) || (nb && nb != 2))
        return pfail(p, c, "sequence_batching control %s for '%s' must specify exactly one of "
                     "int32_false_true, fp32_false_true and bool_false_true, with two values",
                     ctl_kind_names[kind], name);
      for (int k = 0; k < 2; k++) {
        if (ni) memcpy(ctl->val[k], &iv[k], 4), dt = CINFER_TYPE_INT32;
        if (nf) {
          float f = (float)fv[k];
          memcpy(ctl->val[k], &f, 4);
          dt = CINFER_TYPE_FP32;
        }
        if (nb) ctl->val[k][0] = bv[k], dt = CINFER_TYPE_BOOL;
      }
    }
    ctl->on = true;
    ctl->dtype = dt;
    if (!(ctl->name = strdup(name))) return pfail(p, c, "out of memory");
  }
  if (n_controls != 1)
    return pfail(p, n, "sequence_batching.control_input '%s' must have exactly one 'control' (it has %d)",
                 name, n_controls);
  return true;
}

static bool parse_initial_state(pctx *p, const pbtxt_node *n, seq_state_def *sd, const char *model_dir) {
  cinfer_dtype dt = CINFER_TYPE_INVALID;
  int ndim = 0;
  int64_t dims[CINFER_MAX_DIMS];
  bool zero = false;
  const char *file = NULL;
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    if (!strcmp(c->name, "data_type")) {
      if (!get_dtype(p, c, "sequence_batching.state.initial_state.data_type", &dt)) return false;
    } else if (!strcmp(c->name, "dims")) {
      if (ndim >= CINFER_MAX_DIMS) return pfail(p, c, "sequence_batching.state.initial_state.dims: too many dims");
      if (!get_i64(p, c, "sequence_batching.state.initial_state.dims", &dims[ndim])) return false;
      if (dims[ndim] < 0 || dims[ndim] > (1 << 24))
        return pfail(p, c, "sequence_batching.state.initial_state.dims must be 0..%d", 1 << 24);
      ndim++;
    } else if (!strcmp(c->name, "zero_data")) {
      if (!get_bool(p, c, "sequence_batching.state.initial_state.zero_data", &zero)) return false;
    } else if (!strcmp(c->name, "data_file")) {
      if (!get_str(p, c, "sequence_batching.state.initial_state.data_file", &file)) return false;
    } else if (strcmp(c->name, "name")) {
      return pfail(p, c, "unknown field 'sequence_batching.state.initial_state.%s'", c->name);
    }
  }
  if (dt != sd->dtype)
    return pfail(p, n, "state '%s': initial_state data_type must be the state's (%s)", sd->in,
                 cinfer_dtype_config_name(sd->dtype));
  if (zero == (file != NULL))
    return pfail(p, n, "state '%s': initial_state must have exactly one of zero_data and data_file", sd->in);
  for (int d = 0; d < sd->ndim; d++)
    if (d >= ndim || (sd->dims[d] >= 0 && sd->dims[d] != dims[d]))
      return pfail(p, n, "state '%s': initial_state dims do not match the state's dims", sd->in);
  if (ndim != sd->ndim) return pfail(p, n, "state '%s': initial_state dims do not match the state's dims", sd->in);
  int64_t el = cinfer_shape_elements(dims, ndim);
  size_t bytes = el > 0 ? (size_t)el * cinfer_dtype_size(dt) : 0;
  if (el < 0 || el > (1 << 26)) return pfail(p, n, "state '%s': initial_state is too large", sd->in);
  free(sd->init);
  sd->init = calloc(1, bytes ? bytes : 1);
  if (!sd->init) return pfail(p, n, "out of memory");
  sd->init_bytes = bytes;
  sd->ndim = ndim;
  memcpy(sd->dims, dims, sizeof dims[0] * (size_t)ndim);
  if (file) {
    if (!file[0] || strstr(file, "..") || file[0] == '/')
      return pfail(p, n, "state '%s': initial_state data_file '%s' must be a file name inside "
                   "the model's initial_state folder", sd->in, file);
    char path[4096];
    if (snprintf(path, sizeof path, "%s/initial_state/%s", model_dir, file) >= (int)sizeof path)
      return pfail(p, n, "state '%s': initial_state data_file path is too long", sd->in);
    FILE *f = fopen(path, "rb");
    if (!f) return pfail(p, n, "state '%s': cannot open initial_state data_file %s", sd->in, path);
    size_t got = bytes ? fread(sd->init, 1, bytes, f) : 0;
    int extra = fgetc(f);
    fclose(f);
    if (got != bytes || extra != EOF)
      return pfail(p, n, "state '%s': initial_state data_file %s must hold exactly %zu bytes", sd->in,
                   path, bytes);
  }
  return true;
}

static bool parse_state(pctx *p, const pbtxt_node *n, seq_state_def *sd, const char *model_dir) {
  const pbtxt_node *init = NULL;
  sd->dtype = CINFER_TYPE_INVALID;
  for (size_t i = 0; i < n->n_children; i++) {
    const pbtxt_node *c = n->children[i];
    const char *s = NULL;
    if (!strcmp(c->name, "input_name")) {
      if (!get_str(p, c, "sequence_batching.state.input_name", &s)) return false;
      free(sd->in);
      if (!(sd->in = strdup(s))) return pfail(p, c, "out of memory");
    } else if (!strcmp(c->name, "output_name")) {
      if (!get_str(p, c, "sequence_batching.state.output_name", &s)) return false;
      free(sd->out);
      if (!(sd->out = strdup(s))) return pfail(p, c, "out of memory");
    } else if (!strcmp(c->name, "data_type")) {
      if (!get_dtype(p, c, "sequence_batching.state.data_type", &sd->dtype)) return false;
    } else if (!strcmp(c->name, "dims")) {
      if (sd->ndim >= CINFER_MAX_DIMS) return pfail(p, c, "sequence_batching.state.dims: too many dims");
      if (!get_i64(p, c, "sequence_batching.state.dims", &sd->dims[sd->ndim])) return false;
      if (sd->dims[sd->ndim] < -1 || sd->dims[sd->ndim] > (1 << 24))
        return pfail(p, c, "sequence_batching.state.dims must be -1..%d", 1 << 24);
      sd->ndim++;
    } else if (!strcmp(c->name, "initial_state")) {
      if (init) return pnot_impl(p, c, "sequence_batching.state.initial_state (more than one)");
      init = c;
    } else if (!strcmp(c->name, "use_same_buffer_for_input_output") || !strcmp(c->name, "use_growable_memory")) {
      bool b;
      char field[96];
      snprintf(field, sizeof field, "sequence_batching.state.%s", c->name);
      if (!get_bool(p, c, field, &b)) return false;
      if (b) return pnot_impl(p, c, field);
    } else {
      return pfail(p, c, "unknown field 'sequence_batching.state.%s'", c->name);
    }
  }
  if (!sd->in || !sd->in[0] || !sd->out || !sd->out[0])
    return pfail(p, n, "sequence_batching.state must have an input_name and an output_name");
  if (sd->dtype == CINFER_TYPE_INVALID) return pfail(p, n, "state '%s' must have a data_type", sd->in);
  if (sd->dtype == CINFER_TYPE_BYTES) return pnot_impl(p, n, "sequence_batching.state with data_type TYPE_STRING");
  if (sd->ndim == 0) return pfail(p, n, "state '%s' must have dims", sd->in);
  if (init) return parse_initial_state(p, init, sd, model_dir);
  for (int d = 0; d < sd->ndim; d++)
    if (sd->dims[d] < 0)
      return pfail(p, n, "state '%s' has a variable dim (-1): it needs an initial_state with its dims", sd->in);
  int64_t el = cinfer_shape_elements(sd->dims, sd->ndim);
  if (el > (1 << 26)) return pfail(p, n, "state '%s' is too large", sd->in);
  sd->init_bytes = (size_t)el * cinfer_dtype_size(sd->dtype);
  if (!(sd->init = calloc(1, sd->init_bytes ? sd->init_bytes : 1))) return pfail(p, n, "out of memory");
  return true;
}

static bool name_taken(const cinfer_model *m, const seqmodel *sm, int upto_states, const char *name) {
  for (int i = 0; i < m->n_inputs; i++)
    if (!strcmp(m->inputs[i].name, name)) return true;
  for (int k = 0; k < CTL_N; k++)
    if (sm->ctl[k].on && !strcmp(sm->ctl[k].name, name)) return true;
  for (int i = 0; i < upto_states; i++)
    if (!strcmp(sm->states[i].in, name)) return true;
  return false;
}

void seqmodel_destroy(seqmodel *sm) {
  if (!sm) return;
  seqsched_destroy(sm->sched);
  metrics_series_remove(sm->m_open);
  for (int k = 0; k < CTL_N; k++) free(sm->ctl[k].name);
  for (int i = 0; i < sm->n_states; i++) {
    free(sm->states[i].in);
    free(sm->states[i].out);
    free(sm->states[i].init);
  }
  free(sm->states);
  free(sm);
}

cinfer_status *seqmodel_create(cinfer_model *m) {
  const cinfer_model_config *c = m->config;
  const pbtxt_node *sb = c->sequence_batching;
  if (!sb) return NULL;
  pctx p = {.src = c->source_path && c->source_path[0] ? c->source_path : "config"};
  seqmodel *sm = calloc(1, sizeof *sm);
  if (!sm) return cinfer_status_oom("sequence batcher");
  size_t n_state_nodes = 0;
  for (size_t i = 0; i < sb->n_children; i++) n_state_nodes += !strcmp(sb->children[i]->name, "state");
  sm->states = calloc(n_state_nodes + 1, sizeof *sm->states);
  int64_t pref[64];
  size_t npref = 0;
  seqsched_config sc = {.strategy = SEQ_DIRECT, .n_instances = m->n_instances,
                        .max_batch_size = m->batching ? m->max_batch : 0,
                        .max_sequence_idle_us = 1000000, /* Triton's default */
                        .free_state = seq_vals_free};
  bool have_strategy = false;
  if (!sm->states) {
    pfail(&p, sb, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < sb->n_children && !p.err; i++) {
    const pbtxt_node *f = sb->children[i];
    if (!strcmp(f->name, "direct") || !strcmp(f->name, "oldest")) {
      if (have_strategy) {
        pfail(&p, f, "sequence_batching may have only one of 'direct' and 'oldest'");
        break;
      }
      have_strategy = true;
      if (f->kind != PBTXT_MESSAGE) {
        pfail(&p, f, "sequence_batching.%s must be a message", f->name);
      } else if (f->name[0] == 'd') {
        parse_direct(&p, f, &sc);
      } else {
        sc.strategy = SEQ_OLDEST;
        sc.max_candidate_sequences = 1;
        parse_oldest(&p, f, &sc, pref, &npref);
      }
    } else if (!strcmp(f->name, "max_sequence_idle_microseconds")) {
      uint64_t v;
      if (get_u64(&p, f, "sequence_batching.max_sequence_idle_microseconds", &v))
        sc.max_sequence_idle_us = v ? v : 1000000; /* 0 means the default, as in Triton */
    } else if (!strcmp(f->name, "control_input")) {
      if (f->kind != PBTXT_MESSAGE) pfail(&p, f, "sequence_batching.control_input must be a message");
      else parse_control_input(&p, f, sm);
    } else if (!strcmp(f->name, "state")) {
      if (f->kind != PBTXT_MESSAGE) pfail(&p, f, "sequence_batching.state must be a message");
      else if (parse_state(&p, f, &sm->states[sm->n_states++], m->model_dir)) {
        seq_state_def *sd = &sm->states[sm->n_states - 1];
        if (name_taken(m, sm, sm->n_states - 1, sd->in))
          pfail(&p, f, "state input_name '%s' is also the name of another input or control", sd->in);
        for (int o = 0; o < m->n_outputs && !p.err; o++)
          if (!strcmp(m->outputs[o].name, sd->out))
            pfail(&p, f, "state output_name '%s' is also listed in 'output' (states are not "
                  "returned to clients)", sd->out);
      }
    } else if (!strcmp(f->name, "iterative_sequence")) {
      bool b;
      if (get_bool(&p, f, "sequence_batching.iterative_sequence", &b) && b)
        pnot_impl(&p, f, "sequence_batching.iterative_sequence");
    } else { /* generative_sequence and any other field of ModelSequenceBatching */
      char field[160];
      snprintf(field, sizeof field, "sequence_batching.%.120s", f->name);
      pnot_impl(&p, f, field);
    }
  }
  for (int k = 0; k < CTL_N && !p.err; k++) {
    if (!sm->ctl[k].on) continue;
    for (int i = 0; i < m->n_inputs; i++)
      if (!strcmp(m->inputs[i].name, sm->ctl[k].name))
        pfail(&p, sb, "control input '%s' is also listed in 'input' (the sequence batcher fills it)",
              sm->ctl[k].name);
    for (int j = k + 1; j < CTL_N; j++)
      if (sm->ctl[j].on && !strcmp(sm->ctl[j].name, sm->ctl[k].name))
        pfail(&p, sb, "control input name '%s' is used twice", sm->ctl[k].name);
  }
  if (!p.err && sm->n_states && cinfer_model_is_decoupled(m))
    pnot_impl(&p, sb, "sequence_batching.state with a decoupled backend");
  if (p.err) goto out;
  sc.preferred = pref;
  sc.n_preferred = npref;
  cinfer_status *st = seqsched_create(&sc, &sm->sched);
  if (st) {
    p.err = cinfer_status_prefix(st, "%s", p.src);
    goto out;
  }
  for (int k = 0; k < CTL_N; k++) sm->n_extra += sm->ctl[k].on;
  sm->n_extra += sm->n_states;
  char ver[32];
  snprintf(ver, sizeof ver, "%lld", (long long)m->version);
  const char *lab[] = {"model", m->name, "version", ver, NULL};
  sm->m_open = metrics_series(metrics_family(server_metrics(m->server), "cinfer_sequence_active",
                                             "Sequences open in the sequence batcher (started, not "
                                             "yet ended or released)", METRIC_GAUGE, NULL, 0), lab);
  if (!sm->m_open) {
    p.err = cinfer_status_oom("metrics of the sequence batcher");
    goto out;
  }
  m->seq = sm;
  m->n_extra_inputs = sm->n_extra;
  LOG_I("model '%s': sequence batcher, %s strategy, %d state(s), idle release after %llu us", m->name,
        sc.strategy == SEQ_DIRECT ? "direct" : "oldest", sm->n_states,
        (unsigned long long)sc.max_sequence_idle_us);
  return NULL;
out:
  seqmodel_destroy(sm);
  return p.err;
}
