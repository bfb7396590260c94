/* backends.c: the backends built into this binary, registered once at server creation.
 * Adding a backend: declare its iface here and list it in the table.
 *
 * May call: registry.c. */
#include <pthread.h>

#include "cinfer/backend.h"
#include "core/log.h"

extern const cinfer_backend_iface cinfer_identity_backend;
extern const cinfer_backend_iface cinfer_sim_backend;
extern const cinfer_backend_iface cinfer_llm_backend;
extern const cinfer_backend_iface onnx_backend_iface;
/* src/backends/vision: the pre- and post-processing stages of the vision pipelines. */
extern const cinfer_backend_iface cinfer_image_decode_backend;
extern const cinfer_backend_iface cinfer_image_preprocess_backend;
extern const cinfer_backend_iface cinfer_detection_postprocess_backend;
extern const cinfer_backend_iface cinfer_face_crop_backend;
extern const cinfer_backend_iface cinfer_attribute_decode_backend;
extern const cinfer_backend_iface cinfer_python_backend;

static const cinfer_backend_iface *const builtin[] = {
    &cinfer_identity_backend,
    &cinfer_sim_backend,
    &cinfer_llm_backend,
    &onnx_backend_iface,
    &cinfer_image_decode_backend,
    &cinfer_image_preprocess_backend,
    &cinfer_detection_postprocess_backend,
    &cinfer_face_crop_backend,
    &cinfer_attribute_decode_backend,
    &cinfer_python_backend,
};

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void register_all(void) {
  for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
    cinfer_status *st = cinfer_backend_register(builtin[i]);
    if (st) LOG_E("backend '%s': %s", builtin[i]->name, cinfer_status_message(st));
    cinfer_status_free(st);
  }
}

void cinfer_register_builtin_backends(void) { pthread_once(&once, register_all); }
