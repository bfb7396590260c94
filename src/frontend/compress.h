/* compress.h: HTTP body compression for the KServe frontend (Triton's data_compressor):
 * request bodies with Content-Encoding gzip or deflate are inflated with zlib before they
 * are decoded, and a response is compressed when the client's Accept-Encoding prefers gzip
 * or deflate. "deflate" is the zlib format (RFC 1950), as Triton and Python's zlib write
 * it; inflation detects the gzip and zlib wrappers itself.
 *
 * Bounds: the inflated size is limited (max_out) while inflating, so a small body that
 * expands without end (a zip bomb) stops at the limit with RESOURCE_EXHAUSTED (413); a
 * corrupt or truncated stream, or bytes after its end, is INVALID_ARG (400). */
#ifndef CINFER_FRONTEND_COMPRESS_H
#define CINFER_FRONTEND_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>

#include "cinfer/cinfer.h"

typedef enum compress_kind { COMPRESS_IDENTITY = 0, COMPRESS_GZIP, COMPRESS_DEFLATE } compress_kind;

/* The request's Content-Encoding value (absent: len 0). Returns false for an encoding we
 * do not decode (Triton answers "Unsupported compression type"). */
bool compress_request_kind(const char *value, size_t len, compress_kind *out);
/* Triton's choice from Accept-Encoding: among identity, gzip and deflate the one with the
 * highest q (first wins a tie; malformed entries skipped); IDENTITY when none. */
compress_kind compress_pick_response(const char *accept, size_t len);

/* Inflates in[0..n) into a malloc'd buffer (*out, *out_len; free()). */
cinfer_status *compress_inflate(const void *in, size_t n, size_t max_out, void **out,
                                size_t *out_len);
/* Compresses in[0..n) as kind (GZIP or DEFLATE) into a malloc'd buffer. */
cinfer_status *compress_deflate(compress_kind kind, const void *in, size_t n, void **out,
                                size_t *out_len);

#endif
