/* scan.h: reading a Triton model repository from disk: which folders are models, which of
 * their subfolders are versions, and a fingerprint that changes when a model's files do
 * (what poll mode compares). The config itself is config.h's business.
 *
 * Layout: <repo>/<model>/config.pbtxt and <repo>/<model>/<version>/..., a version being a
 * folder whose name is all digits (at most 18, so it fits int64). Names starting with '.'
 * are ignored. No count is clamped: every folder found is returned. */
#ifndef CINFER_REPO_SCAN_H
#define CINFER_REPO_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/types.h"

bool repo_is_version_name(const char *name);
/* The version folders of model folder dir, highest first. *out is malloc'd (NULL when
 * none) and owned by the caller. A folder that cannot be read has no versions. */
cinfer_status *repo_list_versions(const char *dir, int64_t **out, size_t *n);
/* The model folders of repo in name order. *names (and each name) are malloc'd; free with
 * repo_names_free. INVALID_ARG naming repo when it cannot be read. */
cinfer_status *repo_list_models(const char *repo, char ***names, size_t *n);
void repo_names_free(char **names, size_t n);
/* How deep repo_dir_fingerprint looks below a model's folder (Triton looks at every file;
 * the bound keeps a symlink loop from recursing forever). */
#define REPO_FINGERPRINT_DEPTH 8
/* A hash of the names, sizes and modification times below dir, `depth` folders deep. */
uint64_t repo_dir_fingerprint(const char *dir, int depth);
/* The same, of model folder dir's entries that are neither a version folder nor
 * config.pbtxt (labels, shared files): with a version's own folder, what decides whether a
 * version must reload (Triton's IsModelVersionModified). */
uint64_t repo_model_files_fingerprint(const char *dir, int depth);

#endif
