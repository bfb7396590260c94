/* test_vision_load.c: the vision backends' configurations through the real server:
 * every good configuration loads, and every bad one (unknown, misspelt, out-of-range or
 * misplaced parameter; wrong datatype or dims; batching where a stage cannot batch) fails
 * the load with a reason that names the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "server_test_util.h"

typedef struct cfg_case {
  const char *name;
  const char *text;
  const char *want; /* NULL: loads; else a substring of the failure reason */
} cfg_case;

#define DEC_IO "input [ { name: \"IMAGE\" data_type: TYPE_STRING dims: [ 1 ] } ]\n" \
               "output [ { name: \"PIXELS\" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] } ]\n"
#define PRE_IO "input [ { name: \"IMAGE\" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] } ]\n" \
               "output [ { name: \"TENSOR\" data_type: TYPE_FP32 dims: [ 3, 240, 320 ] },\n" \
               "         { name: \"TRANSFORM\" data_type: TYPE_FP32 dims: [ 6 ] } ]\n"
#define P(k, v) "parameters { key: \"" k "\" value: { string_value: \"" v "\" } }\n"
#define ULTRA_IO "input [ { name: \"scores\" data_type: TYPE_FP32 dims: [ 1, -1, 2 ] },\n" \
                 "        { name: \"boxes\" data_type: TYPE_FP32 dims: [ 1, -1, 4 ] },\n" \
                 "        { name: \"TRANSFORM\" data_type: TYPE_FP32 dims: [ 6 ] } ]\n" \
                 "output [ { name: \"BOXES\" data_type: TYPE_FP32 dims: [ -1, 4 ] },\n" \
                 "         { name: \"SCORES\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
#define CROP_IO "input [ { name: \"IMAGE\" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] },\n" \
                "        { name: \"BOXES\" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]\n" \
                "output [ { name: \"CROPS\" data_type: TYPE_FP32 dims: [ -1, 3, 64, 64 ] } ]\n"
#define CLS_IO "input [ { name: \"logits\" data_type: TYPE_FP32 dims: [ 3 ] } ]\n" \
               "output [ { name: \"label\" data_type: TYPE_STRING dims: [ 1 ] },\n" \
               "         { name: \"prob\" data_type: TYPE_FP32 dims: [ 1 ] } ]\n"

static const cfg_case cases[] = {
    {"dec_ok", "backend: \"image_decode\"\nmax_batch_size: 8\n" DEC_IO P("max_pixels", "1000000"), NULL},
    {"dec_unknown", "backend: \"image_decode\"\nmax_batch_size: 8\n" DEC_IO P("max_pixel", "10"),
     "unknown parameter 'max_pixel'"},
    {"dec_bad_value", "backend: \"image_decode\"\nmax_batch_size: 8\n" DEC_IO P("max_pixels", "lots"),
     "parameter 'max_pixels' = 'lots'"},
    {"dec_bad_out", "backend: \"image_decode\"\nmax_batch_size: 8\n"
                    "input [ { name: \"IMAGE\" data_type: TYPE_STRING dims: [ 1 ] } ]\n"
                    "output [ { name: \"PIXELS\" data_type: TYPE_FP32 dims: [ -1, -1, 3 ] } ]\n",
     "output 'PIXELS' must be TYPE_UINT8"},
    {"pre_ok", "backend: \"image_preprocess\"\nmax_batch_size: 8\n" PRE_IO P("width", "320")
     P("height", "240") P("mean", "127,127,127") P("std", "128,128,128") P("resize", "letterbox"), NULL},
    {"pre_fp16", "backend: \"image_preprocess\"\nmax_batch_size: 8\n"
                 "input [ { name: \"IMAGE\" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] } ]\n"
                 "output [ { name: \"TENSOR\" data_type: TYPE_FP16 dims: [ 240, 320, 3 ] } ]\n"
     P("width", "320") P("height", "240") P("layout", "nhwc") P("color", "bgr"), NULL},
    {"pre_no_size", "backend: \"image_preprocess\"\nmax_batch_size: 8\n" PRE_IO, "'width' and 'height'"},
    {"pre_dims", "backend: \"image_preprocess\"\nmax_batch_size: 8\n" PRE_IO P("width", "640")
     P("height", "640"), "output 'TENSOR' has dims [3, 240, 320]; this configuration needs [3, 640, 640]"},
    {"pre_mode", "backend: \"image_preprocess\"\nmax_batch_size: 8\n" PRE_IO P("width", "320")
     P("height", "240") P("resize", "crop"), "parameter 'resize' = 'crop' is not one of: stretch, letterbox"},
    {"pre_mean", "backend: \"image_preprocess\"\nmax_batch_size: 8\n" PRE_IO P("width", "320")
     P("height", "240") P("mean", "1,2"), "parameter 'mean' = '1,2' is not 3 comma-separated numbers"},
    {"pre_std0", "backend: \"image_preprocess\"\nmax_batch_size: 8\n" PRE_IO P("width", "320")
     P("height", "240") P("std", "1,0,1"), "'std' has a zero entry"},
    {"det_ok", "backend: \"detection_postprocess\"\nmax_batch_size: 0\n" ULTRA_IO P("format", "ultraface")
     P("score_threshold", "0.7"), NULL},
    {"det_batch", "backend: \"detection_postprocess\"\nmax_batch_size: 4\n" ULTRA_IO P("format", "ultraface"),
     "set max_batch_size: 0"},
    {"det_misplaced", "backend: \"detection_postprocess\"\nmax_batch_size: 0\n" ULTRA_IO
     P("format", "ultraface") P("strides", "8,16"), "parameter 'strides' is for format retinaface"},
    {"det_inputs", "backend: \"detection_postprocess\"\nmax_batch_size: 0\n" ULTRA_IO,
     "takes 10 inputs"},
    {"det_thresh", "backend: \"detection_postprocess\"\nmax_batch_size: 0\n" ULTRA_IO
     P("format", "ultraface") P("iou_threshold", "1.5"), "parameter 'iou_threshold' = '1.5'"},
    {"crop_ok", "backend: \"face_crop\"\nmax_batch_size: 0\n" CROP_IO P("width", "64") P("height", "64")
     P("margin", "0.2") P("square", "true"), NULL},
    {"crop_align_inputs", "backend: \"face_crop\"\nmax_batch_size: 0\n" CROP_IO P("width", "64")
     P("height", "64") P("mode", "align"), "mode align takes inputs image, boxes, landmarks"},
    {"crop_margin_align", "backend: \"face_crop\"\nmax_batch_size: 0\n" CROP_IO P("width", "64")
     P("height", "64") P("mode", "align") P("margin", "0.1"), "'margin' and 'square' are for mode box"},
    {"crop_square", "backend: \"face_crop\"\nmax_batch_size: 0\n" CROP_IO P("width", "64") P("height", "64")
     P("square", "yes"), "parameter 'square' = 'yes' is not true or false"},
    {"attr_ok", "backend: \"attribute_decode\"\nmax_batch_size: 64\n" CLS_IO P("task", "classify")
     P("labels", "a, b ,c"), NULL},
    {"attr_no_task", "backend: \"attribute_decode\"\nmax_batch_size: 64\n" CLS_IO, "parameter 'task' is required"},
    {"attr_labels", "backend: \"attribute_decode\"\nmax_batch_size: 64\n" CLS_IO P("task", "classify")
     P("labels", "a,b"), "needs 3 labels"},
    {"attr_other_task", "backend: \"attribute_decode\"\nmax_batch_size: 64\n" CLS_IO P("task", "classify")
     P("labels", "a,b,c") P("scale", "101"), "parameter 'scale' is not used by task classify"},
    {"attr_file", "backend: \"attribute_decode\"\nmax_batch_size: 64\n" CLS_IO P("task", "classify")
     P("labels_file", "labels.txt"), NULL},
    {"attr_file_escape", "backend: \"attribute_decode\"\nmax_batch_size: 64\n" CLS_IO P("task", "classify")
     P("labels_file", "../x"), "must name a file inside the model directory"},
    {"attr_ssr_inputs", "backend: \"attribute_decode\"\nmax_batch_size: 64\n" CLS_IO
     P("task", "ssrnet_regression"), "takes 9 inputs"},
};

static void test_configs(void **state) {
  (void)state;
  char *repo = tu_repo();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) tu_model(repo, cases[i].name, 1, cases[i].text);
  char p[4096];
  snprintf(p, sizeof p, "%s/attr_file/labels.txt", repo);
  tu_write(p, "angry\nhappy\r\nsad\n");
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_NONE, 0);
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char reason[1024] = "";
    const char *st = tu_state(s, cases[i].name, 1, reason, sizeof reason);
    bool ok = cases[i].want ? (strcmp(st, "READY") && strstr(reason, cases[i].want))
                            : !strcmp(st, "READY");
    if (!ok) {
      fprintf(stderr, "%s: state %s, reason '%s'; wanted %s\n", cases[i].name, st, reason,
              cases[i].want ? cases[i].want : "READY");
      bad++;
    }
  }
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
  assert_int_equal(bad, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_configs)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
