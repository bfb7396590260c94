/* fuzz_streams_publish.c: the board's side of a live-page push (src/streams/live.c,
 * streams_live_accept), which `cinfer serve --streams-page` runs on the body of every
 * POST /streams/N from the network: a JSON header of Streams-Header-Length bytes, then a
 * JPEG. The first 2 bytes choose that length (little-endian), the third the stream
 * number; the rest is the body. Every input either fails with INVALID_ARG (a message, the
 * board unchanged) or replaces the stream's entry; never a crash, a leak or a read past
 * the body. The board lives across inputs, so entries are replaced and freed many times.
 * Seeds: fuzz/corpus/streams_publish. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "streams/streams.h"

#define CHECK(c) do { if (!(c)) abort(); } while (0) /* NDEBUG-proof */

static streams_live *board;

static void drop_board(void) { streams_live_stop(board); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!board) {
    cinfer_status *st = streams_live_create(4, true, &board);
    CHECK(!st);
    atexit(drop_board);
  }
  if (size < 3) return 0;
  long long hlen = data[0] | (data[1] << 8);
  int stream = (int)(signed char)data[2] % 6; /* -5..5: some are off the board */
  size_t len = size - 3;
  char *body = malloc(len ? len : 1); /* exactly len bytes: ASan sees any over-read */
  if (!body) return 0;
  memcpy(body, data + 3, len);
  cinfer_status *st = streams_live_accept(board, stream, body, len, hlen);
  if (st) {
    CHECK(cinfer_status_code(st) == CINFER_INVALID_ARG || cinfer_status_code(st) == CINFER_INTERNAL /* oom */);
    CHECK(cinfer_status_message(st)[0]);
    cinfer_status_free(st);
  }
  free(body);
  return 0;
}
