/* kv.c: paged KV cache blocks, free list, prefix hash table and LRU (see kv.h).
 * Invariants (checked by llm_kv_get_stats callers in tests): each block is in exactly one
 * of FREE (free stack), USED (ref > 0), CACHED (lru list, ref == 0, published). */
#include "backends/llm/kv.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int ref;
  bool published;
  uint64_t key, parent;
  int lru_prev, lru_next; /* CACHED only */
} kvblock;

struct llm_kv {
  int n_layers, kv_dim, bs, n;
  uint16_t *k, *v;
  kvblock *b;
  int32_t *tokens;   /* n * bs: the tokens of published blocks */
  int *free_stack, n_free;
  int lru_head, lru_tail, n_cached; /* head = least recently released */
  int *table;        /* open addressing: block id or -1 (capacity >= 2 * n) */
  size_t table_cap;
  uint64_t evictions;
};

cinfer_status *llm_kv_create(int n_layers, int kv_dim, int block_size, int n_blocks, llm_kv **out) {
  *out = NULL;
  if (n_layers < 1 || kv_dim < 1 || block_size < 1 || block_size > 4096 || n_blocks < 1)
    return cinfer_status_new(CINFER_INVALID_ARG, "kv: bad geometry (layers %d, kv_dim %d, block %d, blocks %d)",
                             n_layers, kv_dim, block_size, n_blocks);
  size_t per = (size_t)n_layers * (size_t)block_size * (size_t)kv_dim;
  if ((size_t)n_blocks > SIZE_MAX / 4 / per)
    return cinfer_status_new(CINFER_INVALID_ARG, "kv: %d blocks overflow", n_blocks);
  llm_kv *kv = calloc(1, sizeof *kv);
  if (!kv) return cinfer_status_oom("kv");
  kv->n_layers = n_layers;
  kv->kv_dim = kv_dim;
  kv->bs = block_size;
  kv->n = n_blocks;
  kv->k = calloc(per * (size_t)n_blocks, 2);
  kv->v = calloc(per * (size_t)n_blocks, 2);
  kv->b = calloc((size_t)n_blocks, sizeof *kv->b);
  kv->tokens = calloc((size_t)n_blocks * (size_t)block_size, sizeof *kv->tokens);
  kv->free_stack = malloc((size_t)n_blocks * sizeof(int));
  kv->table_cap = 16;
  while (kv->table_cap < (size_t)n_blocks * 2) kv->table_cap *= 2;
  kv->table = malloc(kv->table_cap * sizeof(int));
  if (!kv->k || !kv->v || !kv->b || !kv->tokens || !kv->free_stack || !kv->table) {
    llm_kv_destroy(kv);
    return cinfer_status_new(CINFER_INTERNAL, "kv: out of memory for %d blocks of %zu bytes", n_blocks,
                             per * 4);
  }
  for (size_t i = 0; i < kv->table_cap; i++) kv->table[i] = -1;
  for (int i = 0; i < n_blocks; i++) kv->free_stack[i] = n_blocks - 1 - i;
  kv->n_free = n_blocks;
  kv->lru_head = kv->lru_tail = -1;
  *out = kv;
  return NULL;
}

void llm_kv_destroy(llm_kv *kv) {
  if (!kv) return;
  free(kv->k);
  free(kv->v);
  free(kv->b);
  free(kv->tokens);
  free(kv->free_stack);
  free(kv->table);
  free(kv);
}

int llm_kv_block_size(const llm_kv *kv) { return kv->bs; }
int llm_kv_available(const llm_kv *kv) { return kv->n_free + kv->n_cached; }

static void lru_unlink(llm_kv *kv, int i) {
  kvblock *b = &kv->b[i];
  if (b->lru_prev >= 0) kv->b[b->lru_prev].lru_next = b->lru_next; else kv->lru_head = b->lru_next;
  if (b->lru_next >= 0) kv->b[b->lru_next].lru_prev = b->lru_prev; else kv->lru_tail = b->lru_prev;
  kv->n_cached--;
}
static void lru_append(llm_kv *kv, int i) {
  kvblock *b = &kv->b[i];
  b->lru_prev = kv->lru_tail;
  b->lru_next = -1;
  if (kv->lru_tail >= 0) kv->b[kv->lru_tail].lru_next = i; else kv->lru_head = i;
  kv->lru_tail = i;
  kv->n_cached++;
}
static size_t slot_of(const llm_kv *kv, uint64_t key) { return (size_t)(key ^ (key >> 29)) & (kv->table_cap - 1); }
/* Linear probing with backward-shift deletion (no tombstones, so probes always end). */
static void table_remove(llm_kv *kv, int blk) {
  size_t mask = kv->table_cap - 1, i = slot_of(kv, kv->b[blk].key);
  while (kv->table[i] != blk) {
    if (kv->table[i] == -1) return;
    i = (i + 1) & mask;
  }
  for (size_t j = i;;) {
    j = (j + 1) & mask;
    if (kv->table[j] == -1) break;
    size_t k = slot_of(kv, kv->b[kv->table[j]].key);
    bool move = i <= j ? (k <= i || k > j) : (k <= i && k > j);
    if (move) {
      kv->table[i] = kv->table[j];
      i = j;
    }
  }
  kv->table[i] = -1;
}

int llm_kv_alloc(llm_kv *kv) {
  int i;
  if (kv->n_free) {
    i = kv->free_stack[--kv->n_free];
  } else if (kv->lru_head >= 0) {
    i = kv->lru_head;
    lru_unlink(kv, i);
    table_remove(kv, i);
    kv->b[i].published = false;
    kv->evictions++;
  } else {
    return -1;
  }
  kv->b[i].ref = 1;
  return i;
}

void llm_kv_ref(llm_kv *kv, int block) {
  assert(kv->b[block].ref > 0);
  kv->b[block].ref++;
}

void llm_kv_release(llm_kv *kv, int block) {
  kvblock *b = &kv->b[block];
  assert(b->ref > 0);
  if (--b->ref) return;
  if (b->published) lru_append(kv, block);
  else kv->free_stack[kv->n_free++] = block;
}

uint64_t llm_kv_hash(uint64_t parent, const int32_t *tokens, int n) {
  uint64_t h = parent ^ 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < n; i++) {
    h ^= (uint32_t)tokens[i];
    h *= 0x100000001B3ull;
    h ^= h >> 32;
  }
  return h ? h : 1;
}

int llm_kv_lookup(llm_kv *kv, uint64_t key, const int32_t *tokens) {
  for (size_t i = slot_of(kv, key);; i = (i + 1) & (kv->table_cap - 1)) {
    int blk = kv->table[i];
    if (blk == -1) return -1;
    if (kv->b[blk].key == key &&
        !memcmp(kv->tokens + (size_t)blk * kv->bs, tokens, (size_t)kv->bs * sizeof *tokens)) {
      if (kv->b[blk].ref == 0) lru_unlink(kv, blk);
      kv->b[blk].ref++;
      return blk;
    }
  }
}

void llm_kv_publish(llm_kv *kv, int block, uint64_t parent, uint64_t key, const int32_t *tokens) {
  kvblock *b = &kv->b[block];
  if (b->published) return;
  size_t i;
  for (i = slot_of(kv, key);; i = (i + 1) & (kv->table_cap - 1)) {
    int blk = kv->table[i];
    if (blk == -1) break;
    if (kv->b[blk].key == key && !memcmp(kv->tokens + (size_t)blk * kv->bs, tokens, (size_t)kv->bs * 4)) return;
  }
  kv->table[i] = block;
  b->published = true;
  b->key = key;
  b->parent = parent;
  memcpy(kv->tokens + (size_t)block * kv->bs, tokens, (size_t)kv->bs * sizeof *tokens);
}

int llm_kv_match_partial(llm_kv *kv, uint64_t parent, const int32_t *tokens, int n, int *len) {
  int best = -1, best_len = 0;
  if (n > kv->bs) n = kv->bs;
  for (int blk = 0; blk < kv->n && best_len < n; blk++) {
    const kvblock *b = &kv->b[blk];
    if (!b->published || b->parent != parent) continue;
    const int32_t *t = kv->tokens + (size_t)blk * kv->bs;
    int l = 0;
    while (l < n && t[l] == tokens[l]) l++;
    if (l > best_len) {
      best = blk;
      best_len = l;
    }
  }
  *len = best_len;
  if (best < 0) return -1;
  if (kv->b[best].ref == 0) lru_unlink(kv, best);
  kv->b[best].ref++;
  return best;
}

void llm_kv_copy_rows(llm_kv *kv, int src, int dst, int n_rows) {
  if (src == dst || n_rows <= 0) return;
  size_t bytes = (size_t)n_rows * (size_t)kv->kv_dim * sizeof(uint16_t);
  for (int l = 0; l < kv->n_layers; l++) {
    memcpy(llm_kv_k(kv, l, dst), llm_kv_k(kv, l, src), bytes);
    memcpy(llm_kv_v(kv, l, dst), llm_kv_v(kv, l, src), bytes);
  }
}

void llm_kv_get_stats(const llm_kv *kv, llm_kv_stats *st) {
  st->n_blocks = kv->n;
  st->n_free = kv->n_free;
  st->n_cached = kv->n_cached;
  st->n_used = kv->n - kv->n_free - kv->n_cached;
  st->evictions = kv->evictions;
}

uint16_t *llm_kv_k(llm_kv *kv, int layer, int block) {
  return kv->k + (((size_t)block * kv->n_layers + (size_t)layer) * kv->bs) * kv->kv_dim;
}
uint16_t *llm_kv_v(llm_kv *kv, int layer, int block) {
  return kv->v + (((size_t)block * kv->n_layers + (size_t)layer) * kv->bs) * kv->kv_dim;
}
