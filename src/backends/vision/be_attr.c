/* be_attr.c: the attribute_decode backend. The raw outputs of attribute models (one row
 * per face, batched) -> values a user reads. One model per task:
 *
 *   task ssrnet_regression: inputs the 3S SSR-Net outputs in the order the networks emit
 *     them: prob_stage_1..S [s_k], stageK_delta_k [1] x S, index_offset_stage1..S [s_k];
 *     output 0 FP32 [1] = the merged regression x `scale` (age: scale 101, the SSR-Net
 *     range 0..100), rounded to whole numbers when round = true.
 *   task ssrnet_binary: same inputs, merged (range 0..1); output 0 TYPE_STRING [1]: the
 *     second of the two `labels` when the value >= threshold (default 0.5), else the
 *     first; optional output 1 FP32 [1]: the probability of that label (v or 1 - v,
 *     clipped to 0..1).
 *   task classify: input 0 FP32 [K] logits (or probabilities with softmax = false);
 *     output 0 TYPE_STRING [1] the label of the largest; optional output 1 FP32 [1] its
 *     probability. labels: `labels` ("a,b,c") or `labels_file` (one per line, in the model
 *     directory); exactly K of them.
 *   task l2_normalize: input 0 FP32 [D]; output 0 FP32 [D] = v / ||v||.
 *
 * Parameters: task (required), and per task: stage_num ("3,3,3"), lambda_local (1),
 * lambda_d (1), scale (1), round (false), labels, labels_file, threshold, softmax (true).
 * A parameter of another task fails the load. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/vision/be.h"

#define ATTR_MAX_STAGES 8
enum { T_REG, T_BIN, T_CLS, T_L2 };

typedef struct attr_model {
  const char *model_name;
  int task;
  int stages, stage_num[ATTR_MAX_STAGES];
  float lambda_local, lambda_d, scale, threshold;
  bool round, softmax;
  int64_t width; /* K or D: elements per row of input 0 (classify, l2) */
  const char *in[3 * ATTR_MAX_STAGES];
  int n_in;
  const char *out0, *out1;
  char **labels;
  int n_labels;
  size_t max_label;
} attr_model;

static void attr_free(attr_model *m) {
  if (m) vb_labels_free(m->labels, m->n_labels);
  free(m);
}

static cinfer_status *attr_load(const cinfer_model_load_info *info, void **model) {
  static const char *const known[] = {"task", "stage_num", "lambda_local", "lambda_d", "scale",
                                      "round", "labels", "labels_file", "threshold", "softmax",
                                      NULL};
  static const char *const tasks[] = {"ssrnet_regression", "ssrnet_binary", "classify",
                                      "l2_normalize", NULL};
  /* Which parameters each task takes. */
  static const char *const per_task[][8] = {
      {"stage_num", "lambda_local", "lambda_d", "scale", "round", NULL},
      {"stage_num", "lambda_local", "lambda_d", "labels", "labels_file", "threshold", NULL},
      {"labels", "labels_file", "softmax", NULL},
      {NULL}};
  vp p;
  cinfer_status *st = vp_open(&p, info, "attribute_decode", known);
  if (st) return st;
  if (!vp_str(&p, "task"))
    return vp_err(&p, "parameter 'task' is required (ssrnet_regression, ssrnet_binary, classify, "
                      "l2_normalize)");
  if (cinfer_config_max_batch_size(info->config) < 1)
    return vp_err(&p, "decodes one face per row: set max_batch_size > 0");
  attr_model *m = calloc(1, sizeof *m);
  if (!m) return cinfer_status_oom(NULL);
  m->model_name = info->model_name;
  if ((st = vp_enum(&p, "task", 0, tasks, &m->task))) goto fail;
  for (int k = 1; known[k]; k++) {
    bool ok = false;
    for (int j = 0; per_task[m->task][j]; j++)
      if (!strcmp(per_task[m->task][j], known[k])) ok = true;
    if (!ok && vp_str(&p, known[k])) {
      st = vp_err(&p, "parameter '%s' is not used by task %s", known[k], tasks[m->task]);
      goto fail;
    }
  }
  uint32_t ni = cinfer_config_input_count(info->config), no = cinfer_config_output_count(info->config);
  cinfer_config_io io;
  if (m->task == T_REG || m->task == T_BIN) {
    float sn[ATTR_MAX_STAGES] = {3, 3, 3};
    int ns = 3;
    if ((st = vp_floats(&p, "stage_num", 1, ATTR_MAX_STAGES, sn, &ns)) ||
        (st = vp_float(&p, "lambda_local", 1, -1e3, 1e3, &m->lambda_local)) ||
        (st = vp_float(&p, "lambda_d", 1, -1e3, 1e3, &m->lambda_d)) ||
        (st = vp_float(&p, "scale", 1, -1e6, 1e6, &m->scale)) ||
        (st = vp_bool(&p, "round", false, &m->round)) ||
        (st = vp_float(&p, "threshold", 0.5, 0, 1, &m->threshold)))
      goto fail;
    m->stages = ns;
    for (int k = 0; k < ns; k++) {
      if (sn[k] < 1 || sn[k] > 1024 || sn[k] != floorf(sn[k])) {
        st = vp_err(&p, "parameter 'stage_num': %g is not a whole number in [1, 1024]", sn[k]);
        goto fail;
      }
      m->stage_num[k] = (int)sn[k];
    }
    m->n_in = 3 * ns;
    if ((int)ni != m->n_in) {
      st = vp_err(&p, "task %s with %d stages takes %d inputs (probabilities, deltas, index "
                      "offsets per stage); the config has %u", tasks[m->task], ns, m->n_in, ni);
      goto fail;
    }
    for (int i = 0; i < m->n_in; i++) {
      int64_t d = i / ns == 1 ? 1 : m->stage_num[i % ns];
      if ((st = vb_check_io(&p, true, (uint32_t)i, CINFER_TYPE_FP32, CINFER_TYPE_INVALID, 1, &d, &io)))
        goto fail;
      m->in[i] = io.name;
    }
  } else {
    if ((st = vp_bool(&p, "softmax", true, &m->softmax))) goto fail;
    m->n_in = 1;
    if (ni != 1) {
      st = vp_err(&p, "task %s takes one input", tasks[m->task]);
      goto fail;
    }
    if ((st = vb_check_io(&p, true, 0, CINFER_TYPE_FP32, CINFER_TYPE_INVALID, -1, NULL, &io))) goto fail;
    if (io.ndim != 1 || io.dims[0] < 1) {
      st = vp_err(&p, "input '%s' must have one fixed dimension (the classes or the embedding)", io.name);
      goto fail;
    }
    m->in[0] = io.name;
    m->width = io.dims[0];
  }
  const int64_t one = 1;
  if (m->task == T_BIN || m->task == T_CLS) {
    if ((st = vb_labels(&p, "labels", "labels_file", &m->labels, &m->n_labels))) goto fail;
    int64_t want = m->task == T_BIN ? 2 : m->width;
    if (m->n_labels != want) {
      st = vp_err(&p, "needs %lld labels (parameter labels or labels_file); it has %d",
                  (long long)want, m->n_labels);
      goto fail;
    }
    for (int i = 0; i < m->n_labels; i++)
      if (strlen(m->labels[i]) > m->max_label) m->max_label = strlen(m->labels[i]);
    if (no < 1 || no > 2) {
      st = vp_err(&p, "outputs are the label and optionally its probability");
      goto fail;
    }
    if ((st = vb_check_io(&p, false, 0, CINFER_TYPE_BYTES, CINFER_TYPE_INVALID, 1, &one, &io))) goto fail;
    m->out0 = io.name;
    if (no == 2) {
      if ((st = vb_check_io(&p, false, 1, CINFER_TYPE_FP32, CINFER_TYPE_INVALID, 1, &one, &io))) goto fail;
      m->out1 = io.name;
    }
  } else {
    int64_t want = m->task == T_REG ? 1 : m->width;
    if (no != 1) {
      st = vp_err(&p, "task %s has one output", tasks[m->task]);
      goto fail;
    }
    if ((st = vb_check_io(&p, false, 0, CINFER_TYPE_FP32, CINFER_TYPE_INVALID, 1, &want, &io))) goto fail;
    m->out0 = io.name;
  }
  *model = m;
  return NULL;
fail:
  attr_free(m);
  return st;
}

static void attr_unload(void *model) { attr_free(model); }

static cinfer_status *attr_instance(void *model, const cinfer_instance_info *info, void **inst) {
  (void)info;
  *inst = model;
  return NULL;
}

static void attr_instance_destroy(void *inst) { (void)inst; }

static cinfer_status *attr_run(const attr_model *m, cinfer_batch *b) {
  int64_t rows = b->batch_size;
  const float *in[3 * ATTR_MAX_STAGES];
  for (int i = 0; i < m->n_in; i++) {
    const cinfer_tensor *t = NULL;
    for (uint32_t k = 0; k < b->n_inputs; k++)
      if (!strcmp(b->inputs[k].name, m->in[i])) t = &b->inputs[k];
    if (!t) return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' is missing", m->in[i]);
    cinfer_status *st = cinfer_tensor_check(t);
    if (st) return st;
    int64_t per = m->task == T_REG || m->task == T_BIN
                      ? (i / m->stages == 1 ? 1 : m->stage_num[i % m->stages])
                      : m->width;
    if (t->dtype != CINFER_TYPE_FP32 || cinfer_shape_elements(t->shape, t->ndim) != rows * per)
      return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' must be FP32 [%lld, %lld]",
                               m->in[i], (long long)rows, (long long)per);
    in[i] = t->data;
  }
  int64_t s1[2] = {rows, 1}, sw[2] = {rows, m->width};
  cinfer_status *st;
  if (m->task == T_L2) {
    float *o;
    if ((st = cinfer_batch_output(b, m->out0, CINFER_TYPE_FP32, 2, sw, sizeof(float) * (size_t)(rows * m->width), (void **)&o)))
      return st;
    for (int64_t r = 0; r < rows; r++) vis_l2_normalize(in[0] + r * m->width, o + r * m->width, (int)m->width);
    return NULL;
  }
  /* Per row: a value (regression) or a label index and probability. */
  float *val = malloc(sizeof(float) * (size_t)(rows ? rows : 1));
  int *idx = malloc(sizeof(int) * (size_t)(rows ? rows : 1));
  float *tmp = m->task == T_CLS ? malloc(sizeof(float) * (size_t)m->width) : NULL;
  if (!val || !idx || (m->task == T_CLS && !tmp)) {
    free(val), free(idx), free(tmp);
    return cinfer_status_oom("attribute_decode");
  }
  for (int64_t r = 0; r < rows; r++) {
    if (m->task == T_CLS) {
      memcpy(tmp, in[0] + r * m->width, sizeof(float) * (size_t)m->width);
      if (m->softmax) {
        idx[r] = vis_softmax_argmax(tmp, (int)m->width);
      } else {
        idx[r] = 0;
        for (int k = 1; k < m->width; k++)
          if (tmp[k] > tmp[idx[r]]) idx[r] = k;
      }
      val[r] = tmp[idx[r]];
      continue;
    }
    const float *prob[ATTR_MAX_STAGES], *offs[ATTR_MAX_STAGES];
    float delta[ATTR_MAX_STAGES];
    for (int k = 0; k < m->stages; k++) {
      prob[k] = in[k] + r * m->stage_num[k];
      delta[k] = in[m->stages + k][r];
      offs[k] = in[2 * m->stages + k] + r * m->stage_num[k];
    }
    double v = vis_ssrnet_merge(prob, offs, delta, m->stage_num, m->stages, m->lambda_local, m->lambda_d);
    if (m->task == T_REG) {
      v *= m->scale;
      val[r] = (float)(m->round ? nearbyint(v) : v);
    } else {
      idx[r] = v >= m->threshold ? 1 : 0;
      double pr = idx[r] ? v : 1 - v;
      val[r] = (float)fmin(fmax(pr, 0), 1);
    }
  }
  free(tmp);
  if (m->task == T_REG) {
    float *o;
    st = cinfer_batch_output(b, m->out0, CINFER_TYPE_FP32, 2, s1, sizeof(float) * (size_t)rows, (void **)&o);
    if (!st) memcpy(o, val, sizeof(float) * (size_t)rows);
  } else {
    size_t bytes = 0;
    for (int64_t r = 0; r < rows; r++) bytes += 4 + strlen(m->labels[idx[r]]);
    uint8_t *o;
    st = cinfer_batch_output(b, m->out0, CINFER_TYPE_BYTES, 2, s1, bytes, (void **)&o);
    for (int64_t r = 0; !st && r < rows; r++) o += vb_put_bytes(o, m->labels[idx[r]], strlen(m->labels[idx[r]]));
    float *op;
    if (!st && m->out1 && cinfer_batch_output_requested(b, m->out1) &&
        !(st = cinfer_batch_output(b, m->out1, CINFER_TYPE_FP32, 2, s1, sizeof(float) * (size_t)rows, (void **)&op)))
      memcpy(op, val, sizeof(float) * (size_t)rows);
  }
  free(val), free(idx);
  return st;
}

static cinfer_status *attr_execute(void *instance, cinfer_batch *b) {
  const attr_model *m = instance;
  cinfer_status *st = attr_run(m, b);
  return st ? cinfer_status_prefix(st, "attribute_decode model '%s'", m->model_name) : NULL;
}

const cinfer_backend_iface cinfer_attribute_decode_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "attribute_decode",
    .model_load = attr_load,
    .model_unload = attr_unload,
    .instance_create = attr_instance,
    .instance_destroy = attr_instance_destroy,
    .execute = attr_execute,
};
