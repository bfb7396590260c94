/* onnx_conformance.c: runs the ONNX backend test data (Debian libonnx-testdata layout:
 * <root>/<suite>/<test>/model.onnx + test_data_set_N/{input,output}_K.pb) through the
 * engine and classifies every test:
 *   pass         every output of every data set within g_rtol/g_atol
 *   fail         ran (or failed for a reason other than UNSUPPORTED) with a mismatch
 *   unsupported  the engine reports CINFER_UNSUPPORTED (operator, opset, dtype, attribute)
 *                or the test data is not plain tensors (sequences, optionals, strings)
 * Unsupported is never counted as a pass. Writes a Markdown report (per suite and per
 * operator) and exits 1 when a test fails that is not listed in the expected-failures
 * file (one test name per line, '#' comments), 0 otherwise.
 *
 * usage: onnx_conformance ROOT REPORT.md [EXPECTED_FAILURES] [--g_rtol R] [--g_atol A] [-v] */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/onnx/onnx.h"
#include "backends/onnx/onnx_impl.h"

typedef struct op_stat { char name[64]; int pass, fail, unsup; } op_stat;
static op_stat ops[512];
static int n_ops;
static double g_rtol = 1e-3, g_atol = 1e-5;
static int verbose;

static op_stat *op_get(const char *n) {
  for (int i = 0; i < n_ops; i++) if (!strcmp(ops[i].name, n)) return &ops[i];
  if (n_ops == 512) return &ops[511];
  snprintf(ops[n_ops].name, sizeof ops[n_ops].name, "%s", n);
  return &ops[n_ops++];
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int list_dir(const char *path, const char *prefix, char **out, int max) {
  DIR *d = opendir(path);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < max)
    if (e->d_name[0] != '.' && (!prefix || !strncmp(e->d_name, prefix, strlen(prefix))))
      out[n++] = strdup(e->d_name);
  closedir(d);
  qsort(out, (size_t)n, sizeof *out, cmp_str);
  return n;
}

static double get_d(const cinfer_tensor *t, size_t i) {
  ot o = {.dtype = t->dtype, .ndim = 1, .dims = {(int64_t)i + 1}, .data = (void *)t->data};
  return ot_get_f(&o, (int64_t)i);
}

/* returns 0 pass, 1 fail, 2 unsupported */
static int run_test(const char *dir, char *why, size_t wn, onnx_model **mout) {
  char path[8800];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  onnx_model *m;
  cinfer_status *st = onnx_model_load_file(path, &m);
  *mout = NULL;
  if (st) {
    int r = cinfer_status_code(st) == CINFER_UNSUPPORTED ? 2 : 1;
    snprintf(why, wn, "%s", cinfer_status_message(st));
    cinfer_status_free(st);
    return r;
  }
  *mout = m;
  onnx_session *s;
  if ((st = onnx_session_create(m, &(onnx_options){.threads = 1}, &s))) {
    snprintf(why, wn, "%s", cinfer_status_message(st));
    cinfer_status_free(st);
    return 1;
  }
  char *sets[64];
  int ns = list_dir(dir, "test_data_set_", sets, 64), rc = 0;
  int nin = onnx_model_input_count(m), nout = onnx_model_output_count(m);
  for (int k = 0; k < ns && rc == 0; k++) {
    cinfer_tensor in[32], want[32], got[32];
    void *own_in[32] = {0}, *own_out[32] = {0};
    char *nm_in[32] = {0}, *nm_out[32] = {0};
    int li = 0, lo = 0;
    for (; li < 32; li++) {
      snprintf(path, sizeof path, "%s/%s/input_%d.pb", dir, sets[k], li);
      struct stat sb;
      if (stat(path, &sb)) break;
      if ((st = onnx_tensor_read_pb(path, &in[li], &own_in[li], &nm_in[li]))) break;
    }
    for (; !st && lo < 32; lo++) {
      snprintf(path, sizeof path, "%s/%s/output_%d.pb", dir, sets[k], lo);
      struct stat sb;
      if (stat(path, &sb)) break;
      if ((st = onnx_tensor_read_pb(path, &want[lo], &own_out[lo], &nm_out[lo]))) break;
    }
    if (st) {
      snprintf(why, wn, "test data: %s", cinfer_status_message(st));
      cinfer_status_free(st);
      st = NULL;
      rc = 2; /* non-tensor test data (sequence/optional/string) */
    } else if (li != nin || lo != nout || nout > 32) {
      snprintf(why, wn, "test data has %d inputs/%d outputs, model %d/%d", li, lo, nin, nout);
      rc = li < nin ? 2 : 1;
    } else {
      for (int i = 0; i < li; i++) {
        const onnx_io_info *inf = onnx_model_input(m, i);
        in[i].name = nm_in[i] && !strcmp(nm_in[i], inf->name) ? nm_in[i] : NULL;
      }
      /* the ONNX test data keeps BFLOAT16 tensors as UINT16 (numpy has no bfloat16): the
       * same bits */
      for (int i = 0; i < li; i++)
        if (in[i].dtype == CINFER_TYPE_UINT16 && onnx_model_input(m, i)->dtype == CINFER_TYPE_BF16)
          in[i].dtype = CINFER_TYPE_BF16;
      bool named = true;
      for (int i = 0; i < li; i++) named &= in[i].name != NULL;
      for (int i = 0; !named && i < li; i++) in[i].name = NULL;
      if ((st = onnx_session_run(s, in, li, got))) {
        rc = cinfer_status_code(st) == CINFER_UNSUPPORTED ? 2 : 1;
        snprintf(why, wn, "%s", cinfer_status_message(st));
        cinfer_status_free(st);
        st = NULL;
      } else {
        for (int o = 0; o < lo && !rc; o++) {
          if (want[o].dtype == CINFER_TYPE_UINT16 && got[o].dtype == CINFER_TYPE_BF16) want[o].dtype = CINFER_TYPE_BF16;
          if (got[o].dtype != want[o].dtype || got[o].ndim != want[o].ndim ||
              memcmp(got[o].shape, want[o].shape, sizeof(int64_t) * (size_t)got[o].ndim)) {
            snprintf(why, wn, "output %d: type/shape differs (%s rank %d vs %s rank %d)", o,
                     cinfer_dtype_name(got[o].dtype), got[o].ndim, cinfer_dtype_name(want[o].dtype), want[o].ndim);
            rc = 1;
            break;
          }
          if (got[o].dtype == CINFER_TYPE_BYTES) { /* strings: byte for byte */
            if (got[o].byte_size != want[o].byte_size || memcmp(got[o].data, want[o].data, got[o].byte_size)) {
              snprintf(why, wn, "output %d: strings differ", o);
              rc = 1;
            }
            continue;
          }
          size_t es = cinfer_dtype_size(got[o].dtype), n = es ? got[o].byte_size / es : 0;
          for (size_t i = 0; i < n; i++) {
            double g = get_d(&got[o], i), w = get_d(&want[o], i);
            if ((isnan(g) && isnan(w)) || g == w) continue;
            if (!(fabs(g - w) <= g_atol + g_rtol * fabs(w))) {
              snprintf(why, wn, "output %d element %zu: got %.9g want %.9g", o, i, g, w);
              rc = 1;
              break;
            }
          }
        }
      }
    }
    for (int i = 0; i < 32; i++) { free(own_in[i]); free(own_out[i]); free(nm_in[i]); free(nm_out[i]); }
  }
  for (int k = 0; k < ns; k++) free(sets[k]);
  onnx_session_destroy(s);
  return rc;
}

int main(int argc, char **argv) {
  const char *root = NULL, *report = NULL, *expect = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rtol") && i + 1 < argc) g_rtol = atof(argv[++i]);
    else if (!strcmp(argv[i], "--atol") && i + 1 < argc) g_atol = atof(argv[++i]);
    else if (!strcmp(argv[i], "-v")) verbose = 1;
    else if (!root) root = argv[i];
    else if (!report) report = argv[i];
    else expect = argv[i];
  }
  if (!root || !report) {
    fprintf(stderr, "usage: onnx_conformance ROOT REPORT.md [EXPECTED_FAILURES] [--g_rtol R] [--g_atol A] [-v]\n");
    return 2;
  }
  static char expected[4096][512];
  int n_exp = 0;
  FILE *ef = expect ? fopen(expect, "r") : NULL;
  char line[512];
  while (ef && fgets(line, sizeof line, ef) && n_exp < 4096) {
    line[strcspn(line, " \t\r\n#")] = 0;
    if (*line) snprintf(expected[n_exp++], sizeof expected[0], "%s", line);
  }
  if (ef) fclose(ef);
  static const char *suites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};
  FILE *out = fopen(report, "w");
  if (!out) { perror(report); return 2; }
  int tot[3] = {0}, unexpected = 0;
  char *fails_buf = NULL;
  size_t fails_len = 0;
  FILE *fails = open_memstream(&fails_buf, &fails_len);
  fprintf(out, "# ONNX conformance (libonnx-testdata)\n\n");
  fprintf(out, "Generated by `tests/conformance/onnx_conformance` (ctest `onnx_conformance`) over\n"
               "`%s`, tolerance |got-want| <= %g + %g*|want|. *unsupported* means the engine\n"
               "refused the model or its test data with CINFER_UNSUPPORTED (operator, opset, data\n"
               "type or attribute it does not implement, or non-tensor test data); it is never\n"
               "counted as a pass.\n\n", root, g_atol, g_rtol);
  fprintf(out, "| suite | tests | pass | fail | unsupported |\n|---|---|---|---|---|\n");
  for (size_t su = 0; su < sizeof suites / sizeof suites[0]; su++) {
    char sdir[4096];
    snprintf(sdir, sizeof sdir, "%s/%s", root, suites[su]);
    static char *tests[4096];
    int nt = list_dir(sdir, NULL, tests, 4096), cnt[3] = {0};
    for (int t = 0; t < nt; t++) {
      char dir[4400], why[512] = "";
      snprintf(dir, sizeof dir, "%s/%s", sdir, tests[t]);
      onnx_model *m = NULL;
      int r = run_test(dir, why, sizeof why, &m);
      cnt[r]++;
      if (m) {
        for (int h = 0; h < m->n_hist; h++) {
          op_stat *os = op_get(m->hist_name[h]);
          if (r == 0) os->pass++; else if (r == 1) os->fail++; else os->unsup++;
        }
        onnx_model_destroy(m);
      } else {
        /* model did not load: attribute to the operator named in the message */
        const char *u = strstr(why, "unsupported operator ");
        if (u) {
          char opn[64];
          if (sscanf(u + 21, "%63[^ ]", opn) == 1) {
            op_stat *os = op_get(opn);
            if (r == 1) os->fail++; else os->unsup++;
          }
        }
      }
      if (r == 1) {
        bool exp_ = false;
        for (int e = 0; e < n_exp; e++) exp_ |= !strcmp(expected[e], tests[t]);
        if (!exp_) unexpected++;
        fprintf(fails, "| %s/%s | %s%s |\n", suites[su], tests[t], exp_ ? "(expected) " : "", why);
        if (verbose || !exp_) fprintf(stderr, "FAIL %s/%s: %s\n", suites[su], tests[t], why);
      } else if (verbose && r == 2) {
        fprintf(stderr, "UNSUPPORTED %s/%s: %s\n", suites[su], tests[t], why);
      }
      free(tests[t]);
    }
    fprintf(out, "| %s | %d | %d | %d | %d |\n", suites[su], nt, cnt[0], cnt[1], cnt[2]);
    for (int i = 0; i < 3; i++) tot[i] += cnt[i];
  }
  fprintf(out, "| **total** | %d | %d | %d | %d |\n\n", tot[0] + tot[1] + tot[2], tot[0], tot[1], tot[2]);
  fclose(fails);
  fprintf(out, "## Per operator\n\nA test counts once for every operator type its model contains.\n\n"
               "| operator | pass | fail | unsupported |\n|---|---|---|---|\n");
  for (int i = 0; i < n_ops; i++)
    for (int j = i + 1; j < n_ops; j++)
      if (strcmp(ops[j].name, ops[i].name) < 0) { op_stat t = ops[i]; ops[i] = ops[j]; ops[j] = t; }
  for (int i = 0; i < n_ops; i++)
    fprintf(out, "| %s | %d | %d | %d |\n", ops[i].name, ops[i].pass, ops[i].fail, ops[i].unsup);
  fprintf(out, "\n## Failures\n\n| test | reason |\n|---|---|\n%s", fails_buf ? fails_buf : "");
  free(fails_buf);
  fclose(out);
  printf("conformance: %d pass, %d fail (%d unexpected), %d unsupported; report in %s\n", tot[0],
         tot[1], unexpected, tot[2], report);
  return unexpected ? 1 : 0;
}
