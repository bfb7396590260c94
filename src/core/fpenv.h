/* fpenv.h: subnormal floats flushed to zero on the calling thread, the way ONNX Runtime's
 * session.set_denormal_as_zero and TensorFlow's default run: x86 MXCSR FTZ (a result below
 * FLT_MIN becomes 0) and DAZ (a subnormal operand reads as 0), AArch64 FPCR.FZ (both).
 * On x86 every operation that makes or reads a subnormal takes a microcode assist of
 * ~100+ cycles; trained models make them in their activations (MobileFaceNet ran 2.6x
 * slower on an Intel host without the flush, docs/benchmarks-onnx.md "Session 14"). A
 * subnormal is below 1.2e-38: flushing it changes no result a model's user can see.
 *
 *   fpenv_state old = fpenv_flush_begin();   ... kernels ...   fpenv_restore(old);
 *
 * The state is per thread: the caller's own mode is restored after each inference, and a
 * thread that only runs kernels (a pool worker) sets it once. Elsewhere a no-op. */
#ifndef CINFER_CORE_FPENV_H
#define CINFER_CORE_FPENV_H

#include <stdint.h>

typedef uint64_t fpenv_state;

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FPENV_FLUSH_BITS 0x8040u /* FTZ (bit 15) | DAZ (bit 6) */
static inline fpenv_state fpenv_get(void) { return _mm_getcsr(); }
static inline void fpenv_set(fpenv_state s) { _mm_setcsr((unsigned)s); }
#elif defined(__aarch64__)
#define FPENV_FLUSH_BITS (1ull << 24) /* FPCR.FZ */
static inline fpenv_state fpenv_get(void) {
  uint64_t v;
  __asm__ volatile("mrs %0, fpcr" : "=r"(v));
  return v;
}
static inline void fpenv_set(fpenv_state s) { __asm__ volatile("msr fpcr, %0" : : "r"(s)); }
#else
#define FPENV_FLUSH_BITS 0u
static inline fpenv_state fpenv_get(void) { return 0; }
static inline void fpenv_set(fpenv_state s) { (void)s; }
#endif

/* turns the flush on; returns the mode to restore */
static inline fpenv_state fpenv_flush_begin(void) {
  fpenv_state old = fpenv_get();
  if ((old & FPENV_FLUSH_BITS) != FPENV_FLUSH_BITS) fpenv_set(old | FPENV_FLUSH_BITS);
  return old;
}

static inline void fpenv_restore(fpenv_state old) {
  if (fpenv_get() != old) fpenv_set(old);
}

#endif
