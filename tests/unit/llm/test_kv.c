/* test_kv.c: the paged KV block allocator and prefix cache: allocation until exhaustion,
 * sharing by content key with refcounts, LRU eviction order, hash collisions never
 * sharing different tokens, and block accounting (no leaks) after every scenario. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backends/llm/kv.h"

#define BS 4

static void assert_accounting(llm_kv *kv, int used, int cached) {
  llm_kv_stats st;
  llm_kv_get_stats(kv, &st);
  assert_int_equal(st.n_free + st.n_cached + st.n_used, st.n_blocks);
  assert_int_equal(st.n_used, used);
  assert_int_equal(st.n_cached, cached);
  assert_int_equal(llm_kv_available(kv), st.n_free + st.n_cached);
}

static void test_alloc_exhaust(void **s) {
  llm_kv *kv;
  assert_null(llm_kv_create(2, 8, BS, 5, &kv));
  int b[5];
  for (int i = 0; i < 5; i++) {
    b[i] = llm_kv_alloc(kv);
    assert_in_range(b[i], 0, 4);
    for (int j = 0; j < i; j++) assert_int_not_equal(b[i], b[j]);
  }
  assert_int_equal(llm_kv_alloc(kv), -1);
  assert_accounting(kv, 5, 0);
  /* K and V rows of different blocks/layers never overlap */
  assert_true(llm_kv_k(kv, 1, b[0]) + BS * 8 <= llm_kv_k(kv, 0, b[1]) || llm_kv_k(kv, 0, b[1]) + BS * 8 <= llm_kv_k(kv, 1, b[0]));
  for (int i = 0; i < 5; i++) llm_kv_release(kv, b[i]);
  assert_accounting(kv, 0, 0);
  llm_kv_destroy(kv);
  llm_kv_destroy(NULL);
  cinfer_status *st = llm_kv_create(0, 8, BS, 5, &kv);
  assert_non_null(st);
  assert_null(kv);
  cinfer_status_free(st);
}

static void test_prefix_share_and_lru(void **s) {
  llm_kv *kv;
  assert_null(llm_kv_create(1, 4, BS, 4, &kv));
  int32_t t1[BS] = {1, 2, 3, 4}, t2[BS] = {5, 6, 7, 8}, t3[BS] = {9, 9, 9, 9};
  uint64_t k1 = llm_kv_hash(0, t1, BS), k2 = llm_kv_hash(k1, t2, BS), k3 = llm_kv_hash(0, t3, BS);
  assert_int_not_equal(k1, llm_kv_hash(0, t2, BS));
  int a = llm_kv_alloc(kv), b = llm_kv_alloc(kv);
  llm_kv_publish(kv, a, k1, t1);
  llm_kv_publish(kv, b, k2, t2);
  /* a second sequence shares both blocks while the first still holds them */
  assert_int_equal(llm_kv_lookup(kv, k1, t1), a);
  assert_int_equal(llm_kv_lookup(kv, k2, t2), b);
  assert_accounting(kv, 2, 0);
  /* same key with different tokens (a forged collision) is not shared */
  assert_int_equal(llm_kv_lookup(kv, k1, t2), -1);
  /* both sequences finish: blocks become CACHED after the last release only */
  llm_kv_release(kv, a);
  llm_kv_release(kv, b);
  assert_accounting(kv, 2, 0);
  llm_kv_release(kv, a); /* a released first: least recently used */
  llm_kv_release(kv, b);
  assert_accounting(kv, 0, 2);
  /* a hit revives a cached block */
  int c = llm_kv_lookup(kv, k1, t1);
  assert_int_equal(c, a);
  assert_accounting(kv, 1, 1);
  llm_kv_release(kv, c); /* now b is the LRU one */
  /* allocate everything: free blocks first, then eviction in LRU order (b, then a) */
  int x1 = llm_kv_alloc(kv), x2 = llm_kv_alloc(kv);
  assert_true(x1 != a && x1 != b && x2 != a && x2 != b);
  assert_accounting(kv, 2, 2);
  int x3 = llm_kv_alloc(kv);
  assert_int_equal(x3, b);
  assert_int_equal(llm_kv_lookup(kv, k2, t2), -1); /* evicted: gone from the table */
  assert_int_equal(llm_kv_lookup(kv, k1, t1), a);  /* still cached */
  llm_kv_stats st;
  llm_kv_get_stats(kv, &st);
  assert_int_equal(st.evictions, 1);
  assert_int_equal(llm_kv_alloc(kv), -1);
  /* publishing a duplicate key keeps the first block */
  llm_kv_publish(kv, x3, k1, t1);
  llm_kv_release(kv, x3);
  assert_accounting(kv, 3, 0); /* x3 was not published: back to FREE */
  llm_kv_publish(kv, x1, k3, t3);
  llm_kv_release(kv, x1);
  llm_kv_release(kv, x2);
  llm_kv_release(kv, a);
  assert_accounting(kv, 0, 2);
  llm_kv_destroy(kv);
}

static void test_many_keys_table(void **s) {
  /* fill, evict and refill many times: the hash table must keep finding live keys */
  llm_kv *kv;
  assert_null(llm_kv_create(1, 2, BS, 64, &kv));
  for (int round = 0; round < 50; round++) {
    int blocks[64];
    for (int i = 0; i < 64; i++) {
      int32_t t[BS] = {round, i, round * i, 7};
      blocks[i] = llm_kv_alloc(kv);
      assert_true(blocks[i] >= 0);
      llm_kv_publish(kv, blocks[i], llm_kv_hash(0, t, BS), t);
    }
    for (int i = 0; i < 64; i++) llm_kv_release(kv, blocks[i]);
    for (int i = 0; i < 64; i += 3) {
      int32_t t[BS] = {round, i, round * i, 7};
      int b = llm_kv_lookup(kv, llm_kv_hash(0, t, BS), t);
      assert_int_equal(b, blocks[i]);
      llm_kv_release(kv, b);
    }
    assert_accounting(kv, 0, 64);
  }
  llm_kv_destroy(kv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alloc_exhaust),
      cmocka_unit_test(test_prefix_share_and_lru),
      cmocka_unit_test(test_many_keys_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
