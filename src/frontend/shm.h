/* shm.h: the system shared-memory region registry of Triton's shared-memory extension,
 * independent of the transport (the HTTP frontend uses it; gRPC can call the same code).
 *
 * A client creates a POSIX shared-memory object (shm_open), registers a window of it under
 * a name (key, offset, byte_size), and then names the region in inference requests: inputs
 * are read from it in place (zero copy) and outputs written into it.
 *
 * Lifetime: a registered region is one mapping with a reference count. The registry holds
 * one reference while the name is registered; every request that uses the region holds one
 * from shm_acquire until shm_region_release. Unregister of a region no request holds removes
 * it at once; of one in use, it answers success too and, as Triton (L0_shared_memory
 * TestSharedMemoryUnregister), keeps the name listed (and registered: the name cannot be
 * registered again yet), and usable by new requests, until the last request holding it
 * releases it (Triton's test_unregister_shm_during_inference_multiple_req). A request that
 * was already using the region completes with correct data.
 *
 * Errors are Triton's texts (shared_memory_manager.cc) with cinfer's codes: a region that
 * is not registered is NOT_FOUND (404), every other bad argument INVALID_ARG (400).
 *
 * Threads: every function may be called from any thread (one mutex inside). */
#ifndef CINFER_FRONTEND_SHM_H
#define CINFER_FRONTEND_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "cinfer/cinfer.h"
#include "core/buf.h"

typedef struct shm_registry shm_registry;
typedef struct shm_region shm_region;

/* At most this many regions are registered at once (one limit, checked at register). */
#define SHM_MAX_REGIONS 4096
/* Region names and keys longer than this are refused. */
#define SHM_MAX_NAME 255

cinfer_status *shm_registry_create(shm_registry **out);
/* What a client may map (cinfer serve --shared-memory-key-prefix / --shared-memory-max-bytes):
 * keys (without their leading '/') must start with key_prefix when it is not NULL or empty,
 * and a region's byte_size must be at most max_bytes when that is not 0. Set before serving;
 * INVALID_ARG for a prefix longer than SHM_MAX_NAME. */
cinfer_status *shm_registry_set_policy(shm_registry *r, const char *key_prefix, uint64_t max_bytes);
/* Unregisters everything; mappings still used by requests stay until released. NULL is a
 * no-op. No call on r may run concurrently or follow. */
void shm_registry_destroy(shm_registry *r);

/* shm_open(key) read-write, checks [offset, offset + byte_size) lies inside the object and
 * maps it. A name already registered, an empty name or key, a key made of slashes only or
 * with Triton's reserved prefix, and a window past the object's end are refused. */
cinfer_status *shm_register(shm_registry *r, const char *name, const char *key, uint64_t offset,
                            uint64_t byte_size);
/* Removes name (a name not registered is not an error, as in Triton). name NULL: all. */
cinfer_status *shm_unregister(shm_registry *r, const char *name);
/* Appends the status JSON array ([{"name","key","offset","byte_size"}...]) of every region
 * (name NULL) or of one (NOT_FOUND when it is not registered). */
cinfer_status *shm_status_json(shm_registry *r, const char *name, cbuf *out);
/* The same walk for another encoding (gRPC's SystemSharedMemoryStatusResponse): fn is called
 * once per region (name NULL: every one; else that one, NOT_FOUND with the same text when it
 * is not registered), under the registry's lock, so fn must copy what it keeps and must not
 * call back into r. */
typedef void (*shm_status_fn)(void *user, const char *name, const char *key, uint64_t offset,
                              uint64_t byte_size);
cinfer_status *shm_status_each(shm_registry *r, const char *name, shm_status_fn fn, void *user);
size_t shm_region_count(shm_registry *r);

/* The CUDA shared-memory calls on this server (no GPU), for every transport: action is
 * "status", "register" or "unregister", name NULL or "" for all. NULL means success with
 * nothing registered (status of all: an empty list; unregister all); otherwise Triton's
 * texts: NOT_FOUND for the status of a region, INVALID_ARG "... GPUs not supported" for the
 * rest. */
cinfer_status *shm_cuda_call(const char *action, const char *name);

/* Looks up name and checks [offset, offset + byte_size) against its window (Triton's
 * checks: offset inside the window, no overflow, the end inside the window). On success
 * *region holds a reference (shm_region_release) and *addr points at offset. */
cinfer_status *shm_acquire(shm_registry *r, const char *name, uint64_t offset, uint64_t byte_size,
                           shm_region **region, void **addr);
void shm_region_release(shm_region *g);  /* NULL is a no-op */

#endif
