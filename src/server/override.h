/* override.h: temporary model directories for loads with "file:" contents (override.c). */
#ifndef CINFER_SERVER_OVERRIDE_H
#define CINFER_SERVER_OVERRIDE_H

#include "cinfer/model_control.h"

/* Checks every path, then makes a fresh directory holding the files; *out is malloc'd. */
cinfer_status *override_dir_create(const cinfer_model_file *files, size_t n, char **out);
/* Removes dir and everything under it (symbolic links themselves, never their targets). */
void override_dir_remove(const char *dir);

#endif
