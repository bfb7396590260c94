/* bigbuf.h: a small process-wide cache of large, 64-byte-aligned buffers (>= 1 MiB).
 *
 * A batch of large tensors (16 x 4 MiB inputs, their 64 MiB batch copy and outputs) needs
 * fresh buffers at every execution; from malloc they are new mappings each time, and the
 * first write to each 4 KiB page is a page fault: measured with perf on the shared-memory
 * benchmark, faults on fresh pages took over a quarter of the server's time. Buffers given
 * back here are kept (at most BIGBUF_SLOTS of them, BIGBUF_MAX_BYTES in all) and handed out
 * again for a request of the same order of size. Thread-safe. */
#ifndef CINFER_CORE_BIGBUF_H
#define CINFER_CORE_BIGBUF_H
#include <stddef.h>

#define BIGBUF_MIN (1u << 20)
#define BIGBUF_SLOTS 8
#define BIGBUF_MAX_BYTES ((size_t)512 << 20)

/* At least n bytes, 64-byte aligned; *cap gets the usable size (pass it to bigbuf_put).
 * Below BIGBUF_MIN it is plain posix_memalign. NULL when out of memory. */
void *bigbuf_get(size_t n, size_t *cap);
/* Gives p (from bigbuf_get, with its cap) back: cached when large and there is room, else
 * freed. NULL is a no-op. */
void bigbuf_put(void *p, size_t cap);

#endif
