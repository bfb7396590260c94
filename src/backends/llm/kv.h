/* kv.h: the paged KV cache: a pool of fixed-size blocks (block_size token positions, all
 * layers, K and V in fp16), a free list, reference counts, and a prefix cache.
 *
 * Block states: FREE (refcount 0, no content key; on the free list), USED (refcount > 0),
 * CACHED (refcount 0 but holding a published full block: in the hash table and on the LRU
 * list, reusable by a later sequence with the same prefix until evicted).
 * Allocation takes a FREE block first, else evicts the least recently released CACHED one.
 * A published block's key is hash(parent key, its block_size tokens); lookups compare the
 * tokens too, so a hash collision can never share wrong content. A published block also
 * records its parent's key, so a prompt whose last, partial block begins like a cached
 * block after the same prefix can copy those rows (llm_kv_match_partial).
 * Not thread-safe: the engine's step thread owns it. */
#ifndef CINFER_LLM_KV_H
#define CINFER_LLM_KV_H

#include <stdint.h>

#include "cinfer/types.h"

typedef struct llm_kv llm_kv;

typedef struct llm_kv_stats {
  int n_blocks, n_free, n_cached, n_used; /* n_free + n_cached + n_used == n_blocks */
  uint64_t evictions;
} llm_kv_stats;

/* kv_dim = n_kv_heads * head_dim. Allocates n_layers*n_blocks*block_size*kv_dim*2*2 bytes. */
cinfer_status *llm_kv_create(int n_layers, int kv_dim, int block_size, int n_blocks, llm_kv **out);
void llm_kv_destroy(llm_kv *kv);
int llm_kv_block_size(const llm_kv *kv);
/* Blocks an allocation can get now (FREE + CACHED). */
int llm_kv_available(const llm_kv *kv);
/* Returns a block with refcount 1 and no content key, or -1 when none is available. */
int llm_kv_alloc(llm_kv *kv);
/* Adds a reference (sharing). */
void llm_kv_ref(llm_kv *kv, int block);
/* Drops a reference; at zero the block becomes CACHED (if published) or FREE. */
void llm_kv_release(llm_kv *kv, int block);
/* Key of a full block given its parent's key (0 for the first block). */
uint64_t llm_kv_hash(uint64_t parent, const int32_t *tokens, int n);
/* Finds a published block with this key and these tokens; returns it with a new reference
 * (reviving it from the LRU list if CACHED) or -1. */
int llm_kv_lookup(llm_kv *kv, uint64_t key, const int32_t *tokens);
/* Publishes a full, computed, USED block under key = llm_kv_hash(parent, tokens). No-op if
 * the key is already present (another block holds the same content) or the block is
 * already published. */
void llm_kv_publish(llm_kv *kv, int block, uint64_t parent, uint64_t key, const int32_t *tokens);
/* Among published blocks whose parent key is `parent`, the one whose first tokens agree
 * longest with tokens[0..n) (at most block size tokens are compared); returns it with a new
 * reference (release it after use) and the length of agreement in *len (>= 1), or -1 when
 * none agrees on even the first token. A linear scan of the block table: called once per admission. */
int llm_kv_match_partial(llm_kv *kv, uint64_t parent, const int32_t *tokens, int n, int *len);
/* Copies the first n_rows positions of every layer's K and V from block src to dst. */
void llm_kv_copy_rows(llm_kv *kv, int src, int dst, int n_rows);
void llm_kv_get_stats(const llm_kv *kv, llm_kv_stats *st);
/* Row pointers: block b, layer l: block_size rows of kv_dim fp16 values. */
uint16_t *llm_kv_k(llm_kv *kv, int layer, int block);
uint16_t *llm_kv_v(llm_kv *kv, int layer, int block);

#endif
