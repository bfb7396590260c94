/* grpc_wire.h: the gRPC-over-HTTP/2 wire rules that do not need a socket (so the unit
 * tests and the fuzz harness reach them directly):
 *   - length-prefixed messages: 1 byte compressed flag, 4 bytes big-endian length, bytes
 *     (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md)
 *   - gzip message decompression (zlib), bounded by the message size limit
 *   - grpc-status codes from cinfer codes, as Triton maps TRITONSERVER_Error codes
 *   - grpc-message percent-encoding, grpc-timeout parsing. */
#ifndef CINFER_GRPC_WIRE_H
#define CINFER_GRPC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/types.h"
#include "core/buf.h"

/* gRPC status codes (grpc/include/grpc/impl/codegen/status.h numbering). */
enum {
  GRPC_OK = 0, GRPC_CANCELLED = 1, GRPC_UNKNOWN = 2, GRPC_INVALID_ARGUMENT = 3,
  GRPC_DEADLINE_EXCEEDED = 4, GRPC_NOT_FOUND = 5, GRPC_ALREADY_EXISTS = 6,
  GRPC_PERMISSION_DENIED = 7, GRPC_RESOURCE_EXHAUSTED = 8, GRPC_FAILED_PRECONDITION = 9,
  GRPC_ABORTED = 10, GRPC_OUT_OF_RANGE = 11, GRPC_UNIMPLEMENTED = 12, GRPC_INTERNAL = 13,
  GRPC_UNAVAILABLE = 14, GRPC_DATA_LOSS = 15, GRPC_UNAUTHENTICATED = 16
};

typedef enum grpc_frame_result {
  GRPC_FRAME_OK = 0,        /* *msg is a whole message; *consumed bytes were used */
  GRPC_FRAME_INCOMPLETE,    /* need more bytes */
  GRPC_FRAME_TOO_LARGE,     /* the prefix announces more than max bytes */
  GRPC_FRAME_BAD_FLAG       /* compressed flag other than 0 or 1 */
} grpc_frame_result;

typedef struct grpc_msg {
  const uint8_t *data;  /* points into the buffer given */
  size_t len;
  bool compressed;
} grpc_msg;

/* Reads one length-prefixed message from the start of buf. */
grpc_frame_result grpc_frame_next(const uint8_t *buf, size_t len, size_t max, grpc_msg *msg,
                                  size_t *consumed);
/* Appends the 5-byte prefix for an uncompressed message of len bytes. */
void grpc_frame_prefix(cbuf *out, size_t len);

/* Inflates a gzip message into *out (malloc'd, owned by the caller). Fails with
 * RESOURCE_EXHAUSTED when the result exceeds max bytes, INTERNAL when the data is not
 * valid gzip. */
cinfer_status *grpc_gunzip(const uint8_t *in, size_t len, size_t max, uint8_t **out,
                           size_t *out_len);

/* cinfer code -> gRPC status (Triton's mapping: INVALID_ARG -> INVALID_ARGUMENT,
 * UNSUPPORTED -> UNIMPLEMENTED, ...). */
int grpc_status_of(cinfer_code code);
const char *grpc_status_name(int status);
/* Percent-encodes a grpc-message value into out (NUL-terminated; cut at cap - 1 bytes at a
 * character boundary of the encoding). */
void grpc_percent_encode(const char *msg, char *out, size_t cap);
/* Parses a grpc-timeout value ("100m", "5S", ...) into milliseconds; false when malformed. */
bool grpc_parse_timeout(const char *v, size_t len, uint64_t *ms);

#endif
