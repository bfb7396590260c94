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
  llm_kv_publish(kv, a, 0, k1, t1);
  llm_kv_publish(kv, b, k1, k2, t2);
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
  llm_kv_publish(kv, x3, 0, k1, t1);
  llm_kv_release(kv, x3);
  assert_accounting(kv, 3, 0); /* x3 was not published: back to FREE */
  llm_kv_publish(kv, x1, 0, k3, t3);
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
      llm_kv_publish(kv, blocks[i], 0, llm_kv_hash(0, t, BS), t);
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

/* A partial block (the tail of a prompt) matches the cached block after the same parent
 * whose first tokens agree longest; rows are copied; the match is pinned until released. */
static void test_partial_match_and_copy(void **s) {
  llm_kv *kv;
  assert_null(llm_kv_create(2, 3, BS, 6, &kv));
  int32_t p[BS] = {1, 2, 3, 4}, c1[BS] = {5, 6, 7, 8}, c2[BS] = {5, 6, 9, 9}, other[BS] = {5, 6, 7, 8};
  uint64_t kp = llm_kv_hash(0, p, BS), kq = llm_kv_hash(0, other, BS);
  int bp = llm_kv_alloc(kv), b1 = llm_kv_alloc(kv), b2 = llm_kv_alloc(kv), bo = llm_kv_alloc(kv);
  llm_kv_publish(kv, bp, 0, kp, p);
  llm_kv_publish(kv, b1, kp, llm_kv_hash(kp, c1, BS), c1);
  llm_kv_publish(kv, b2, kp, llm_kv_hash(kp, c2, BS), c2);
  llm_kv_publish(kv, bo, kq, llm_kv_hash(kq, c1, BS), c1); /* same tokens, other parent */
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < BS * 3; i++) {
      llm_kv_k(kv, l, b1)[i] = (uint16_t)(100 * l + i);
      llm_kv_v(kv, l, b1)[i] = (uint16_t)(1000 + 100 * l + i);
    }
  for (int i = 0; i < 4; i++) llm_kv_release(kv, (int[]){bp, b1, b2, bo}[i]);
  assert_accounting(kv, 0, 4);
  int len = -1;
  int32_t want[3] = {5, 6, 7};
  int m = llm_kv_match_partial(kv, kp, want, 3, &len);
  assert_int_equal(m, b1); /* 3 tokens agree with c1, 2 with c2 */
  assert_int_equal(len, 3);
  assert_accounting(kv, 1, 3); /* pinned: not evictable while copied from */
  int d = llm_kv_alloc(kv);
  llm_kv_copy_rows(kv, m, d, len);
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < 3 * 3; i++) {
      assert_int_equal(llm_kv_k(kv, l, d)[i], 100 * l + i);
      assert_int_equal(llm_kv_v(kv, l, d)[i], 1000 + 100 * l + i);
    }
  llm_kv_release(kv, m);
  llm_kv_release(kv, d);
  int32_t none[2] = {9, 9}, first[1] = {5};
  assert_int_equal(llm_kv_match_partial(kv, kp, none, 2, &len), -1); /* no first-token match */
  assert_int_equal(len, 0);
  assert_int_equal(llm_kv_match_partial(kv, 12345, first, 1, &len), -1); /* unknown parent */
  m = llm_kv_match_partial(kv, kq, first, 1, &len);
  assert_int_equal(m, bo); /* the other parent's child */
  llm_kv_release(kv, m);
  assert_accounting(kv, 0, 4);
  llm_kv_destroy(kv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alloc_exhaust),
      cmocka_unit_test(test_prefix_share_and_lru),
      cmocka_unit_test(test_many_keys_table),
      cmocka_unit_test(test_partial_match_and_copy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
