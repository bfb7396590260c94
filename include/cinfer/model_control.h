/* cinfer/model_control.h: the parts of Triton's model control that go beyond
 * cinfer_server_load_model / cinfer_server_unload_model (cinfer.h). Same rules: refused
 * with CINFER_UNAVAILABLE unless the control mode is EXPLICIT. */
#ifndef CINFER_MODEL_CONTROL_H
#define CINFER_MODEL_CONTROL_H

#include <stddef.h>

#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One model file of a load request (Triton's "file:<path>" parameter, decoded): path is
 * relative to the model directory, e.g. "1/model.onnx". Borrowed for the call. */
typedef struct cinfer_model_file {
  const char *path;
  const void *data;
  size_t len;
} cinfer_model_file;

/* Loads name from a new temporary model directory holding exactly `files` and configured
 * by config_json (required, as in Triton: the repository's folder is not used). The
 * directory lives as long as the model is loaded from it: a later load without files goes
 * back to the repository, and an unload removes it. A path that is empty, absolute, has an
 * empty, "." or ".." segment, or names a file twice is INVALID_ARG naming it; nothing is
 * written outside the new directory (files are created O_EXCL|O_NOFOLLOW under it). On any
 * failure the previous versions keep serving and the new directory is removed. */
cinfer_status *cinfer_server_load_model_files(cinfer_server *s, const char *name,
                                              const char *config_json,
                                              const cinfer_model_file *files, size_t n);

/* Unloads name; with unload_dependents also every loaded model that depends on it (an
 * ensemble that uses it as a step), as Triton's "unload_dependents" parameter. */
cinfer_status *cinfer_server_unload_model_dependents(cinfer_server *s, const char *name,
                                                     bool unload_dependents);

#ifdef __cplusplus
}
#endif
#endif
