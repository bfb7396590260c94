/* lifecycle.h: loading and unloading models (lifecycle.c), for server.c. */
#ifndef CINFER_SERVER_LIFECYCLE_H
#define CINFER_SERVER_LIFECYCLE_H

#include "server/table.h"

/* The server's own loads (startup, polling), whatever the control mode. */
cinfer_status *lifecycle_load(cinfer_server *s, const char *name, const char *config_json);
/* With s->mu held (dropped and retaken): every version of e leaves the table. */
void unload_entry_locked(cinfer_server *s, model_entry *e);
/* With the load lock held, makes sure model `name` has a READY version, loading it (as an
 * explicit load would) when it has none. ensemble.c reaches it through s->ensure_loaded. */
cinfer_status *server_ensure_loaded(cinfer_server *s, const char *name);
/* Thread bodies (arg: the server). The reaper destroys released models and exits at
 * s->reaper_stop once every live model is destroyed; the poller exits at s->poll_stop. */
void *reaper_main(void *arg);
void *poller_main(void *arg);

#endif
