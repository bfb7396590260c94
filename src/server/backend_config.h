/* backend_config.h: the core side of the backend's view of a model configuration
 * (backend_config.c): the opaque handles of include/cinfer/backend.h for a config. */
#ifndef CINFER_SERVER_BACKEND_CONFIG_H
#define CINFER_SERVER_BACKEND_CONFIG_H

#include "cinfer/backend.h"

struct cinfer_model_config;

/* Both borrow c: valid as long as c. */
const cinfer_config *backend_config_of(const struct cinfer_model_config *c);
cinfer_autocomplete *backend_autocomplete_of(struct cinfer_model_config *c);

#endif
