/* kern_winograd.c: the "winograd" family: Winograd F(2x2, 3x3) for 3x3 stride-1 undilated
 * ungrouped convolutions with blocked input and output in the plan's block (kern_block():
 * nChw8c, or nChw16c on an AVX-512 host; every consumer reads blocked), C and M multiples
 * of the block, C >= 16, no fused Add (CINFER_ONNX_NO_WINO, CINFER_ONNX_PLAIN:
 * off). Each 2x2 block of output pixels (a tile) comes from the
 * 4x4 input patch around it: V = B' d B per input channel, P = sum over input channels
 * of U . V per output channel (U = G g G', the weights transformed once at load, in
 * double), and Y = A' P A: 16 multiply-adds per channel pair and tile instead of 36.
 * Tiles go in chunks of WINO_T (the transformed inputs and products of a chunk stay in the
 * L1/L2 caches); each of the 16 products is a GEMM [tiles x C] . [C x M] run by a 3-tile x
 * 32-channel register kernel (on an AVX-512 build with nChw16c, 6 tiles x 32 channels in
 * 16-lane vectors: wino_gemm16, bit-identical). The sums are in another order than the direct convolution
 * and the transforms add a few roundings (test_winograd: within 1e-5 of the reference on
 * unit-scale data; the six vision models still pass their test sets at rtol 1e-4 / atol
 * 1e-5). ONNX Runtime's MLAS has no Winograd on CPU; oneDNN 2.6 has it for AVX-512 only.
 * DenseNet's 3x3 128->32 conv at 56x56, alone between two 1x1 convs: 1.72 ms against
 * oneDNN's direct 3.26 ms (1 thread), 0.90 against 1.79 (2 threads).
 * Invariants: k->U holds the transformed weights, then bias [M] and PRelu
 * slopes [M]; per-thread scratch in temp[0] (wino_temp_per_thread each); run allocates
 * nothing. */

#include "backends/onnx/kern_util.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define WINO16 1
typedef float v16f __attribute__((vector_size(64)));
typedef float v16fu __attribute__((vector_size(64), aligned(4)));
#else
#define WINO16 0
#endif

typedef struct {
  fast_kernel base;
  conv_geom g;
  float *U; /* [16][M/32][C][32] transformed weights, bias [M], PRelu slopes [M] */
  int64_t blk; /* the layout's block: 8 (nChw8c) or 16 (nChw16c); the transforms work on 8-channel vectors */
  bool w16;    /* blk 16 on an AVX-512 build: the 16 GEMMs run 16-lane (wino_gemm16) */
} wino_kernel;
#define WINO_T 24
/* floats between two of the 16 planes of a chunk's V (n = C) or products (n = M): one
 * cache line more than the data, so that the 16 values of one tile do not all fall in the
 * same L1 set (C = 128: planes 12 KiB apart, a multiple of 4 KiB) */
#define WINO_VS(n) (WINO_T * (n) + 16)
/* U (16 C x M floats) larger than half this core's L2 */
#define WINO_BIG_U(C, M) ((C) * (M) * 64 > (512 << 10))

static bool wino_can_take(const onnx_plan *p, const plan_step *s, bool keep) {
  if (!kern_conv_eligible(p, s)) return false;
  const ot *x = s->in[0], *w = s->in[1];
  if (!keep || getenv("CINFER_ONNX_NO_WINO") || getenv("CINFER_ONNX_PLAIN") || s->sum_id >= 0 || s->dw.w ||
      x->ndim != 4 || w->ndim != 4 || attr_i(s->node, "group", 1) != 1 || w->dims[2] != 3 || w->dims[3] != 3 ||
      x->dims[1] % kern_block() || w->dims[0] % kern_block() || x->dims[1] < 16 || (s->has_fused && s->fused.sum) ||
      !p->layout[s->in_id[0]])
    return false;
  conv_geom g;
  if (!kern_geom(s->node, x, w->dims + 2, false, &g)) return false;
  if (g.stride[0] != 1 || g.stride[1] != 1 || g.dil[0] != 1 || g.dil[1] != 1) return false;
  /* Every chunk reads all of U (64 C M bytes). Beyond the L2 that needs chunks of >= 12
   * tiles, and then too few tiles for every thread leave oneDNN faster (512 -> 512 at 7x7
   * on 2 threads: 5.3 against 2.5 ms; at 1 thread 4.0 against 4.3) */
  int64_t ntiles = g.N * ((g.out[0] + 1) / 2) * ((g.out[1] + 1) / 2);
  if (WINO_BIG_U(x->dims[1], w->dims[0]) && p->threads > 1 && ntiles < 12 * (int64_t)p->threads) return false;
  /* U takes 16/9 of the weights' memory: above 64 MiB (C x M > 2^20) keep oneDNN's copy */
  if (x->dims[1] * w->dims[0] > ((int64_t)1 << 20)) return false;
  /* With AVX-512 (nChw16c) oneDNN's direct conv runs 16 lanes; so do this kernel's GEMMs
   * (wino_gemm16), its transforms 8. Measured per node against oneDNN on a
   * Sapphire-Rapids-class guest (docs/benchmarks-onnx.md, "Sessions 14-16"), winograd /
   * oneDNN at 1 and 2 threads: M = 16 from C = 16 lost 1.1-2.2x (RetinaFace's 16 -> 16
   * context convs, SSR-Net's Tanh stream; half of the register kernel's 32 channels are
   * padding and the transforms weigh as much as the GEMM), from C = 64 won 0.91 / 0.51
   * (oneDNN cannot split it: conv_row_slices needs one input block); M = 32 won from 8x8
   * outputs up (0.58-0.92 at 8x8, 32x32, 28x28, 56x56, 80x80; 14x14 and 16x16 0.84-0.92
   * at 1 thread, 1.07-1.16 at 2) and lost at DenseNet's 7x7 (1.2-1.3: 16 tiles for 49
   * pixels). With AVX2 it wins or ties in every one of those nodes. Per image: a row of a
   * batch takes the kernel of the row alone. */
  int64_t M = w->dims[0], C = x->dims[1];
  if (kern_block() == 16 && ((M % 32 && C <= 16) || g.out[0] * g.out[1] < 64)) return false;
  return kern_is_blocked(p->layout[s->in_id[0]], x, kern_block());
}

/* per-thread scratch: the chunk's transformed inputs [16][WINO_T][C] and products [16][WINO_T][M] */
static size_t wino_temp_per_thread(int64_t C, int64_t M) {
  return ((size_t)(16 * (WINO_VS(C) + WINO_VS(M))) * sizeof(float) + 63) & ~(size_t)63;
}

static cinfer_status *wino_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **out) {
  (void)keep;
  const ot *w = s->in[1], *b = s->n_in > 2 ? s->in[2] : NULL;
  int64_t M = w->dims[0], C = w->dims[1];
  wino_kernel *k = calloc(1, sizeof *k);
  if (!k) return kern_oom();
  cinfer_status *st = conv_geom_make(s->node, s->in[0], w->dims + 2, false, &k->g);
  if (st) { free(k); return st; }
  /* U [16][M/32][C][32] (the last group of 32 output channels zero-padded): the GEMM's
   * pass over one group reads C x 32 contiguous floats (as [C][M] its rows were M floats
   * apart, 2 KiB at M = 512, and fell in a few L1 sets); then bias [M] and PRelu slopes [M] */
  int64_t MG = (M + 31) / 32;
  size_t n = (size_t)(16 * MG * 32 * C + 2 * M);
  float *U = kern_alloc64(n * sizeof(float));
  k->blk = kern_block();
  k->w16 = WINO16 && k->blk == 16 && M % 16 == 0 && !getenv("CINFER_ONNX_NO_WINO16");
  if (!U || !kern_out_blocked(p, s, M, (int)k->blk)) {
    free(U);
    free(k);
    return kern_oom();
  }
  memset(U, 0, n * sizeof(float));
  const float *W = w->data;
  for (int64_t m = 0; m < M; m++)
    for (int64_t c = 0; c < C; c++) {
      const float *g = W + (m * C + c) * 9;
      double t[4][3], u[4][4];
      for (int j = 0; j < 3; j++) { /* G g */
        t[0][j] = g[j];
        t[1][j] = 0.5 * ((double)g[j] + g[3 + j] + g[6 + j]);
        t[2][j] = 0.5 * ((double)g[j] - g[3 + j] + g[6 + j]);
        t[3][j] = g[6 + j];
      }
      for (int i = 0; i < 4; i++) { /* (G g) G' */
        u[i][0] = t[i][0];
        u[i][1] = 0.5 * (t[i][0] + t[i][1] + t[i][2]);
        u[i][2] = 0.5 * (t[i][0] - t[i][1] + t[i][2]);
        u[i][3] = t[i][2];
      }
      for (int e = 0; e < 16; e++) U[(((size_t)e * MG + m / 32) * C + c) * 32 + m % 32] = (float)u[e / 4][e % 4];
    }
  for (int64_t m = 0; m < M; m++) {
    U[16 * MG * 32 * C + m] = b ? ((const float *)b->data)[m] : 0.0f;
    U[16 * MG * 32 * C + M + m] = kern_prelu_slope(s, m);
  }
  k->U = U;
  s->temp_bytes[0] = (size_t)p->threads * wino_temp_per_thread(C, M);
  *out = &k->base;
  return NULL;
}

/* products of TJ tiles (rows of V, C apart) and NB*8 output channels (rows of U, 32 apart),
 * into rows of P (M apart) */
static inline __attribute__((always_inline)) void wino_mm(int NB, int TJ, const float *U, int64_t M, const float *V,
                                                          int64_t C, float *P) {
  v8f acc[3][4];
  for (int j = 0; j < TJ; j++)
    for (int q = 0; q < NB; q++) acc[j][q] = (v8f){0};
  for (int64_t c = 0; c < C; c++) {
    v8f bc[3];
    for (int j = 0; j < TJ; j++) bc[j] = v8_splat(V[j * C + c]);
    for (int q = 0; q < NB; q++) {
      v8f u = *(const v8f *)(U + c * 32 + q * 8);
      /* one load per weight vector: GCC would fold it into each of the TJ FMAs (TJ loads) */
#if defined(__AVX__)
      __asm__("" : "+x"(u));
#endif
      for (int j = 0; j < TJ; j++) acc[j][q] = v8_fma(bc[j], u, acc[j][q]);
    }
  }
  for (int j = 0; j < TJ; j++)
    for (int q = 0; q < NB; q++) *(v8f *)(P + j * M + q * 8) = acc[j][q];
}

#if WINO16
/* wino_mm with 16-lane vectors: TJ <= 6 tiles x NB (1 or 2) 16-channel halves of a
 * 32-channel group of U, 12 accumulators. Each lane's sum is the same FMA chain over c as
 * in wino_mm, so the products are bit-identical to the 8-lane path's */
static inline __attribute__((always_inline)) void wino_mm16(int NB, int TJ, const float *U, int64_t M, const float *V,
                                                            int64_t C, float *P) {
  v16f acc[6][2];
  for (int j = 0; j < TJ; j++)
    for (int q = 0; q < NB; q++) acc[j][q] = (v16f){0};
  for (int64_t c = 0; c < C; c++) {
    v16f u[2];
    for (int q = 0; q < NB; q++) u[q] = *(const v16fu *)(U + c * 32 + q * 16);
    for (int j = 0; j < TJ; j++) {
      __m512 b = _mm512_set1_ps(V[j * C + c]);
      for (int q = 0; q < NB; q++) acc[j][q] = (v16f)_mm512_fmadd_ps(b, (__m512)u[q], (__m512)acc[j][q]);
    }
  }
  for (int j = 0; j < TJ; j++)
    for (int q = 0; q < NB; q++) *(v16fu *)(P + j * M + q * 16) = acc[j][q];
}

static void wino_gemm16(const float *U, int64_t M, const float *V, int64_t C, float *P, int64_t T) {
  for (int64_t m = 0; m < M; m += 32) {
    int NB = M - m < 32 ? 1 : 2; /* M is a multiple of 16 here (the nChw16c block) */
    for (int64_t t = 0; t < T; t += 6) {
      int TJ = T - t < 6 ? (int)(T - t) : 6;
      const float *u = U + m * C;
      const float *v = V + t * C;
      float *o = P + t * M + m;
#define WMM16(nb, tj) \
  case nb * 8 + tj: wino_mm16(nb, tj, u, M, v, C, o); break;
      switch (NB * 8 + TJ) {
        WMM16(1, 1) WMM16(1, 2) WMM16(1, 3) WMM16(1, 4) WMM16(1, 5) WMM16(1, 6)
        WMM16(2, 1) WMM16(2, 2) WMM16(2, 3) WMM16(2, 4) WMM16(2, 5) WMM16(2, 6)
      }
#undef WMM16
    }
  }
}
#endif

/* output channels outer: a pass over the tiles reads one C x 32 group of U (32 KiB at
 * C = 256), where tiles outer re-read the whole C x M plane per 3 tiles (1 MiB at 512 x 512) */
static void wino_gemm(const float *U, int64_t M, const float *V, int64_t C, float *P, int64_t T) {
  for (int64_t m = 0; m < M; m += 32) {
    int NB = M - m < 32 ? (int)(M - m) / 8 : 4;
    for (int64_t t = 0; t < T; t += 3) {
      int TJ = T - t < 3 ? (int)(T - t) : 3;
      const float *u = U + m * C;
      const float *v = V + t * C;
      float *o = P + t * M + m;
#define WMM(nb, tj) \
  case nb * 4 + tj: wino_mm(nb, tj, u, M, v, C, o); break;
      switch (NB * 4 + TJ) {
        WMM(1, 1) WMM(1, 2) WMM(1, 3) WMM(2, 1) WMM(2, 2) WMM(2, 3)
        WMM(3, 1) WMM(3, 2) WMM(3, 3) WMM(4, 1) WMM(4, 2) WMM(4, 3)
      }
#undef WMM
    }
  }
}

/* V = B' d B for one 4x4 patch of 8 channels (rows rs floats apart, pixels ps apart):
 * within each row (d0 - d2, d1 + d2, d2 - d1, d1 - d3), then the same across rows; V[e]
 * at v + e * es */
static inline void wino_in(const float *x, int64_t rs, int64_t ps, float *v, size_t es) {
  v8f c[4][4];
  for (int i = 0; i < 4; i++) {
    const float *r = x + i * rs;
    v8f d0 = *(const v8fu *)r, d1 = *(const v8fu *)(r + ps), d2 = *(const v8fu *)(r + 2 * ps),
        d3 = *(const v8fu *)(r + 3 * ps);
    c[i][0] = d0 - d2;
    c[i][1] = d1 + d2;
    c[i][2] = d2 - d1;
    c[i][3] = d1 - d3;
  }
  for (int j = 0; j < 4; j++) {
    *(v8f *)(v + (size_t)j * es) = c[0][j] - c[2][j];
    *(v8f *)(v + (size_t)(4 + j) * es) = c[1][j] + c[2][j];
    *(v8f *)(v + (size_t)(8 + j) * es) = c[2][j] - c[1][j];
    *(v8f *)(v + (size_t)(12 + j) * es) = c[1][j] - c[3][j];
  }
}

static void wino_chunks(const fast_kernel *fk, const plan_step *s, int threads, int64_t c0, int64_t c1, int tid) {
  const wino_kernel *k = (const wino_kernel *)fk;
  const conv_geom *g = &k->g;
  int64_t C = g->C, M = s->in[1]->dims[0], IH = g->in[0], IW = g->in[1], OH = g->out[0], OW = g->out[1];
  int64_t TH = (OH + 1) / 2, TW = (OW + 1) / 2, ntiles = g->N * TH * TW, CT = WINO_T;
  if (threads > 1) { /* at least two chunks per thread (a 7x7 image has 16 tiles) */
    int64_t want = (ntiles + 2 * threads - 1) / (2 * threads);
    want = (want + 2) / 3 * 3;
    if (WINO_BIG_U(C, M) && want < 12) want = 12; /* each chunk streams U: see wino_can_take */
    if (want < CT) CT = want;
  }
  int64_t pt = g->pb[0], pl = g->pb[1];
  size_t UE = (size_t)((M + 31) / 32 * 32 * C); /* floats per plane of U */
  const float *X = s->in[0]->data, *U = k->U, *bias = U + 16 * UE, *slope = bias + M;
  float *Y = s->out[0]->data;
  const onnx_fused *f = s->has_fused && s->fused.act != ACT_NONE ? &s->fused : NULL;
  size_t per = wino_temp_per_thread(C, M);
  void (*gemm)(const float *, int64_t, const float *, int64_t, float *, int64_t) = wino_gemm;
#if WINO16
  if (k->w16) gemm = wino_gemm16; /* bit-identical, 16 lanes */
#endif
  /* 8-channel vector q of a B-block layout: block q / (B / 8), lanes (q % (B / 8)) * 8;
   * pixels B floats apart */
  const int64_t B = k->blk, R = B / 8;
  {
    float *V = (float *)((char *)s->temp[0] + per * (size_t)tid), *P = V + 16 * WINO_VS(C);
    for (int64_t ch = c0; ch < c1; ch++) {
      int64_t t0 = ch * CT, T = ntiles - t0 < CT ? ntiles - t0 : CT;
      for (int64_t tl = 0; tl < T; tl++) { /* V = B' d B */
        int64_t t = t0 + tl, n = t / (TH * TW), th = t / TW % TH, tw = t % TW;
        int64_t ih0 = 2 * th - pt, iw0 = 2 * tw - pl;
        bool inside = ih0 >= 0 && ih0 + 4 <= IH && iw0 >= 0 && iw0 + 4 <= IW;
        for (int64_t cb = 0; cb < C / 8; cb++) {
          const float *xc = X + (size_t)((n * (C / B) + cb / R) * IH * IW) * (size_t)B + (size_t)(cb % R) * 8;
          float *v = V + tl * C + cb * 8;
          if (inside) {
            wino_in(xc + (size_t)(ih0 * IW + iw0) * (size_t)B, IW * B, B, v, (size_t)WINO_VS(C));
            continue;
          }
          float d[16 * 8] __attribute__((aligned(32))); /* the patch, zeros outside the image */
          for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
              int64_t ih = ih0 + i, iw = iw0 + j;
              v8f e = ih >= 0 && ih < IH && iw >= 0 && iw < IW ? *(const v8fu *)(xc + (size_t)(ih * IW + iw) * (size_t)B)
                                                                : (v8f){0};
              *(v8f *)(d + (i * 4 + j) * 8) = e;
            }
          wino_in(d, 32, 8, v, (size_t)WINO_VS(C));
        }
      }
      for (int e = 0; e < 16; e++)
        gemm(U + (size_t)e * UE, M, V + (size_t)e * WINO_VS(C), C, P + (size_t)e * WINO_VS(M), T);
      for (int64_t tl = 0; tl < T; tl++) { /* Y = A' P A, + bias, activation */
        int64_t t = t0 + tl, n = t / (TH * TW), oh = 2 * (t / TW % TH), ow = 2 * (t % TW);
        for (int64_t mb = 0; mb < M / 8; mb++) {
          const float *pp = P + tl * M + mb * 8;
          v8f q[4][4];
          for (int e = 0; e < 16; e++) q[e / 4][e % 4] = *(const v8f *)(pp + (size_t)e * WINO_VS(M));
          v8f a[2][4], y[2][2];
          for (int j = 0; j < 4; j++) {
            a[0][j] = q[0][j] + q[1][j] + q[2][j];
            a[1][j] = q[1][j] - q[2][j] - q[3][j];
          }
          v8f bv = *(const v8f *)(bias + mb * 8);
          for (int i = 0; i < 2; i++) {
            y[i][0] = a[i][0] + a[i][1] + a[i][2] + bv;
            y[i][1] = a[i][1] - a[i][2] - a[i][3] + bv;
          }
          float *yc = Y + (size_t)((n * (M / B) + mb / R) * OH * OW) * (size_t)B + (size_t)(mb % R) * 8;
          for (int i = 0; i < 2 && oh + i < OH; i++)
            for (int j = 0; j < 2 && ow + j < OW; j++) {
              v8f v = f ? v8_act(y[i][j], f, slope + mb * 8) : y[i][j];
              *(v8fu *)(yc + (size_t)((oh + i) * OW + ow + j) * (size_t)B) = v;
            }
        }
      }
    }
  }
}

typedef struct {
  const fast_kernel *fk;
  const plan_step *s;
  int threads;
} wch_ctx;

static void wino_chunk(void *vc, int64_t c, int tid) {
  const wch_ctx *x = vc;
  wino_chunks(x->fk, x->s, x->threads, c, c + 1, tid);
}

/* chunks of CT tiles (wino_chunks computes CT from the same thread count) */
static cinfer_status *wino_run(fast_kernel *fk, plan_step *s, int threads) {
  const conv_geom *g = &((const wino_kernel *)fk)->g;
  int64_t ntiles = g->N * ((g->out[0] + 1) / 2) * ((g->out[1] + 1) / 2);
  int64_t C = g->C, M = s->in[1]->dims[0];
  threads = opool_cur_threads() < threads ? opool_cur_threads() : threads;
  /* 16 x C x M multiply-adds per tile (and a fused tanh's cost per output) below twice
   * the split threshold: one thread */
  if ((double)ntiles * 16.0 * (double)(C * M) + plan_step_act_cost(s) < 2 * OPOOL_MIN_MACS) threads = 1;
  int64_t CT = WINO_T;
  if (threads > 1) { /* the same rule as wino_chunks */
    int64_t want = (ntiles + 2 * threads - 1) / (2 * threads);
    want = (want + 2) / 3 * 3;
    if (WINO_BIG_U(C, M) && want < 12) want = 12;
    if (want < CT) CT = want;
  }
  wch_ctx x = {fk, s, threads};
  if (threads > 1) opool_par((ntiles + CT - 1) / CT, wino_chunk, &x);
  else wino_chunks(fk, s, 1, 0, (ntiles + CT - 1) / CT, 0);
  return NULL;
}

static void wino_destroy(fast_kernel *fk) {
  wino_kernel *k = (wino_kernel *)fk;
  free(k->U);
  free(k);
}

const kern_family kern_winograd = {
    .name = "winograd", .can_take = wino_can_take, .prepare = wino_prepare, .run = wino_run, .destroy = wino_destroy};
