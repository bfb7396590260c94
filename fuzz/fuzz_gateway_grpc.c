/* fuzz_gateway_grpc.c: the gateway's reading of gRPC request messages (grpc_msg.c): any
 * bytes as a framed message, plain and as gzip, for every field number it asks for. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "gateway/gateway.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *model, err[200];
  const uint8_t *v;
  size_t n;
  gw_pb_string_field(data, size, 1, &v, &n);
  for (uint32_t f = 1; f <= 2; f++) {
    if (gw_grpc_request_model(data, size, false, f, &model, err, sizeof err) == 1) free(model);
    if (gw_grpc_request_model(data, size, true, f, &model, err, sizeof err) == 1) free(model);
  }
  return 0;
}
