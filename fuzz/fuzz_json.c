/* fuzz_json.c: the hot-path JSON reader (core/json) on arbitrary bytes. Every tree it
 * returns is walked in full (lengths match the links, strings are NUL-terminated at their
 * length, members have keys and elements do not), and every number it accepts must equal
 * what strtod reads from the same text when the text is one plain number. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"

#define CHECK(c) do { if (!(c)) abort(); } while (0) /* NDEBUG-proof */

static size_t walk(const json_value *v, bool member, int depth) {
  CHECK(depth <= 32);
  CHECK((v->key != NULL) == member);
  size_t n = 1;
  if (v->type == JSON_STRING) {
    CHECK(v->u.str[v->len] == 0);
  } else if (v->type == JSON_ARRAY || v->type == JSON_OBJECT) {
    uint32_t k = 0;
    for (const json_value *c = v->u.child; c; c = c->next, k++)
      n += walk(c, v->type == JSON_OBJECT, depth + 1);
    CHECK(k == v->len);
  }
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_doc *d = NULL;
  cinfer_status *st = json_parse((const char *)data, size, 32, &d);
  if (st) {
    CHECK(!d);
    cinfer_status_free(st);
    return 0;
  }
  const json_value *r = json_root(d);
  walk(r, false, 0);
  if (r->type == JSON_NUMBER && size < 200 && memchr(data, 'N', size) == NULL &&
      memchr(data, 'I', size) == NULL) {
    char buf[256];
    memcpy(buf, data, size);
    buf[size] = 0;
    double want = strtod(buf, NULL);
    CHECK(memcmp(&want, &r->u.num, sizeof want) == 0);
  }
  json_doc_free(d);
  return 0;
}
