/* fuzz_gateway_metrics.c: the kv_aware balancer's reading of a replica's /metrics text
 * (kv.c, gw_kv_parse_metrics): any bytes, with a small and a large table. */
#include <stddef.h>
#include <stdint.h>

#include "gateway/gateway.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gw_kv_stat s[64];
  gw_kv_free(s, gw_kv_parse_metrics((const char *)data, size, s, 1));
  gw_kv_free(s, gw_kv_parse_metrics((const char *)data, size, s, 64));
  return 0;
}
