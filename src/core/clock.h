/* clock.h: the process's one set of clocks. Every subsystem (server, frontends, engines,
 * gateway, bench) reads time through these, so a test or a profile sees one time base:
 *   clock_now_ns / clock_now_ms / clock_now_s  CLOCK_MONOTONIC: durations, deadlines
 *   clock_unix_ms                              CLOCK_REALTIME: timestamps shown to users
 *   clock_cpu_ns                               CLOCK_PROCESS_CPUTIME_ID: CPU used, all threads
 *   clock_abs_after_ms                         CLOCK_REALTIME + ms as pthread_cond_timedwait
 *                                              wants it (condition variables default to it) */
#ifndef CINFER_CORE_CLOCK_H
#define CINFER_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_ns_of_(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t clock_now_ns(void) { return clock_ns_of_(CLOCK_MONOTONIC); }
static inline uint64_t clock_now_ms(void) { return clock_now_ns() / 1000000ull; }
static inline double clock_now_s(void) { return (double)clock_now_ns() * 1e-9; }
static inline uint64_t clock_unix_ms(void) { return clock_ns_of_(CLOCK_REALTIME) / 1000000ull; }
static inline uint64_t clock_cpu_ns(void) { return clock_ns_of_(CLOCK_PROCESS_CPUTIME_ID); }

static inline struct timespec clock_abs_after_ms(uint64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t ns = (uint64_t)ts.tv_nsec + (ms % 1000u) * 1000000ull;
  ts.tv_sec += (time_t)(ms / 1000u + ns / 1000000000ull);
  ts.tv_nsec = (long)(ns % 1000000000ull);
  return ts;
}

#endif
