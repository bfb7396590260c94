/* tokenizer.c: the tokenizers of GGUF metadata, matching llama.cpp (llama-vocab.cpp):
 * byte-level BPE (`gpt2`, llm_tokenizer_bpe) and SentencePiece (`llama`, llm_tokenizer_spm).
 *
 * Both start by splitting the text on special-token spellings (longest token first, as
 * llama.cpp's tokenizer_st_partition does).
 * BPE: (2) pre-tokenise raw fragments: optional \p{N} isolation, then the GPT-2 regex
 * implemented by hand as llama.cpp's unicode_regex_split_custom_gpt2; (3) map each word's
 * bytes to GPT-2's byte alphabet and merge adjacent symbols by rank (min-heap on (rank, left
 * position)); (4) map symbols to ids, falling back to single-byte tokens.
 * SentencePiece: (2) each raw fragment gets a leading space when add_space_prefix and it
 * starts the text or follows a special token; spaces become U+2581; (3) start from one
 * symbol per UTF-8 character and repeatedly merge the adjacent pair whose concatenation is
 * the vocabulary token of highest score (max-heap on (score, -left position)); (4) symbols
 * that are not tokens become <0xXX> byte tokens.
 * Invariants: every token id stored is in [0, n_vocab); hash tables point into the GGUF
 * mapping, which outlives the tokenizer. */
#include "core/hex.h"
#include "backends/llm/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "backends/llm/unicode_tables.h"
#include "core/buf.h"
#include "core/hash.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };
enum { F_LETTER = 1, F_NUMBER = 2, F_SPACE = 4, F_DEFINED = 8 };

typedef struct { const char *p; uint32_t n; int32_t v; } hent;
typedef struct { hent *e; size_t cap; } hmap;

struct llm_tokenizer {
  int32_t n_vocab;
  llm_gguf_str *text;      /* borrowed */
  uint8_t *ttype;
  char *pieces;            /* decoded bytes of every token, concatenated */
  uint32_t *piece_off;     /* n_vocab + 1 */
  hmap vocab, merges;
  int32_t *special;        /* control + user-defined ids, longest text first */
  int32_t n_special;
  float *score;            /* SentencePiece only: n_vocab merge scores */
  int32_t bos, eos, eot, unk;
  bool add_bos, add_eos, split_digits;
  bool spm;                /* tokenizer.ggml.model = llama */
  bool add_space_prefix;   /* SentencePiece: prefix raw text with a space (default true) */
  int32_t byte_tok[256];   /* id of the single-byte token for each raw byte, -1 if none */
  char *chat_template;
};

static bool hmap_init(hmap *m, size_t n) {
  m->cap = 16;
  while (m->cap < n * 2) m->cap *= 2;
  m->e = calloc(m->cap, sizeof *m->e);
  return m->e != NULL;
}
static void hmap_put(hmap *m, const char *p, uint32_t n, int32_t v) { /* first wins */
  for (size_t i = hash_bytes(p, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->e[i].p) { m->e[i] = (hent){p, n, v}; return; }
    if (m->e[i].n == n && !memcmp(m->e[i].p, p, n)) return;
  }
}
static int32_t hmap_get(const hmap *m, const char *p, size_t n) {
  for (size_t i = hash_bytes(p, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->e[i].p) return -1;
    if (m->e[i].n == n && !memcmp(m->e[i].p, p, n)) return m->e[i].v;
  }
}

/* ---- UTF-8 ---- */
static int utf8_len(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 0;
}
/* Decodes one code point; returns its length or 0 when invalid. */
static int utf8_dec(const uint8_t *s, size_t n, uint32_t *cp) {
  int l = utf8_len(s[0]);
  if (!l || (size_t)l > n) return 0;
  uint32_t c = l == 1 ? s[0] : s[0] & (0x7F >> l);
  for (int i = 1; i < l; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    c = (c << 6) | (s[i] & 0x3F);
  }
  static const uint32_t minv[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < minv[l] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *cp = c;
  return l;
}
static int utf8_enc(uint32_t c, char *o) {
  if (c < 0x80) { o[0] = (char)c; return 1; }
  if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
  if (c < 0x10000) {
    o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3F)); o[2] = (char)(0x80 | (c & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
  return 4;
}
static uint8_t cp_flags(uint32_t c) {
  size_t lo = 0, hi = sizeof llm_ucd_ranges / sizeof llm_ucd_ranges[0];
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c > llm_ucd_ranges[mid].last) lo = mid + 1;
    else if (c < llm_ucd_ranges[mid].first) hi = mid;
    else return llm_ucd_ranges[mid].flags;
  }
  return 0;
}

/* GPT-2 byte <-> unicode alphabet */
static uint32_t byte_to_cp[256];
static int16_t cp_to_byte[324];
static void init_byte_map(void) {
  int n = 0;
  for (int b = 0; b < 256; b++) {
    bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    byte_to_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
  }
  for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
  for (int b = 0; b < 256; b++) cp_to_byte[byte_to_cp[b]] = (int16_t)b;
}

void llm_tokenizer_destroy(llm_tokenizer *t) {
  if (!t) return;
  free(t->ttype);
  free(t->pieces);
  free(t->piece_off);
  free(t->vocab.e);
  free(t->merges.e);
  free(t->special);
  free(t->score);
  free(t->chat_template);
  free(t);
}

static int cmp_special(const void *a, const void *b, void *ctx) {
  const llm_tokenizer *t = ctx;
  uint64_t la = t->text[*(const int32_t *)a].n, lb = t->text[*(const int32_t *)b].n;
  if (la != lb) return la > lb ? -1 : 1;
  return *(const int32_t *)a - *(const int32_t *)b;
}

static cinfer_status *tok_err(llm_tokenizer *t, const char *fmt, const char *arg) {
  llm_tokenizer_destroy(t);
  return cinfer_status_new(CINFER_UNSUPPORTED, fmt, arg);
}

cinfer_status *llm_tokenizer_create(const llm_gguf *g, llm_tokenizer **out) {
  *out = NULL;
  init_byte_map();
  llm_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return cinfer_status_oom("tokenizer");
  llm_gguf_str model = {0}, pre = {0};
  if (!llm_gguf_get_str(g, "tokenizer.ggml.model", &model))
    return tok_err(t, "tokenizer: %s missing", "tokenizer.ggml.model");
  t->spm = model.n == 5 && !memcmp(model.p, "llama", 5);
  if (!t->spm && !(model.n == 4 && !memcmp(model.p, "gpt2", 4))) {
    char m[64];
    snprintf(m, sizeof m, "%.*s", (int)(model.n < 60 ? model.n : 60), model.p);
    return tok_err(t, "tokenizer: tokenizer.ggml.model '%s' not supported (supported: 'gpt2' byte-level BPE, "
                      "'llama' SentencePiece)", m);
  }
  static const char *digit_pre[] = {"smollm", "starcoder", "refact", "codeshell", "exaone",
                                    "minerva", "command-r"};
  /* llama.cpp ignores tokenizer.ggml.pre for SentencePiece */
  if (!t->spm && llm_gguf_get_str(g, "tokenizer.ggml.pre", &pre)) {
    bool ok = pre.n == 4 && !memcmp(pre.p, "gpt2", 4);
    for (size_t i = 0; i < sizeof digit_pre / sizeof *digit_pre; i++)
      if (pre.n == strlen(digit_pre[i]) && !memcmp(pre.p, digit_pre[i], pre.n)) ok = t->split_digits = true;
    if (!ok) {
      char m[64];
      snprintf(m, sizeof m, "%.*s", (int)(pre.n < 60 ? pre.n : 60), pre.p);
      return tok_err(t, "tokenizer: pre-tokenizer '%s' not supported", m);
    }
  }
  const llm_gguf_kv *toks = llm_gguf_find(g, "tokenizer.ggml.tokens");
  if (!toks || toks->type != GGUF_ARRAY || toks->arr_type != GGUF_STRING || toks->arr_n == 0 ||
      toks->arr_n > (1u << 24))
    return tok_err(t, "tokenizer: %s missing or not a string array of 1..2^24 entries", "tokenizer.ggml.tokens");
  t->n_vocab = (int32_t)toks->arr_n;
  t->text = toks->strs;
  t->ttype = malloc((size_t)t->n_vocab);
  t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->piece_off);
  if (!t->ttype || !t->piece_off || !hmap_init(&t->vocab, (size_t)t->n_vocab)) {
    llm_tokenizer_destroy(t);
    return cinfer_status_oom("tokenizer");
  }
  const llm_gguf_kv *tt = llm_gguf_find(g, "tokenizer.ggml.token_type");
  if (tt && (tt->type != GGUF_ARRAY || tt->arr_n != toks->arr_n))
    return tok_err(t, "tokenizer: %s length differs from tokens", "tokenizer.ggml.token_type");
  size_t total = 0;
  for (int32_t i = 0; i < t->n_vocab; i++) {
    int64_t v = TT_NORMAL;
    if (tt && !llm_gguf_arr_int(tt, (uint64_t)i, &v)) v = TT_NORMAL;
    t->ttype[i] = (uint8_t)(v >= 1 && v <= 6 ? v : TT_NORMAL);
    if (t->text[i].n > 1u << 16) return tok_err(t, "tokenizer: token text longer than %s bytes", "65536");
    total += t->text[i].n;
    hmap_put(&t->vocab, t->text[i].p, (uint32_t)t->text[i].n, i);
  }
  /* decoded pieces: normal tokens map GPT-2 alphabet code points back to bytes */
  t->pieces = malloc(total + 1);
  if (!t->pieces) {
    llm_tokenizer_destroy(t);
    return cinfer_status_oom("tokenizer");
  }
  size_t off = 0;
  for (int32_t i = 0; i < t->n_vocab; i++) {
    t->piece_off[i] = (uint32_t)off;
    const uint8_t *s = (const uint8_t *)t->text[i].p;
    size_t n = t->text[i].n;
    if (t->spm) {
      /* as llama.cpp's token_to_piece: normal -> U+2581 unescaped to spaces; byte ->
       * the byte of <0xXX>; unused -> nothing; control/unknown/user-defined -> the text */
      int hi, lo;
      if (t->ttype[i] == TT_NORMAL) {
        for (size_t k = 0; k < n;) {
          if (n - k >= 3 && !memcmp(s + k, "\xE2\x96\x81", 3)) { t->pieces[off++] = ' '; k += 3; }
          else t->pieces[off++] = (char)s[k++];
        }
      } else if (t->ttype[i] == TT_BYTE && n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' &&
                 (hi = hex_digit((unsigned char)(s[3]))) >= 0 && (lo = hex_digit((unsigned char)(s[4]))) >= 0) {
        t->pieces[off++] = (char)(hi << 4 | lo);
      } else if (t->ttype[i] != TT_UNUSED) {
        memcpy(t->pieces + off, s, n);
        off += n;
      }
    } else if (t->ttype[i] == TT_NORMAL || t->ttype[i] == TT_BYTE) {
      for (size_t k = 0; k < n;) {
        uint32_t cp;
        int l = utf8_dec(s + k, n - k, &cp);
        if (!l) { t->pieces[off++] = (char)s[k++]; continue; }
        if (cp < 324 && cp_to_byte[cp] >= 0) t->pieces[off++] = (char)cp_to_byte[cp];
        else { memcpy(t->pieces + off, s + k, (size_t)l); off += (size_t)l; }
        k += (size_t)l;
      }
    } else {
      memcpy(t->pieces + off, s, n);
      off += n;
    }
  }
  t->piece_off[t->n_vocab] = (uint32_t)off;
  uint32_t v;
  t->unk = -1;
  if (t->spm) {
    /* llama.cpp's SentencePiece defaults when the keys are absent */
    t->bos = 1;
    t->eos = 2;
    t->unk = 0;
    t->add_bos = true;
    t->add_space_prefix = true;
  }
  if (llm_gguf_get_u32(g, "tokenizer.ggml.unknown_token_id", &v)) t->unk = (int32_t)v;
  if (t->unk >= t->n_vocab) t->unk = -1;
  for (int b = 0; b < 256; b++) {
    char buf[8];
    int l = utf8_enc(byte_to_cp[b], buf);
    if (t->spm) {
      /* <0xXX>, else the byte itself as a token (llama.cpp's byte_to_token), else <unk> */
      snprintf(buf, sizeof buf, "<0x%02X>", b);
      t->byte_tok[b] = hmap_get(&t->vocab, buf, 6);
      char c = (char)b;
      if (t->byte_tok[b] < 0) t->byte_tok[b] = hmap_get(&t->vocab, &c, 1);
      if (t->byte_tok[b] < 0) t->byte_tok[b] = t->unk;
    } else {
      t->byte_tok[b] = hmap_get(&t->vocab, buf, (size_t)l);
    }
  }
  if (t->spm) {
    /* merge scores; llama.cpp uses 0 for every token when the key is absent */
    const llm_gguf_kv *sc = llm_gguf_find(g, "tokenizer.ggml.scores");
    if (sc && (sc->type != GGUF_ARRAY || sc->arr_type != GGUF_F32 || sc->arr_n != toks->arr_n))
      return tok_err(t, "tokenizer: %s is not an f32 array as long as tokens", "tokenizer.ggml.scores");
    t->score = calloc((size_t)t->n_vocab, sizeof *t->score);
    if (!t->score) {
      llm_tokenizer_destroy(t);
      return cinfer_status_oom("tokenizer");
    }
    if (sc) memcpy(t->score, sc->data, (size_t)t->n_vocab * sizeof *t->score);
  }
  if (!t->spm) {
    const llm_gguf_kv *mg = llm_gguf_find(g, "tokenizer.ggml.merges");
    if (!mg || mg->type != GGUF_ARRAY || mg->arr_type != GGUF_STRING)
      return tok_err(t, "tokenizer: %s missing", "tokenizer.ggml.merges");
    if (!hmap_init(&t->merges, (size_t)mg->arr_n + 1)) {
      llm_tokenizer_destroy(t);
      return cinfer_status_oom("tokenizer");
    }
    for (uint64_t i = 0; i < mg->arr_n && i < INT32_MAX; i++)
      hmap_put(&t->merges, mg->strs[i].p, (uint32_t)(mg->strs[i].n > UINT32_MAX ? 0 : mg->strs[i].n), (int32_t)i);
  }
  /* special tokens (llama.cpp's cache_special_tokens: control, user-defined, unknown) */
  t->special = malloc((size_t)t->n_vocab * sizeof *t->special);
  if (!t->special) {
    llm_tokenizer_destroy(t);
    return cinfer_status_oom("tokenizer");
  }
  for (int32_t i = 0; i < t->n_vocab; i++)
    if ((t->ttype[i] == TT_CONTROL || t->ttype[i] == TT_USER || t->ttype[i] == TT_UNKNOWN) && t->text[i].n > 0)
      t->special[t->n_special++] = i;
  qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, cmp_special, t);
  if (!t->spm) t->bos = t->eos = -1;
  if (llm_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &v)) t->bos = (int32_t)v;
  if (llm_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v)) t->eos = (int32_t)v;
  if (t->bos >= t->n_vocab) t->bos = -1;
  if (t->eos >= t->n_vocab) t->eos = -1;
  t->eot = llm_gguf_get_u32(g, "tokenizer.ggml.eot_token_id", &v) && v < (uint32_t)t->n_vocab ? (int32_t)v : -1;
  if (t->eot < 0) {
    static const char *eots[] = {"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>"};
    for (size_t i = 0; i < 4 && t->eot < 0; i++) {
      int32_t id = hmap_get(&t->vocab, eots[i], strlen(eots[i]));
      if (id >= 0 && t->ttype[id] == TT_CONTROL && id != t->eos) t->eot = id;
    }
  }
  bool b;
  if (llm_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b)) t->add_bos = b;
  if (llm_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b)) t->add_eos = b;
  if (llm_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) && t->spm) t->add_space_prefix = b;
  t->add_bos = t->add_bos && t->bos >= 0;
  t->add_eos = t->add_eos && t->eos >= 0;
  llm_gguf_str ct;
  if (llm_gguf_get_str(g, "tokenizer.chat_template", &ct)) {
    t->chat_template = malloc(ct.n + 1);
    if (t->chat_template) {
      memcpy(t->chat_template, ct.p, ct.n);
      t->chat_template[ct.n] = 0;
    }
  }
  *out = t;
  return NULL;
}

int32_t llm_tokenizer_n_vocab(const llm_tokenizer *t) { return t->n_vocab; }
int32_t llm_tokenizer_bos(const llm_tokenizer *t) { return t->bos; }
int32_t llm_tokenizer_eos(const llm_tokenizer *t) { return t->eos; }
bool llm_tokenizer_add_bos(const llm_tokenizer *t) { return t->add_bos; }
bool llm_tokenizer_add_space_prefix(const llm_tokenizer *t) { return t->add_space_prefix; }
bool llm_tokenizer_is_eog(const llm_tokenizer *t, int32_t id) {
  return id >= 0 && (id == t->eos || id == t->eot);
}
int32_t llm_token_lookup(const llm_tokenizer *t, const char *text, size_t n) {
  return hmap_get(&t->vocab, text, n);
}

const char *llm_token_piece(const llm_tokenizer *t, int32_t id, bool special, size_t *len) {
  if (id < 0 || id >= t->n_vocab || (!special && (t->ttype[id] == TT_CONTROL || t->ttype[id] == TT_UNKNOWN ||
                                                  t->ttype[id] == TT_UNUSED))) {
    *len = 0;
    return "";
  }
  *len = t->piece_off[id + 1] - t->piece_off[id];
  return t->pieces + t->piece_off[id];
}

/* ---- tokenisation ---- */
typedef struct { int32_t *v; size_t n, cap; bool oom; } ivec;
static void ivec_push(ivec *a, int32_t x) {
  if (a->n == a->cap) {
    size_t nc = a->cap ? a->cap * 2 : 64;
    int32_t *nv = realloc(a->v, nc * sizeof *nv);
    if (!nv) { a->oom = true; return; }
    a->v = nv;
    a->cap = nc;
  }
  a->v[a->n++] = x;
}

typedef struct { int32_t left, right, rank, size; } bigram;
typedef struct { uint32_t off, n; int32_t prev, next; } sym;
typedef struct {
  const llm_tokenizer *t;
  char *buf;          /* byte-level encoded word */
  size_t buf_cap;
  sym *syms;
  size_t syms_cap;
  bigram *heap;
  size_t heap_n, heap_cap;
  char *pair;
  size_t pair_cap;
  bool oom;
} bpe_ws;

static bool grow(void **p, size_t *cap, size_t need, size_t el) {
  if (need <= *cap) return true;
  size_t nc = *cap ? *cap : 64;
  while (nc < need) nc *= 2;
  void *np = realloc(*p, nc * el);
  if (!np) return false;
  *p = np;
  *cap = nc;
  return true;
}
static bool bg_less(const bigram *a, const bigram *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}
static void heap_push(bpe_ws *w, bigram b) {
  if (!grow((void **)&w->heap, &w->heap_cap, w->heap_n + 1, sizeof b)) { w->oom = true; return; }
  size_t i = w->heap_n++;
  while (i && bg_less(&b, &w->heap[(i - 1) / 2])) {
    w->heap[i] = w->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  w->heap[i] = b;
}
static bigram heap_pop(bpe_ws *w) {
  bigram top = w->heap[0], last = w->heap[--w->heap_n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= w->heap_n) break;
    if (c + 1 < w->heap_n && bg_less(&w->heap[c + 1], &w->heap[c])) c++;
    if (!bg_less(&w->heap[c], &last)) break;
    w->heap[i] = w->heap[c];
    i = c;
  }
  if (w->heap_n) w->heap[i] = last;
  return top;
}
static void add_bigram(bpe_ws *w, int32_t l, int32_t r) {
  if (l < 0 || r < 0) return;
  sym *a = &w->syms[l], *b = &w->syms[r];
  size_t n = (size_t)a->n + 1 + b->n;
  if (!grow((void **)&w->pair, &w->pair_cap, n, 1)) { w->oom = true; return; }
  memcpy(w->pair, w->buf + a->off, a->n);
  w->pair[a->n] = ' ';
  memcpy(w->pair + a->n + 1, w->buf + b->off, b->n);
  int32_t rank = hmap_get(&w->t->merges, w->pair, n);
  if (rank < 0) return;
  heap_push(w, (bigram){l, r, rank, (int32_t)(a->n + b->n)});
}

/* BPE over one pre-tokenised word (code points cps[0..n)). */
static void bpe_word(bpe_ws *w, const uint8_t *bytes, size_t nb, ivec *out) {
  const llm_tokenizer *t = w->t;
  if (!grow((void **)&w->buf, &w->buf_cap, nb * 2 + 1, 1)) { w->oom = true; return; }
  size_t bl = 0;
  for (size_t i = 0; i < nb; i++) bl += (size_t)utf8_enc(byte_to_cp[bytes[i]], w->buf + bl);
  if (!grow((void **)&w->syms, &w->syms_cap, nb, sizeof(sym))) { w->oom = true; return; }
  int32_t ns = 0;
  for (size_t k = 0; k < bl;) {
    int l = utf8_len((uint8_t)w->buf[k]);
    w->syms[ns] = (sym){(uint32_t)k, (uint32_t)l, ns - 1, ns + 1};
    ns++;
    k += (size_t)l;
  }
  if (ns) w->syms[ns - 1].next = -1;
  w->heap_n = 0;
  for (int32_t i = 1; i < ns; i++) add_bigram(w, i - 1, i);
  while (w->heap_n && !w->oom) {
    bigram b = heap_pop(w);
    sym *l = &w->syms[b.left], *r = &w->syms[b.right];
    if (!l->n || !r->n || (int32_t)(l->n + r->n) != b.size || l->next != b.right) continue;
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0) w->syms[r->next].prev = b.left;
    add_bigram(w, l->prev, b.left);
    add_bigram(w, b.left, l->next);
  }
  for (int32_t i = 0; i != -1 && ns; i = w->syms[i].next) {
    sym *s = &w->syms[i];
    int32_t id = hmap_get(&t->vocab, w->buf + s->off, s->n);
    if (id >= 0) { ivec_push(out, id); continue; }
    for (uint32_t k = 0; k < s->n; k++) {
      int32_t bid = hmap_get(&t->vocab, w->buf + s->off + k, 1);
      if (bid >= 0) ivec_push(out, bid);
    }
  }
}

/* GPT-2 regex split over cps[start..end), as llama.cpp's custom implementation. */
static void gpt2_split(bpe_ws *w, const uint32_t *cps, const uint32_t *boff, const uint8_t *bytes, size_t start,
                       size_t end, ivec *out) {
#define CPT(p) ((p) < end ? cps[p] : 0xFFFFFFFFu)
#define FL(p) ((p) < end ? cp_flags(cps[p]) : 0)
  size_t pos = start, prev = start;
#define EMIT(e)                                                           \
  do {                                                                    \
    size_t e_ = (e);                                                      \
    if (e_ > prev) bpe_word(w, bytes + boff[prev], boff[e_] - boff[prev], out); \
    prev = e_;                                                            \
  } while (0)
  while (pos < end) {
    uint32_t c = cps[pos];
    uint8_t f = FL(pos);
    if (c == '\'' && pos + 1 < end) {
      uint32_t n1 = cps[pos + 1];
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') { pos += 2; EMIT(pos); continue; }
      if (pos + 2 < end) {
        uint32_t n2 = cps[pos + 2];
        if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
          pos += 3;
          EMIT(pos);
          continue;
        }
      }
    }
    uint8_t f2 = c == ' ' ? FL(pos + 1) : f;
    if (f2 & F_LETTER) {
      pos += c == ' ';
      while (FL(pos) & F_LETTER) pos++;
      EMIT(pos);
      continue;
    }
    if (f2 & F_NUMBER) {
      pos += c == ' ';
      while (FL(pos) & F_NUMBER) pos++;
      EMIT(pos);
      continue;
    }
    if (!(f2 & (F_SPACE | F_LETTER | F_NUMBER)) && f2) {
      pos += c == ' ';
      for (;;) {
        uint8_t g = FL(pos);
        if ((g & (F_SPACE | F_LETTER | F_NUMBER)) || !g) break;
        pos++;
      }
      EMIT(pos);
      continue;
    }
    size_t nws = 0;
    while (FL(pos + nws) & F_SPACE) nws++;
    if (nws > 1 && CPT(pos + nws) != 0xFFFFFFFFu) {
      pos += nws - 1;
      EMIT(pos);
      continue;
    }
    if (nws > 0) {
      pos += nws;
      EMIT(pos);
      continue;
    }
    pos++;
    EMIT(pos);
  }
#undef CPT
#undef FL
#undef EMIT
}

static cinfer_status *tokenize_raw(const llm_tokenizer *t, bpe_ws *w, const uint8_t *s, size_t n, size_t base,
                                   ivec *out) {
  uint32_t *cps = malloc((n + 1) * sizeof *cps), *boff = malloc((n + 1) * sizeof *boff);
  if (!cps || !boff) {
    free(cps);
    free(boff);
    return cinfer_status_oom("tokenize");
  }
  size_t nc = 0;
  for (size_t k = 0; k < n;) {
    uint32_t cp;
    int l = utf8_dec(s + k, n - k, &cp);
    if (!l) {
      free(cps);
      free(boff);
      return cinfer_status_new(CINFER_INVALID_ARG, "tokenize: invalid UTF-8 at byte %zu", base + k);
    }
    cps[nc] = cp;
    boff[nc++] = (uint32_t)k;
    k += (size_t)l;
  }
  boff[nc] = (uint32_t)n;
  if (!t->split_digits) {
    gpt2_split(w, cps, boff, s, 0, nc, out);
  } else {
    size_t st = 0;
    for (size_t i = 0; i < nc; i++) {
      if (cp_flags(cps[i]) & F_NUMBER) {
        if (i > st) gpt2_split(w, cps, boff, s, st, i, out);
        gpt2_split(w, cps, boff, s, i, i + 1, out);
        st = i + 1;
      }
    }
    if (nc > st) gpt2_split(w, cps, boff, s, st, nc, out);
  }
  free(cps);
  free(boff);
  return NULL;
}

/* ---- SentencePiece (llama.cpp's llm_tokenizer_spm_session) ---- */
typedef struct { float score; int32_t left, right, size; } spm_bigram;
typedef struct {
  const llm_tokenizer *t;
  char *text;          /* escaped fragment */
  size_t text_cap;
  sym *syms;           /* off/n index text */
  size_t syms_cap;
  spm_bigram *heap;    /* max-heap on (score, then lower left first) */
  size_t heap_n, heap_cap;
  bool oom;
} spm_ws;

static bool spm_before(const spm_bigram *a, const spm_bigram *b) {
  return a->score > b->score || (a->score == b->score && a->left < b->left);
}
static void spm_try_bigram(spm_ws *w, int32_t l, int32_t r) {
  if (l < 0 || r < 0) return;
  const sym *a = &w->syms[l], *b = &w->syms[r];
  size_t n = (size_t)a->n + b->n; /* a and b are adjacent in text */
  int32_t id = hmap_get(&w->t->vocab, w->text + a->off, n);
  if (id < 0) return;
  if (!grow((void **)&w->heap, &w->heap_cap, w->heap_n + 1, sizeof *w->heap)) { w->oom = true; return; }
  spm_bigram bg = {w->t->score[id], l, r, (int32_t)n};
  size_t i = w->heap_n++;
  while (i && spm_before(&bg, &w->heap[(i - 1) / 2])) {
    w->heap[i] = w->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  w->heap[i] = bg;
}
static spm_bigram spm_pop(spm_ws *w) {
  spm_bigram top = w->heap[0], last = w->heap[--w->heap_n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= w->heap_n) break;
    if (c + 1 < w->heap_n && spm_before(&w->heap[c + 1], &w->heap[c])) c++;
    if (!spm_before(&w->heap[c], &last)) break;
    w->heap[i] = w->heap[c];
    i = c;
  }
  if (w->heap_n) w->heap[i] = last;
  return top;
}

/* Tokenises one raw fragment s[0..n) (valid UTF-8): optional leading space, spaces escaped
 * to U+2581, then bigram merging by score. */
static void spm_fragment(spm_ws *w, const uint8_t *s, size_t n, bool prefix, ivec *out) {
  const llm_tokenizer *t = w->t;
  size_t need = (n + 1) * 3; /* every byte a space at worst */
  if (!grow((void **)&w->text, &w->text_cap, need, 1)) { w->oom = true; return; }
  size_t tl = 0;
  if (prefix) { memcpy(w->text, "\xE2\x96\x81", 3); tl = 3; }
  for (size_t i = 0; i < n; i++) {
    if (s[i] == ' ') { memcpy(w->text + tl, "\xE2\x96\x81", 3); tl += 3; }
    else w->text[tl++] = (char)s[i];
  }
  if (!grow((void **)&w->syms, &w->syms_cap, tl + 1, sizeof *w->syms)) { w->oom = true; return; }
  int32_t ns = 0;
  for (size_t k = 0; k < tl;) {
    size_t l = (size_t)utf8_len((uint8_t)w->text[k]);
    if (!l || l > tl - k) l = 1; /* cannot happen on validated input; kept as llama.cpp's min() */
    w->syms[ns] = (sym){(uint32_t)k, (uint32_t)l, ns - 1, k + l == tl ? -1 : ns + 1};
    ns++;
    k += l;
  }
  w->heap_n = 0;
  for (int32_t i = 1; i < ns; i++) spm_try_bigram(w, i - 1, i);
  while (w->heap_n && !w->oom) {
    spm_bigram b = spm_pop(w);
    sym *l = &w->syms[b.left], *r = &w->syms[b.right];
    /* stale: one side already merged elsewhere (sizes only grow, so a size mismatch or an
     * emptied symbol identifies it, as in llama.cpp) */
    if (!l->n || !r->n || (int32_t)(l->n + r->n) != b.size) continue;
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0) w->syms[r->next].prev = b.left;
    spm_try_bigram(w, l->prev, b.left);
    spm_try_bigram(w, b.left, l->next);
  }
  /* every merged symbol is a token by construction; single characters that are not fall
   * back to their bytes (llama.cpp's resegment) */
  for (int32_t i = 0; ns && i != -1; i = w->syms[i].next) {
    const sym *y = &w->syms[i];
    int32_t id = hmap_get(&t->vocab, w->text + y->off, y->n);
    if (id >= 0) { ivec_push(out, id); continue; }
    for (uint32_t k = 0; k < y->n; k++) {
      int32_t bid = t->byte_tok[(uint8_t)w->text[y->off + k]];
      if (bid >= 0) ivec_push(out, bid);
    }
  }
}

static cinfer_status *check_utf8(const uint8_t *s, size_t n, size_t base) {
  for (size_t k = 0; k < n;) {
    uint32_t cp;
    int l = utf8_dec(s + k, n - k, &cp);
    if (!l) return cinfer_status_new(CINFER_INVALID_ARG, "tokenize: invalid UTF-8 at byte %zu", base + k);
    k += (size_t)l;
  }
  return NULL;
}

static cinfer_status *raw_fragment(const llm_tokenizer *t, bpe_ws *w, spm_ws *sw, const uint8_t *s, size_t n,
                                   size_t base, bool *prev_special, ivec *out) {
  if (!t->spm) return tokenize_raw(t, w, s, n, base, out);
  /* escaped text (3 bytes per space, + prefix) must index with uint32 offsets and int32 symbols */
  if (n > INT32_MAX / 3 - 1) return cinfer_status_new(CINFER_INVALID_ARG, "tokenize: text fragment too long");
  cinfer_status *st = check_utf8(s, n, base);
  if (st) return st;
  spm_fragment(sw, s, n, t->add_space_prefix && *prev_special, out);
  *prev_special = false;
  return NULL;
}

cinfer_status *llm_tokenize(const llm_tokenizer *t, const char *text, size_t n, bool add_special,
                            bool parse_special, int32_t **out, size_t *n_out) {
  *out = NULL;
  *n_out = 0;
  if (n > UINT32_MAX / 2) return cinfer_status_new(CINFER_INVALID_ARG, "tokenize: text too long");
  ivec res = {0};
  bpe_ws w = {.t = t};
  spm_ws sw = {.t = t};
  cinfer_status *st = NULL;
  bool prev_special = true; /* SentencePiece: a raw fragment here gets the space prefix */
  if (add_special && t->add_bos) ivec_push(&res, t->bos);
  /* fragments: iterate the text, at each position find the longest special token that
   * starts here among those allowed. Equivalent to llama.cpp's partition for
   * non-overlapping special texts (longest first). */
  size_t raw_start = 0, i = 0;
  const uint8_t *s = (const uint8_t *)text;
  while (i < n && !st) {
    int32_t hit = -1;
    if (s[i] == '<' || s[i] == '[' || t->n_special) {
      for (int32_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->ttype[id] != TT_USER) continue;
        const llm_gguf_str *tx = &t->text[id];
        if (tx->n <= n - i && !memcmp(s + i, tx->p, tx->n)) { hit = id; break; }
      }
    }
    if (hit < 0) { i++; continue; }
    if (i > raw_start) st = raw_fragment(t, &w, &sw, s + raw_start, i - raw_start, raw_start, &prev_special, &res);
    ivec_push(&res, hit);
    prev_special = true;
    i += t->text[hit].n;
    raw_start = i;
  }
  if (!st && n > raw_start) st = raw_fragment(t, &w, &sw, s + raw_start, n - raw_start, raw_start, &prev_special, &res);
  if (!st && add_special && t->add_eos) ivec_push(&res, t->eos);
  if (!st && (w.oom || sw.oom || res.oom)) st = cinfer_status_oom("tokenize");
  free(w.buf);
  free(w.syms);
  free(w.heap);
  free(w.pair);
  free(sw.text);
  free(sw.syms);
  free(sw.heap);
  if (st) {
    free(res.v);
    return st;
  }
  *out = res.v ? res.v : malloc(sizeof(int32_t));
  *n_out = res.n;
  if (!*out) return cinfer_status_oom("tokenize");
  return NULL;
}

/* ---- streaming detokenisation ---- */
/* Length of the longest prefix of b[0..n) that is complete, valid UTF-8, treating invalid
 * bytes as complete (they are replaced); *hold = trailing bytes of an incomplete char. */
static size_t emit_utf8(const uint8_t *b, size_t n, bool final, char *out) {
  size_t o = 0, k = 0;
  while (k < n) {
    uint32_t cp;
    int l = utf8_len(b[k]);
    if (l && (size_t)l > n - k && !final) {
      /* possibly incomplete: check the continuation bytes present so far */
      bool ok = true;
      for (size_t j = k + 1; j < n; j++) ok &= (b[j] & 0xC0) == 0x80;
      if (ok) break;
    }
    int d = utf8_dec(b + k, n - k, &cp);
    if (d) {
      memcpy(out + o, b + k, (size_t)d);
      o += (size_t)d;
      k += (size_t)d;
    } else {
      memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
      k++;
    }
  }
  return o | ((size_t)k << 32);
}

size_t llm_detok_push(const llm_tokenizer *t, llm_detok *st, int32_t id, bool special, char *out, size_t cap) {
  size_t len;
  const char *p = llm_token_piece(t, id, special, &len);
  if (st->lstrip && !st->started && len && p[0] == ' ') { /* llama_detokenize's remove_space */
    p++;
    len--;
  }
  size_t need = ((size_t)st->npend + len) * 3 + 8;
  if (cap < need) return need;
  /* work buffer: pending + piece; output at most 3 bytes per input byte */
  uint8_t stackbuf[512];
  uint8_t *b = (size_t)st->npend + len <= sizeof stackbuf ? stackbuf : malloc((size_t)st->npend + len);
  if (!b) return 0;
  memcpy(b, st->pend, (size_t)st->npend);
  memcpy(b + st->npend, p, len);
  size_t n = (size_t)st->npend + len;
  size_t r = emit_utf8(b, n, false, out);
  size_t o = r & 0xFFFFFFFFu, k = r >> 32;
  st->npend = (int)(n - k);
  memcpy(st->pend, b + k, (size_t)st->npend);
  st->started = true;
  if (b != stackbuf) free(b);
  return o;
}

size_t llm_detok_flush(llm_detok *st, char *out, size_t cap) {
  if (cap < (size_t)st->npend * 3 + 1) return 0;
  size_t r = emit_utf8(st->pend, (size_t)st->npend, true, out);
  st->npend = 0;
  return r & 0xFFFFFFFFu;
}

/* ---- chat templates ---- */

const char *llm_tokenizer_chat_template(const llm_tokenizer *t) { return t->chat_template; }

cinfer_status *llm_chat_render(const llm_tokenizer *t, const char *override, const llm_chat_msg *msgs,
                               size_t n, bool add_generation_prompt, char **out) {
  *out = NULL;
  const char *tpl = override ? override : t->chat_template;
  if (!tpl) return cinfer_status_new(CINFER_UNSUPPORTED, "chat: the model has no chat template; set one (e.g. \"chatml\")");
  bool chatml = !strcmp(tpl, "chatml") || strstr(tpl, "<|im_start|>");
  if (!chatml) {
    char head[48];
    snprintf(head, sizeof head, "%s", tpl);
    return cinfer_status_new(CINFER_UNSUPPORTED,
                             "chat: unknown chat template (starts '%s'); supported: chatml; set an override", head);
  }
  /* SmolLM2-style templates insert a default system message when the first is not one. */
  char *def_sys = NULL;
  const char *marker = "messages[0]['role'] != 'system' %}{{ '<|im_start|>system";
  const char *m = strstr(tpl, marker);
  if (m) {
    m += strlen(marker);
    /* the newline is either a Jinja escape (backslash, n) or a raw newline */
    if (m[0] == '\\' && m[1] == 'n') m += 2;
    else if (m[0] == '\n') m++;
    const char *e = strstr(m, "<|im_end|>");
    if (e) {
      def_sys = strndup(m, (size_t)(e - m));
    }
  }
  cbuf b = {0};
  for (size_t i = 0; i < n; i++) {
    if (!msgs[i].role || !msgs[i].content) {
      free(def_sys);
      cbuf_free(&b);
      return cinfer_status_new(CINFER_INVALID_ARG, "chat: message %zu has no role or content", i);
    }
    if (i == 0 && def_sys && strcmp(msgs[0].role, "system")) {
      cbuf_puts(&b, "<|im_start|>system\n");
      cbuf_puts(&b, def_sys);
      cbuf_puts(&b, "<|im_end|>\n");
    }
    cbuf_puts(&b, "<|im_start|>");
    cbuf_puts(&b, msgs[i].role);
    cbuf_puts(&b, "\n");
    cbuf_puts(&b, msgs[i].content);
    cbuf_puts(&b, "<|im_end|>\n");
  }
  if (add_generation_prompt) cbuf_puts(&b, "<|im_start|>assistant\n");
  free(def_sys);
  if (!(*out = cbuf_take(&b))) return cinfer_status_oom("chat");
  return NULL;
}
