/* run.c: `cinfer run`, the ONNX test runner.
 *
 *   cinfer run --model M.onnx --test-data-dir DIR [--rtol R] [--atol A] [--threads N]
 *              [--repeat N] [--min-time S] [--batch N] [--input NAME=FILE]...
 *              [--output-dir DIR] [--profile] [--reference]
 *
 * DIR holds input_K.pb / output_K.pb (ONNX test-data layout), or test_data_set_* folders
 * of that layout (each is run). Inputs are matched to graph inputs by the TensorProto name,
 * else by position. Each output is compared elementwise: |got - want| <= atol + rtol*|want|;
 * the max absolute and relative errors and PASS/FAIL are printed. Exit status: 0 when
 * every output of every set passes, 1 on a mismatch or run error, 2 on usage or load
 * errors. --repeat prints latency statistics; --min-time S goes on repeating until the timed
 * runs have taken S seconds (a measurement window by time, as perf_analyzer's: a window of a
 * few milliseconds measures the scheduler's transients, not the engine); --batch N repeats
 * each input N times along dim 0 (for batchable models); --profile prints per-operator
 * times. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "backends/onnx/onnx.h"
#include "cli/cli.h"
#include "core/elem.h"
#include "core/half.h"

typedef struct run_opts {
  const char *model, *data_dir, *out_dir;
  double rtol, atol, min_time;
  int threads, repeat, batch;
  bool profile, reference;
  const char **in_spec; /* every --input NAME=FILE (argv strings); n_in_spec of them */
  int n_in_spec;
} run_opts;

/* --min-time stops adding runs here (a latency array of 8 MiB) */
#define RUN_MAX_REPEAT (1 << 20)

typedef struct owned_tensor {
  cinfer_tensor t;
  void *data;
  char *name;
} owned_tensor;

static void usage(FILE *f) {
  fprintf(f,
          "usage: cinfer run --model M.onnx [--test-data-dir DIR] [--input NAME=FILE]...\n"
          "                  [--rtol R] [--atol A] [--threads N] [--repeat N] [--min-time S]\n"
          "                  [--batch N] [--output-dir DIR] [--profile] [--reference]\n"
          "  --test-data-dir DIR  input_K.pb/output_K.pb, or a folder of test_data_set_*\n"
          "  --input NAME=FILE    TensorProto .pb or .npy input (overrides the data dir)\n"
          "  --rtol/--atol        tolerances (default 1e-4 / 1e-5)\n"
          "  --threads N          kernel threads (default 1)\n"
          "  --repeat N           run N more times and print latency statistics\n"
          "  --min-time S         with --repeat: go on until the timed runs took S seconds\n"
          "                       (0-3600; at most 1048576 runs in all)\n"
          "  --batch N            repeat every input N times along dim 0\n"
          "  --output-dir DIR     write output_K.pb in graph output order\n"
          "  --profile            per-operator time profile\n"
          "  --reference          reference kernels only (no oneDNN)\n");
}

static bool file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void free_tensors(owned_tensor *t, int n) {
  for (int i = 0; i < n; i++) {
    free(t[i].data);
    free(t[i].name);
  }
}

static cinfer_status *load_tensor(const char *path, owned_tensor *o) {
  memset(o, 0, sizeof *o);
  size_t n = strlen(path);
  if (n > 4 && !strcmp(path + n - 4, ".npy")) return onnx_tensor_read_npy(path, &o->t, &o->data);
  return onnx_tensor_read_pb(path, &o->t, &o->data, &o->name);
}

static double get_d(const cinfer_tensor *t, size_t i) {
  if (t->dtype == CINFER_TYPE_FP16) return half_to_float(((const uint16_t *)t->data)[i]);
  if (t->dtype == CINFER_TYPE_BF16) return bf16_to_float(((const uint16_t *)t->data)[i]);
  return cinfer_elem_f64(t->dtype, t->data, i, NAN);
}

static void shape_str(const cinfer_tensor *t, char *b, size_t n) {
  size_t o = (size_t)snprintf(b, n, "[");
  for (int i = 0; i < t->ndim && o < n; i++)
    o += (size_t)snprintf(b + o, n - o, "%s%lld", i ? "," : "", (long long)t->shape[i]);
  if (o < n) snprintf(b + o, n - o, "]");
}

/* Returns true when got matches want within tolerances; prints one line. */
static bool compare(const char *name, const cinfer_tensor *got, const cinfer_tensor *want,
                    double rtol, double atol) {
  char gs[128], ws[128];
  shape_str(got, gs, sizeof gs);
  shape_str(want, ws, sizeof ws);
  bool same_shape = got->ndim == want->ndim &&
                    !memcmp(got->shape, want->shape, sizeof(int64_t) * (size_t)got->ndim);
  if (!same_shape || got->dtype != want->dtype) {
    printf("  output %-40s FAIL: got %s %s, expected %s %s\n", name, cinfer_dtype_name(got->dtype),
           gs, cinfer_dtype_name(want->dtype), ws);
    return false;
  }
  if (got->dtype == CINFER_TYPE_BYTES) { /* strings: byte for byte (the length-prefixed layout) */
    bool same = got->byte_size == want->byte_size && !memcmp(got->data, want->data, got->byte_size);
    printf("  output %-40s %-5s %-16s %s\n", name, "BYTES", gs, same ? "PASS" : "FAIL (strings differ)");
    return same;
  }
  size_t es = cinfer_dtype_size(got->dtype), n = es ? got->byte_size / es : 0;
  double max_abs = 0, max_rel = 0;
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < n; i++) {
    double g = get_d(got, i), w = get_d(want, i);
    if (isnan(g) && isnan(w)) continue;
    if (isinf(w) && g == w) continue;
    double d = fabs(g - w);
    if (isnan(d)) d = INFINITY;
    double r = d / (fabs(w) > 1e-30 ? fabs(w) : 1e-30);
    if (d > max_abs) max_abs = d;
    if (d > atol && r > max_rel) max_rel = r;
    if (!(d <= atol + rtol * fabs(w))) {
      if (!bad) first_bad = i;
      bad++;
    }
  }
  printf("  output %-40s %-5s %-16s max_abs %.3g  max_rel %.3g  %s", name, cinfer_dtype_name(got->dtype),
         gs, max_abs, max_rel, bad ? "FAIL" : "PASS");
  if (bad)
    printf(" (%zu of %zu outside tolerance; first at %zu: got %.9g want %.9g)", bad, n, first_bad,
           get_d(got, first_bad), get_d(want, first_bad));
  printf("\n");
  return bad == 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Runs one test set (dir may be NULL when only --input is used). 0 pass, 1 fail, 2 error */
static int run_set(const run_opts *o, onnx_model *m, onnx_session *s, const char *dir) {
  int nin = onnx_model_input_count(m), nout = onnx_model_output_count(m);
  /* Sized from the model (the loader bounds the counts by CINFER_MAX_INPUTS/OUTPUTS):
   * ins holds the data dir's input_K.pb (at most one per graph input is read) and then
   * every --input file, want one reference per graph output. */
  int cap_ins = nin + o->n_in_spec + 1;
  owned_tensor *ins = calloc((size_t)cap_ins, sizeof *ins);
  owned_tensor *want = calloc((size_t)nout + 1, sizeof *want);
  cinfer_tensor *feed = calloc((size_t)nin + 1, sizeof *feed);
  cinfer_tensor *outs = calloc((size_t)nout + 1, sizeof *outs);
  void **batched = calloc((size_t)nin + 1, sizeof *batched);
  int n_loaded = 0, n_want = 0, rc = 0;
  cinfer_status *st = NULL;
  char path[4096];
  if (!ins || !want || !feed || !outs || !batched) {
    st = cinfer_status_oom(NULL);
    goto error;
  }
  if (dir)
    for (int k = 0; k < nin; k++) {
      snprintf(path, sizeof path, "%s/input_%d.pb", dir, k);
      if (!file_exists(path)) break;
      if ((st = load_tensor(path, &ins[n_loaded]))) goto error;
      n_loaded++;
    }
  /* order: by name when the file names it, else by position; --input overrides */
  for (int i = 0; i < nin; i++) {
    const onnx_io_info *info = onnx_model_input(m, i);
    int k = -1;
    for (int j = 0; j < n_loaded; j++)
      if (ins[j].name && !strcmp(ins[j].name, info->name)) k = j;
    if (k < 0 && i < n_loaded) k = i;
    for (int q = 0; q < o->n_in_spec; q++) {
      const char *eq = strchr(o->in_spec[q], '=');
      if (eq && (size_t)(eq - o->in_spec[q]) == strlen(info->name) &&
          !strncmp(o->in_spec[q], info->name, strlen(info->name))) {
        if ((st = load_tensor(eq + 1, &ins[n_loaded]))) goto error;
        k = n_loaded++;
      }
    }
    if (k < 0) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "no data for input '%s'", info->name);
      goto error;
    }
    feed[i] = ins[k].t;
    feed[i].name = info->name;
  }
  /* --batch: replicate along dim 0 (into batched[i]) */
  /* A model that cannot batch (fixed batch of 1 the graph depends on) processes a batch as
   * o->batch consecutive batch-1 runs, like a client would. */
  int loops = 1;
  if (o->batch > 1 && !onnx_model_batchable(m)) {
    loops = o->batch;
    printf("  (model is not batchable: a batch of %d runs as %d batch-1 runs)\n", o->batch, o->batch);
  }
  if (o->batch > 1 && loops == 1)
    for (int i = 0; i < nin; i++) {
      if (feed[i].ndim < 1 || feed[i].shape[0] != 1) {
        st = cinfer_status_new(CINFER_INVALID_ARG, "--batch needs dim 0 = 1 on input '%s'", feed[i].name);
        goto error;
      }
      batched[i] = malloc(feed[i].byte_size * (size_t)o->batch + 1);
      if (!batched[i]) { st = cinfer_status_oom(NULL); goto error; }
      for (int b = 0; b < o->batch; b++)
        memcpy((char *)batched[i] + feed[i].byte_size * (size_t)b, feed[i].data, feed[i].byte_size);
      feed[i].data = batched[i];
      feed[i].byte_size *= (size_t)o->batch;
      feed[i].shape[0] = o->batch;
    }
  double t0 = (clock_now_ns() * 1e-6);
  for (int l = 0; l < loops && !st; l++) st = onnx_session_run(s, feed, nin, outs);
  if (st) goto error;
  double first = (clock_now_ns() * 1e-6) - t0;
  if (o->repeat > 0) {
    int cap = o->repeat, n = 0; /* lat grows (doubling) while --min-time keeps the runs going */
    double *lat = malloc(sizeof(double) * (size_t)cap);
    if (!lat) { st = cinfer_status_oom(NULL); goto error; }
    if (o->profile) onnx_session_profile_reset(s);
    double tot0 = (clock_now_ns() * 1e-6), cpu0 = (clock_cpu_ns() * 1e-6);
    while (!st && (n < o->repeat || ((clock_now_ns() * 1e-6) - tot0 < o->min_time * 1e3 && n < RUN_MAX_REPEAT))) {
      if (n == cap) {
        int ncap = cap > RUN_MAX_REPEAT / 2 ? RUN_MAX_REPEAT : 2 * cap;
        double *nl = realloc(lat, sizeof(double) * (size_t)ncap);
        if (!nl) { st = cinfer_status_oom(NULL); break; }
        lat = nl;
        cap = ncap;
      }
      double a = (clock_now_ns() * 1e-6);
      for (int l = 0; l < loops && !st; l++) st = onnx_session_run(s, feed, nin, outs);
      lat[n++] = (clock_now_ns() * 1e-6) - a;
    }
    double total = (clock_now_ns() * 1e-6) - tot0, cpu = (clock_cpu_ns() * 1e-6) - cpu0;
    if (!st) {
      qsort(lat, (size_t)n, sizeof(double), cmp_double);
      double mean = 0;
      for (int r = 0; r < n; r++) mean += lat[r];
      mean /= n;
      int b = o->batch > 1 ? o->batch : 1;
      printf("latency over %d runs (batch %d, %d threads): first %.3f ms  min %.3f  p50 %.3f  p90 %.3f  "
             "mean %.3f ms  throughput %.1f inferences/s  cpu %.3f ms per batch\n",
             n, b, o->threads, first, lat[0], lat[n / 2], lat[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1], mean,
             (double)n * b / (total / 1e3), cpu / n);
    }
    free(lat);
    if (st) goto error;
  }
  if (o->profile) onnx_session_profile_print(s, stdout);
  if (o->out_dir) {
    mkdir(o->out_dir, 0777);
    for (int i = 0; i < nout; i++) {
      snprintf(path, sizeof path, "%s/output_%d.pb", o->out_dir, i);
      if ((st = onnx_tensor_write_pb(path, &outs[i]))) goto error;
    }
  }
  if (dir) {
    for (int k = 0; k < nout; k++) {
      snprintf(path, sizeof path, "%s/output_%d.pb", dir, k);
      if (!file_exists(path)) break;
      if ((st = load_tensor(path, &want[n_want]))) goto error;
      n_want++;
    }
    if (n_want && n_want != nout) {
      printf("  FAIL: %d reference outputs, model has %d\n", n_want, nout);
      rc = 1;
    }
    int rows = o->batch > 1 && loops == 1 ? o->batch : 1;
    for (int k = 0; k < n_want && k < nout; k++)
      for (int r = 0; r < rows; r++) {
        /* a batch of copies: every row must match the batch-1 reference */
        cinfer_tensor row = outs[k];
        if (rows > 1) {
          if (row.ndim < 1 || row.shape[0] != rows) {
            printf("  output %s: dim 0 is not the batch\n", row.name);
            rc = 1;
            break;
          }
          row.byte_size /= (size_t)rows;
          row.data = (const char *)outs[k].data + row.byte_size * (size_t)r;
          row.shape[0] = 1;
        }
        if (!compare(onnx_model_output(m, k)->name, &row, &want[k].t, o->rtol, o->atol)) rc = 1;
      }
    if (!n_want) printf("  (no reference outputs in %s)\n", dir);
  }
  goto out;
error:
  printf("  ERROR: %s\n", cinfer_status_message(st));
  cinfer_status_free(st);
  rc = 1;
out:
  for (int i = 0; batched && i < nin; i++) free(batched[i]);
  if (ins) free_tensors(ins, n_loaded);
  if (want) free_tensors(want, n_want);
  free(ins);
  free(want);
  free(feed);
  free(outs);
  free(batched);
  return rc;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs the model over the data dir's test sets (or the --input files). */
static int run_model(const run_opts *o) {
  onnx_model *m;
  cinfer_status *st = onnx_model_load_file(o->model, &m);
  if (st) {
    fprintf(stderr, "cinfer run: %s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    return 2;
  }
  onnx_session *s;
  onnx_options opt = {.threads = o->threads, .no_fast = o->reference, .profile = o->profile};
  if ((st = onnx_session_create(m, &opt, &s))) {
    fprintf(stderr, "cinfer run: %s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    onnx_model_destroy(m);
    return 2;
  }
  int rc = 0;
  char probe[4096];
  snprintf(probe, sizeof probe, "%s/input_0.pb", o->data_dir ? o->data_dir : ".");
  if (o->data_dir && !file_exists(probe)) {
    /* every test_data_set_* folder, in name order (as many as there are) */
    DIR *d = opendir(o->data_dir);
    char **names = NULL;
    size_t nn = 0, cap = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && rc == 0)
      if (!strncmp(e->d_name, "test_data_set_", 14)) {
        if (nn == cap) {
          char **nb = realloc(names, (cap = cap ? cap * 2 : 16) * sizeof *nb);
          if (!nb) { rc = 2; break; }
          names = nb;
        }
        if (!(names[nn] = strdup(e->d_name))) { rc = 2; break; }
        nn++;
      }
    if (d) closedir(d);
    if (rc) {
      fprintf(stderr, "cinfer run: out of memory listing %s\n", o->data_dir);
    } else {
      if (nn) qsort(names, nn, sizeof *names, cmp_str);
      if (!nn) {
        fprintf(stderr, "cinfer run: %s has neither input_0.pb nor test_data_set_* folders\n", o->data_dir);
        rc = 2;
      }
      for (size_t i = 0; i < nn; i++) {
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", o->data_dir, names[i]);
        printf("%s:\n", sub);
        if (run_set(o, m, s, sub)) rc = 1;
      }
    }
    for (size_t i = 0; i < nn; i++) free(names[i]);
    free(names);
  } else {
    if (o->data_dir) printf("%s:\n", o->data_dir);
    rc = run_set(o, m, s, o->data_dir);
  }
  printf("%s\n", rc == 0 ? "PASS" : "FAIL");
  onnx_session_destroy(s);
  onnx_model_destroy(m);
  return rc;
}

int cmd_run(int argc, char **argv) {
  run_opts o = {.rtol = 1e-4, .atol = 1e-5, .threads = 1};
  int rc = -1;
  for (int i = 1; i < argc && rc < 0; i++) {
    const char *a = argv[i];
    bool has = i + 1 < argc;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); rc = 0; }
    else if (!strcmp(a, "--model") && has) o.model = argv[++i];
    else if (!strcmp(a, "--test-data-dir") && has) o.data_dir = argv[++i];
    else if (!strcmp(a, "--output-dir") && has) o.out_dir = argv[++i];
    else if (!strcmp(a, "--rtol") && has) o.rtol = atof(argv[++i]);
    else if (!strcmp(a, "--atol") && has) o.atol = atof(argv[++i]);
    else if (!strcmp(a, "--threads") && has) o.threads = atoi(argv[++i]);
    else if (!strcmp(a, "--repeat") && has) o.repeat = atoi(argv[++i]);
    else if (!strcmp(a, "--min-time") && has) {
      char *end;
      o.min_time = strtod(argv[++i], &end);
      if (end == argv[i] || *end || !(o.min_time >= 0 && o.min_time <= 3600)) {
        fprintf(stderr, "cinfer run: --min-time '%s' is not a number of seconds in 0-3600\n", argv[i]);
        rc = 2;
      }
    }
    else if (!strcmp(a, "--batch") && has) o.batch = atoi(argv[++i]);
    else if (!strcmp(a, "--input") && has) {
      if (!strchr(argv[i + 1], '=')) { usage(stderr); rc = 2; break; }
      if (!o.in_spec && !(o.in_spec = calloc((size_t)argc, sizeof *o.in_spec))) {
        fprintf(stderr, "cinfer run: out of memory\n");
        rc = 2;
        break;
      }
      o.in_spec[o.n_in_spec++] = argv[++i]; /* fewer than argc of them */
    } else if (!strcmp(a, "--profile")) o.profile = true;
    else if (!strcmp(a, "--reference")) o.reference = true;
    else {
      fprintf(stderr, "cinfer run: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      rc = 2;
    }
  }
  if (rc < 0 && o.min_time > 0 && o.repeat == 0) {
    fprintf(stderr, "cinfer run: --min-time needs --repeat N (N >= 1)\n");
    rc = 2;
  }
  if (rc < 0 && (!o.model || (!o.data_dir && !o.n_in_spec) || o.threads < 1 || o.threads > 1024 ||
                 o.repeat < 0 || o.batch < 0 || o.batch > 4096 || !(o.rtol >= 0) || !(o.atol >= 0))) {
    usage(stderr);
    rc = 2;
  }
  if (rc < 0) rc = run_model(&o);
  free(o.in_spec);
  return rc;
}
