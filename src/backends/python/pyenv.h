/* pyenv.h: the parameter EXECUTION_ENV_PATH of Python models (Triton's execution
 * environments): an unpacked environment folder, or a conda-pack style archive (.tar.gz,
 * .tgz, .tar) unpacked once into a cache folder; its bin/python3 runs the stub. */
#ifndef CINFER_PYTHON_PYENV_H
#define CINFER_PYTHON_PYENV_H
#include "cinfer/types.h"

/* param: the parameter's value ($$TRITON_MODEL_DIRECTORY is replaced by model_dir; a
 * relative path is relative to model_dir). *root (malloc'd) is the environment's folder,
 * which has an executable bin/python3. Errors name the parameter and the path. The cache
 * folder is $CINFER_PYTHON_ENV_CACHE, else $TMPDIR (or /tmp)/cinfer-python-envs-<uid>; an
 * archive is unpacked again when its size or modification time changes. */
cinfer_status *py_env_prepare(const char *param, const char *model_dir, const char *model, char **root);

/* The stub's environment in an environment: the server's, with <root>/bin first in PATH,
 * <root>/lib first in LD_LIBRARY_PATH, PYTHONNOUSERSITE=1 and no PYTHONHOME/PYTHONPATH.
 * NULL-terminated, malloc'd (py_env_vars_free); NULL when out of memory. */
char **py_env_vars(const char *root);
void py_env_vars_free(char **v);
#endif
