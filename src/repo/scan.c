/* scan.c: see scan.h. */
#include "repo/scan.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/hash.h"

bool repo_is_version_name(const char *n) {
  if (!*n || strlen(n) > 18) return false;
  for (const char *p = n; *p; p++)
    if (*p < '0' || *p > '9') return false;
  return true;
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static bool is_dir(const char *dir, const char *name) {
  char p[4096];
  struct stat st;
  return (size_t)snprintf(p, sizeof p, "%s/%s", dir, name) < sizeof p && stat(p, &st) == 0 &&
         S_ISDIR(st.st_mode);
}

cinfer_status *repo_list_versions(const char *dir, int64_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) return NULL;
  size_t cap = 0;
  cinfer_status *st = NULL;
  for (struct dirent *e; (e = readdir(d));) {
    if (!repo_is_version_name(e->d_name) || !is_dir(dir, e->d_name)) continue;
    if (*n == cap) {
      size_t nc = cap ? cap * 2 : 8;
      int64_t *nv = realloc(*out, nc * sizeof *nv);
      if (!nv) {
        st = cinfer_status_oom(dir);
        break;
      }
      *out = nv;
      cap = nc;
    }
    (*out)[(*n)++] = strtoll(e->d_name, NULL, 10);
  }
  closedir(d);
  if (st) {
    free(*out);
    *out = NULL;
    *n = 0;
    return st;
  }
  if (*n) qsort(*out, *n, sizeof **out, cmp_desc);
  return NULL;
}

cinfer_status *repo_list_models(const char *repo, char ***names, size_t *n) {
  *names = NULL;
  *n = 0;
  struct dirent **list = NULL;
  int k = scandir(repo, &list, NULL, alphasort);
  if (k < 0) return cinfer_status_new(CINFER_INVALID_ARG, "model repository %s: %s", repo, strerror(errno));
  cinfer_status *st = NULL;
  if (!(*names = calloc(k ? (size_t)k : 1, sizeof **names))) st = cinfer_status_oom(repo);
  for (int i = 0; i < k; i++) {
    const char *nm = list[i]->d_name;
    if (!st && nm[0] != '.' && is_dir(repo, nm) && !((*names)[(*n)++] = strdup(nm))) st = cinfer_status_oom(repo);
    free(list[i]);
  }
  free(list);
  if (st) {
    repo_names_free(*names, *n);
    *names = NULL;
    *n = 0;
  }
  return st;
}

void repo_names_free(char **names, size_t n) {
  for (size_t i = 0; names && i < n; i++) free(names[i]);
  free(names);
}

static uint64_t fingerprint(const char *dir, int depth, bool model_files) {
  uint64_t h = HASH_FNV_SEED;
  struct dirent **list = NULL;
  int n = scandir(dir, &list, NULL, alphasort);
  for (int i = 0; i < n; i++) {
    const char *nm = list[i]->d_name;
    char p[4096];
    struct stat st;
    bool skip = model_files && (!strcmp(nm, "config.pbtxt") || repo_is_version_name(nm));
    if (nm[0] != '.' && !skip && (size_t)snprintf(p, sizeof p, "%s/%s", dir, nm) < sizeof p &&
        stat(p, &st) == 0) {
      h = hash_fnv1a(h, nm, strlen(nm));
      h = hash_fnv1a(h, &st.st_size, sizeof st.st_size);
      h = hash_fnv1a(h, &st.st_mtim, sizeof st.st_mtim);
      if (S_ISDIR(st.st_mode) && depth > 0) {
        uint64_t sub = fingerprint(p, depth - 1, false);
        h = hash_fnv1a(h, &sub, sizeof sub);
      }
    }
    free(list[i]);
  }
  free(list);
  return h;
}

uint64_t repo_dir_fingerprint(const char *dir, int depth) { return fingerprint(dir, depth, false); }

uint64_t repo_model_files_fingerprint(const char *dir, int depth) { return fingerprint(dir, depth, true); }
