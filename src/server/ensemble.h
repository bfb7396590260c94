/* ensemble.h: ensembles (platform "ensemble", ensemble_scheduling) in the server core.
 * Private to src/server; docs/design/ensemble.md tells the whole story.
 *
 * An ensemble is a cinfer_model like any other (acquired, ref-counted, listed, counted in
 * the statistics and metrics), whose `backend` is the core's own ensemble_iface: it has
 * no instances and no worker threads. model_create builds its plan with ensemble_load
 * (which loads the step models it needs first, then checks every step against the loaded
 * step model's configuration); model_enqueue hands its requests to ensemble_submit, which
 * runs the DAG by submitting one child cinfer_request per step to the step model through
 * cinfer_server_infer_async, the normal request path. */
#ifndef CINFER_SERVER_ENSEMBLE_H
#define CINFER_SERVER_ENSEMBLE_H

#include "server/internal.h"

/* True when c is an ensemble (platform "ensemble"). */
bool ensemble_config_is(const cinfer_model_config *c);
/* The ensemble pseudo-backend: never registered (no config can name it as a backend);
 * model_unload frees the plan, cancel cancels a request's in-flight steps. (An ensemble
 * whose last step is decoupled gets its decoupled twin, set by ensemble_load.) */
const cinfer_backend_iface *ensemble_iface(void);
/* What lifecycle.c passes to model_create for an ensemble: ensemble_iface, ensemble_load
 * and ensemble_submit. */
const model_kind *ensemble_kind(void);
bool model_is_ensemble(const cinfer_model *m);

/* Builds and checks m's plan (m->config is an ensemble config). Called by model_create
 * with the server's load lock held: step models that are not READY are loaded first
 * (server_ensure_loaded, through s->ensure_loaded), as Triton loads an ensemble's dependencies. On success *plan is
 * the ensemble's backend_model. The error names the ensemble, the step and the field. */
cinfer_status *ensemble_load(cinfer_server *s, cinfer_model *m, void **plan);
/* Starts r (complete and validated against the ensemble's inputs by model_enqueue). On
 * success the FINAL response comes later through r's callback; on error nothing started. */
cinfer_status *ensemble_submit(cinfer_model *m, cinfer_request *r);
/* True when the ensemble m has a step running model `name`. */
bool ensemble_depends_on(const cinfer_model *m, const char *name);

#endif
