/* pyproc.h: the Python backend's plumbing: the stub process, its SOCK_SEQPACKET socket
 * (one JSON header per message, at most one memfd passed with it) and the memfd shared
 * memory that carries tensor bytes (docs/design/python-backend.md). */
#ifndef CINFER_PYTHON_PYPROC_H
#define CINFER_PYTHON_PYPROC_H
#include <stdatomic.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "cinfer/types.h"
#include "core/buf.h"

#define PY_MAX_MSG (1u << 17) /* one header; tensor bytes travel in shared memory */

/* One stub process's socket, shared by its reader thread, the instance's worker and the
 * callbacks of BLS requests (which may outlive the process: sends then fail with EPIPE).
 * The socket is closed when the last reference goes. */
typedef struct py_conn {
  _Atomic int refs;
  int sock;
  pthread_mutex_t send_mu;
} py_conn;

py_conn *py_conn_ref(py_conn *c);
void py_conn_release(py_conn *c);
/* Sends one message (and fd >= 0 with it; the caller keeps its fd). false when the peer
 * is gone or the socket failed (errno). */
bool py_conn_send(py_conn *c, const char *json, size_t n, int fd);
/* Receives one message into buf (cap bytes; NUL-terminated). Returns its length, 0 at
 * EOF, -1 on an error or a truncated message; *fd is the memfd that came with it, or -1. */
ssize_t py_conn_recv(py_conn *c, char *buf, size_t cap, int *fd);

/* Starts `python -u -c <stub> <utils source> 3 4` with the stub's ends of two new
 * socketpairs as fds 3 (the stub's main thread: init, execute, finalize) and 4 (its other
 * threads) and no other inherited descriptor. envp NULL: the server's environment and
 * python looked up in PATH; else python is a path and envp the whole environment. */
cinfer_status *py_spawn(const char *python, char *const *envp, pid_t *pid, py_conn **main_conn,
                        py_conn **other_conn);
/* "exited with status 3", "was killed by signal 11 (Segmentation fault)". */
void py_describe_status(int status, char *out, size_t cap);

/* Shared memory: a new memfd of `size` bytes mapped read-write (*fd, *base); unmap with
 * munmap(base, size) and close(fd). */
cinfer_status *py_shm_create(size_t size, int *fd, void **base);
/* Maps a received memfd (whole file). *base is NULL for an empty file. */
cinfer_status *py_shm_map(int fd, void **base, size_t *size);

/* Tensor layout in a message: tensor i lies at offset[i] (64-aligned), byte_size bytes. */
size_t py_layout(const cinfer_tensor *t, uint32_t n, size_t *offsets);
/* Appends "tensors":[...] descriptors (name, datatype, shape, offset, size; plus "rid"
 * when rids is not NULL). */
void py_json_tensors(cbuf *b, const cinfer_tensor *t, uint32_t n, const size_t *offsets,
                     const uint64_t *rids);

struct json_value;
/* Decodes descriptors arr into out[0..*n) pointing into base[0..size): every offset/size
 * inside the mapping, a known datatype, a shape that matches the bytes. Names borrowed
 * from the JSON document. *n = 0 on error. */
cinfer_status *py_tensors_decode(const struct json_value *arr, const void *base, size_t size,
                                 cinfer_tensor **out, uint32_t *n);
#endif
