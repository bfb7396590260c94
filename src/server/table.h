/* table.h: the model table (table.c): model name -> versions, each with a state and a
 * reason. The state diagram and its invariants are at the top of table.c. Used by
 * table.c, stats.c, lifecycle.c and server.c, under the locks of server_int.h. */
#ifndef CINFER_SERVER_TABLE_H
#define CINFER_SERVER_TABLE_H

#include "server/server_int.h"

typedef enum vstate { V_UNAVAILABLE, V_LOADING, V_READY, V_UNLOADING, V_COUNT_ } vstate;

typedef struct version_entry {
  int64_t version;
  vstate state;
  char *reason;
  cinfer_model *model;         /* the table's reference while READY */
  /* What the READY model was loaded from, for a reload of the model (lifecycle.c): the
   * fingerprint of its version folder and the JSON of its configuration before the
   * backend completed it (NULL when unknown: it is then reloaded). */
  uint64_t files_fp;
  char *cfg_json;
  struct version_entry *next;
} version_entry;

typedef struct model_entry {
  char *name;
  char *reason;                /* model-level failure (config), or NULL */
  version_entry *versions;
  uint64_t fingerprint;        /* of the files, for polling */
  /* Triton's model info: set by a load that succeeded, with the files' fingerprint then
   * (loaded_fp); cleared by an unload, and by a load from `file:` contents (the next load
   * goes back to the repository). A load without `config` or files of an unchanged model
   * with loaded_ok is a no-op (lifecycle.c, load_is_noop). A failed load leaves both. */
  bool loaded_ok;
  uint64_t loaded_fp;
  uint64_t other_fp;           /* the files of the folder that are not a version or the config */
  bool wanted;                 /* loaded by request/policy (vs merely present) */
  char *override_dir;          /* loaded from a load request's "file:" contents, or NULL */
  struct model_entry *next;
} model_entry;

/* All with s->mu held. */
model_entry *table_find(cinfer_server *s, const char *name);
/* table_find, else a new entry (UNAVAILABLE, no versions) in name order; NULL: no memory. */
model_entry *table_get(cinfer_server *s, const char *name);
version_entry *table_find_version(model_entry *e, int64_t v);
void table_set_reason(char **slot, const char *msg); /* copies msg (NULL clears) */
void table_check_version(const version_entry *ve);
/* Moves ve to `to`; the caller has set ve->model to match. A move that is not in the
 * diagram is logged and asserts. */
void table_set_state(version_entry *ve, vstate to);

/* Takes s->mu: whether `name` has a READY version. */
bool table_entry_ready(cinfer_server *s, const char *name);

#endif
