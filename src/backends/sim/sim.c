/* sim.c: the simulated accelerator backend. A batch of n rows "executes" for
 *     base_us + per_item_us * n  (+ uniform jitter in [-jitter_us, +jitter_us])
 * microseconds, sleeping (no CPU burnt), with at most `device_concurrency` batches running
 * at once per device id across every sim model and instance of the process (a GPU runs a
 * bounded number of kernels at once). Outputs have the configured datatype and dims (a -1
 * dim becomes 1) and are filled with a deterministic pattern.
 *
 * Parameters (config.pbtxt `parameters`, string values):
 *   base_us (default 1000), per_item_us (default 100), jitter_us (default 0),
 *   device_concurrency (default 1), seed (default 1).
 * Every result measured on this backend is a simulation and is labelled so in the docs. */
#include <errno.h>
#include <sys/prctl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cinfer/backend.h"

typedef struct sim_device {
  int id;
  int running, limit;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} sim_device;

#define SIM_MAX_DEVICES 64
static sim_device devices[SIM_MAX_DEVICES];
static int n_devices;
static pthread_mutex_t devices_mu = PTHREAD_MUTEX_INITIALIZER;

/* The shared slot table of device `id`; the first model to use a device sets its limit. */
static sim_device *device_get(int id, int limit) {
  pthread_mutex_lock(&devices_mu);
  sim_device *d = NULL;
  for (int i = 0; i < n_devices; i++)
    if (devices[i].id == id) d = &devices[i];
  if (!d && n_devices < SIM_MAX_DEVICES) {
    d = &devices[n_devices++];
    d->id = id;
    d->limit = limit;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
  }
  pthread_mutex_unlock(&devices_mu);
  return d;
}

typedef struct sim_output {
  const char *name;              /* borrowed from the config, which outlives the model */
  cinfer_dtype dtype;
  int ndim;
  int64_t dims[CINFER_MAX_DIMS];
} sim_output;

typedef struct sim_model {
  bool batching;                 /* max_batch_size > 0 */
  uint32_t n_outputs;
  sim_output *outputs;
  double base_us, per_item_us, jitter_us;
  int concurrency;
  unsigned seed;
} sim_model;

typedef struct sim_instance {
  sim_model *m;
  sim_device *dev;
  unsigned rng;
} sim_instance;

static cinfer_status *param_double(const cinfer_model_load_info *info, const char *key,
                                   double def, double lo, double hi, double *out) {
  const char *v = cinfer_config_parameter(info->config, key);
  *out = def;
  if (!v) return NULL;
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (errno || end == v || *end || d < lo || d > hi)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "sim model '%s': parameter '%s' = '%s' is not a number in [%g, %g]",
                             info->model_name, key, v, lo, hi);
  *out = d;
  return NULL;
}

static void sim_model_free(sim_model *m) {
  if (m) free(m->outputs);
  free(m);
}

static cinfer_status *sim_load(const cinfer_model_load_info *info, void **model) {
  const cinfer_config *c = info->config;
  sim_model *m = calloc(1, sizeof *m);
  uint32_t no = cinfer_config_output_count(c);
  if (m) m->outputs = calloc(no ? no : 1, sizeof *m->outputs);
  if (!m || !m->outputs) {
    sim_model_free(m);
    return cinfer_status_oom(NULL);
  }
  double conc, seed;
  cinfer_status *st;
  if ((st = param_double(info, "base_us", 1000, 0, 60e6, &m->base_us)) ||
      (st = param_double(info, "per_item_us", 100, 0, 60e6, &m->per_item_us)) ||
      (st = param_double(info, "jitter_us", 0, 0, 60e6, &m->jitter_us)) ||
      (st = param_double(info, "device_concurrency", 1, 1, 1024, &conc)) ||
      (st = param_double(info, "seed", 1, 0, 4e9, &seed))) {
    sim_model_free(m);
    return st;
  }
  for (uint32_t i = 0; i < no; i++) {
    cinfer_config_io o;
    cinfer_config_output(c, i, &o);
    if (o.dtype == CINFER_TYPE_BYTES) {
      sim_model_free(m);
      return cinfer_status_new(CINFER_INVALID_ARG, "sim model '%s': output '%s' cannot be BYTES",
                               info->model_name, o.name);
    }
    m->outputs[i] = (sim_output){.name = o.name, .dtype = o.dtype, .ndim = o.ndim};
    memcpy(m->outputs[i].dims, o.dims, sizeof o.dims);
  }
  m->n_outputs = no;
  m->batching = cinfer_config_max_batch_size(c) > 0;
  m->concurrency = (int)conc;
  m->seed = (unsigned)seed;
  *model = m;
  return NULL;
}

static void sim_unload(void *model) { sim_model_free(model); }

static cinfer_status *sim_instance_create(void *model, const cinfer_instance_info *info,
                                          void **instance) {
  sim_model *m = model;
  sim_instance *in = calloc(1, sizeof *in);
  if (!in) return cinfer_status_oom(NULL);
  in->m = m;
  in->dev = device_get(info->device_id < 0 ? 0 : info->device_id, m->concurrency);
  if (!in->dev) {
    free(in);
    return cinfer_status_new(CINFER_INTERNAL, "too many simulated devices");
  }
  in->rng = m->seed * 2654435761u + (unsigned)info->index;
  *instance = in;
  return NULL;
}

static void sim_instance_destroy(void *instance) { free(instance); }

static void sleep_us(double us) {
  if (us <= 0) return;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  long long ns = (long long)t.tv_nsec + (long long)(us * 1000.0);
  t.tv_sec += (time_t)(ns / 1000000000ll);
  t.tv_nsec = (long)(ns % 1000000000ll);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {
  }
}

static cinfer_status *sim_execute(void *instance, cinfer_batch *b) {
  sim_instance *in = instance;
  /* Timer slack (50 us by default) would lengthen every simulated execution. */
  static __thread bool slack_set;
  if (!slack_set) {
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    slack_set = true;
  }
  sim_model *m = in->m;
  double us = m->base_us + m->per_item_us * (double)b->batch_size;
  if (m->jitter_us > 0) {
    in->rng = in->rng * 1103515245u + 12345u;
    us += ((double)(in->rng >> 8) / (double)(1u << 24) * 2.0 - 1.0) * m->jitter_us;
  }
  sim_device *d = in->dev;
  pthread_mutex_lock(&d->mu);
  while (d->running >= d->limit) pthread_cond_wait(&d->cv, &d->mu);
  d->running++;
  pthread_mutex_unlock(&d->mu);
  sleep_us(us);
  pthread_mutex_lock(&d->mu);
  d->running--;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);

  for (uint32_t i = 0; i < m->n_outputs; i++) {
    const sim_output *o = &m->outputs[i];
    if (!cinfer_batch_output_requested(b, o->name)) continue;
    int64_t shape[CINFER_MAX_DIMS];
    int nd = 0;
    if (m->batching) shape[nd++] = b->batch_size;
    for (int k = 0; k < o->ndim && nd < CINFER_MAX_DIMS; k++) shape[nd++] = o->dims[k] < 0 ? 1 : o->dims[k];
    int64_t el = cinfer_shape_elements(shape, nd);
    size_t bytes = (size_t)el * cinfer_dtype_size(o->dtype);
    void *data;
    cinfer_status *st = cinfer_batch_output(b, o->name, o->dtype, nd, shape, bytes, &data);
    if (st) return st;
    unsigned char *p = data;
    for (size_t k = 0; k < bytes; k++) p[k] = (unsigned char)(k * 31u + i);
  }
  return NULL;
}

const cinfer_backend_iface cinfer_sim_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "sim",
    .model_load = sim_load,
    .model_unload = sim_unload,
    .instance_create = sim_instance_create,
    .instance_destroy = sim_instance_destroy,
    .execute = sim_execute,
};
