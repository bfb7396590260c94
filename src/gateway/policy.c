/* policy.c: the gateway's pure decision functions (no I/O, clock and RNG passed in): token
 * bucket, balancer choice, smooth weighted round robin, replica health state machine.
 *
 * Health state machine (gw_health):
 *   UNKNOWN --check ok--> HEALTHY            UNKNOWN --check fail--> UNHEALTHY
 *   HEALTHY --unhealthy_threshold consecutive failed checks--> UNHEALTHY
 *   UNHEALTHY --healthy_threshold consecutive passed checks--> HEALTHY
 * Orthogonal to it, passive outlier ejection: eject_consecutive consecutive failed tries
 * eject the replica for min(n * eject_base_ms, eject_max_ms) where n counts ejections; a
 * passed active check after the ejection expired does not reset n, a successful try does
 * reset the failure run. Usable = HEALTHY and not ejected.
 */
#include <math.h>
#include <string.h>

#include "core/hash.h"
#include "gateway/gateway.h"

uint64_t gw_rand(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

gw_bucket_result gw_bucket_take(gw_bucket *b, double rate, double burst, bool nodelay,
                                uint64_t now_ms) {
  gw_bucket_result r = {true, 0, 0};
  double excess = 0;
  if (b->used) {
    double elapsed = now_ms > b->last_ms ? (double)(now_ms - b->last_ms) / 1000.0 : 0;
    excess = b->excess - rate * elapsed + 1;  /* nginx clamps after adding this request */
    if (excess < 0) excess = 0;
  }
  /* The first request of a key (and every request after the bucket emptied) has excess 0
   * in nginx terms: it is within the rate. */
  if (excess > burst + 1e-9) {
    r.admitted = false;
    double wait = (excess - burst) / rate;
    r.retry_after_s = (uint64_t)ceil(wait);
    if (r.retry_after_s < 1) r.retry_after_s = 1;
    return r;
  }
  b->used = true;
  b->excess = excess;
  b->last_ms = now_ms;
  if (!nodelay && excess > 0) r.delay_ms = (uint64_t)ceil(excess / rate * 1000.0);
  return r;
}

static void tokens_refill(gw_tokens *t, double tpm, uint64_t now_ms) {
  if (!t->used) {
    t->used = true;
    t->level = tpm;
    t->last_ms = now_ms;
    return;
  }
  double elapsed = now_ms > t->last_ms ? (double)(now_ms - t->last_ms) / 1000.0 : 0;
  t->level += tpm / 60.0 * elapsed;
  if (t->level > tpm) t->level = tpm;
  t->last_ms = now_ms;
}

uint64_t gw_tokens_admit(gw_tokens *t, double tpm, uint64_t now_ms) {
  tokens_refill(t, tpm, now_ms);
  if (t->level > 0) return 0;
  uint64_t s = (uint64_t)ceil((1e-9 - t->level) / (tpm / 60.0));
  return s < 1 ? 1 : s;
}

void gw_tokens_charge(gw_tokens *t, double tpm, double tokens, uint64_t now_ms) {
  tokens_refill(t, tpm, now_ms);
  t->level -= tokens;
}

void gw_tok_usage_init(gw_tok_usage *u) {
  memset(u, 0, sizeof *u);
  u->total = -1;
}

/* Scans buf[0..n) for the patterns; `from` is where the new bytes start (a match must end
 * at or after it, so a straddling one is counted once). */
static void usage_scan(gw_tok_usage *u, const char *buf, size_t n, size_t from) {
  static const char tt[] = "\"total_tokens\":", ch[] = "\"choices\":[{";
  for (size_t i = 0; i < n; i++) {
    /* setting the total again is harmless, so a match in the tail is taken again (its
     * number may have been cut at the end of the previous piece) */
    if (i + sizeof tt - 1 <= n && !memcmp(buf + i, tt, sizeof tt - 1)) {
      size_t k = i + sizeof tt - 1;
      while (k < n && buf[k] == ' ') k++;
      long long v = 0;
      size_t d = k;
      while (d < n && buf[d] >= '0' && buf[d] <= '9' && v < (1ll << 50)) v = v * 10 + (buf[d++] - '0');
      if (d > k && d < n) u->total = v; /* the number is complete (a byte follows it) */
    }
    if (i + sizeof ch - 1 <= n && !memcmp(buf + i, ch, sizeof ch - 1) && i + sizeof ch - 1 > from) u->chunks++;
  }
}

void gw_tok_usage_feed(gw_tok_usage *u, const char *data, size_t len) {
  char tmp[40 + 4096];
  while (len) {
    size_t k = len < 4096 ? len : 4096;
    memcpy(tmp, u->tail, u->tail_len);
    memcpy(tmp + u->tail_len, data, k);
    size_t n = u->tail_len + k;
    usage_scan(u, tmp, n, u->tail_len);
    /* keep what a pattern and its number may still need; a "total_tokens" whose number was
     * cut is found again from the tail */
    size_t keep = n < sizeof u->tail ? n : sizeof u->tail;
    memcpy(u->tail, tmp + n - keep, keep);
    u->tail_len = keep;
    data += k;
    len -= k;
  }
}

long long gw_tok_usage_tokens(const gw_tok_usage *u) { return u->total >= 0 ? u->total : u->chunks; }

int gw_balance_pick(gw_balancer kind, size_t n, const uint32_t *outstanding,
                    const int *weights, uint64_t *rng, uint64_t *rr_cursor) {
  if (n == 0) return -1;
  if (n == 1) return 0;
  switch (kind) {
    case GW_BAL_ROUND_ROBIN:
      return (int)((*rr_cursor)++ % n);
    case GW_BAL_WEIGHTED: {
      uint64_t total = 0;
      for (size_t i = 0; i < n; i++) total += (uint64_t)(weights && weights[i] > 0 ? weights[i] : 1);
      uint64_t x = gw_rand(rng) % total;
      for (size_t i = 0; i < n; i++) {
        uint64_t w = (uint64_t)(weights && weights[i] > 0 ? weights[i] : 1);
        if (x < w) return (int)i;
        x -= w;
      }
      return (int)(n - 1);
    }
    case GW_BAL_P2C:
    default: {
      size_t a = (size_t)(gw_rand(rng) % n);
      size_t b = (size_t)(gw_rand(rng) % (n - 1));
      if (b >= a) b++;
      uint32_t oa = outstanding[a], ob = outstanding[b];
      /* ties go to the first drawn, itself uniform: sequential traffic still spreads */
      return (int)(ob < oa ? b : a);
    }
  }
}

int gw_swrr_pick(size_t n, const int *weights, long long *current) {
  long long total = 0;
  int best = -1;
  for (size_t i = 0; i < n; i++) {
    if (weights[i] <= 0) continue;
    current[i] += weights[i];
    total += weights[i];
    if (best < 0 || current[i] > current[best]) best = (int)i;
  }
  if (best >= 0) current[best] -= total;
  return best;
}

bool gw_health_check_result(gw_health *h, const gw_health_params *p, bool ok) {
  gw_health_state before = h->state;
  if (ok) {
    h->check_fail_run = 0;
    h->check_ok_run++;
    if (h->state == GW_H_UNKNOWN ||
        (h->state == GW_H_UNHEALTHY && h->check_ok_run >= p->healthy_threshold))
      h->state = GW_H_HEALTHY;
  } else {
    h->check_ok_run = 0;
    h->check_fail_run++;
    if (h->state == GW_H_UNKNOWN ||
        (h->state == GW_H_HEALTHY && h->check_fail_run >= p->unhealthy_threshold))
      h->state = GW_H_UNHEALTHY;
  }
  return h->state != before;
}

bool gw_health_passive(gw_health *h, const gw_health_params *p, bool failure, bool may_eject,
                       uint64_t now_ms) {
  if (!failure) {
    h->passive_fail_run = 0;
    return false;
  }
  h->passive_fail_run++;
  if (p->eject_consecutive <= 0 || h->passive_fail_run < p->eject_consecutive) return false;
  if (h->ejected_until_ms > now_ms || !may_eject) return false;
  h->ejections++;
  long long ms = (long long)h->ejections * p->eject_base_ms;
  if (ms > p->eject_max_ms) ms = p->eject_max_ms;
  h->ejected_until_ms = now_ms + (uint64_t)ms;
  h->passive_fail_run = 0;
  return true;
}

bool gw_health_usable(const gw_health *h, uint64_t now_ms) {
  return h->state == GW_H_HEALTHY && h->ejected_until_ms <= now_ms;
}

uint64_t gw_hash64(const void *data, size_t len) {
  return hash_mix64(hash_bytes(data, len));
}

static uint64_t mix64(uint64_t a, uint64_t b) {
  return hash_mix64(a ^ (b + 0x9E3779B97F4A7C15ULL + (a << 6) + (a >> 2)));
}

int gw_affinity_pick(size_t n, const uint64_t *ids, uint64_t key, const uint32_t *outstanding,
                     double load_factor) {
  if (n == 0) return -1;
  double mean = 0;
  for (size_t i = 0; i < n; i++) mean += outstanding[i];
  mean /= (double)n;
  double bound = load_factor * (mean + 1.0);
  int best = -1;
  uint64_t best_score = 0;
  for (size_t i = 0; i < n; i++) {
    if ((double)outstanding[i] > bound) continue;
    uint64_t s = mix64(key, ids[i]);
    if (best < 0 || s > best_score) {
      best = (int)i;
      best_score = s;
    }
  }
  return best;
}

int gw_kv_pick(size_t n, const gw_kv_load *l, const uint64_t *ids, bool has_key, uint64_t key,
               double kv_weight, double prefix_bonus) {
  if (n == 0) return -1;
  int aff = -1;
  uint64_t aff_score = 0;
  for (size_t i = 0; has_key && i < n; i++) {
    uint64_t s = mix64(key, ids[i]);
    if (aff < 0 || s > aff_score) {
      aff = (int)i;
      aff_score = s;
    }
  }
  int best = -1;
  double best_cost = 0;
  uint64_t best_rank = 0;
  for (size_t i = 0; i < n; i++) {
    double load = (double)l[i].outstanding;
    if (l[i].known) {
      double m = l[i].running + 2.0 * l[i].waiting + l[i].pending;
      if (m > load) load = m;
    }
    /* KV pressure, not KV use: the running sequences' blocks are in `load` already (counted
     * again, two sequences of a long prompt outweighed the prefix bonus and sent the family to
     * a cold replica); up to half full the cache has room, from there to full it adds up to
     * kv_weight */
    double kv = l[i].known && l[i].kv_usage > 0.5 ? kv_weight * (2.0 * l[i].kv_usage - 1.0) : 0.0;
    double cost = load + kv;
    if ((int)i == aff) cost -= prefix_bonus;
    uint64_t rank = mix64(has_key ? key : 0, ids[i]);
    if (best < 0 || cost < best_cost - 1e-9 || (cost < best_cost + 1e-9 && rank > best_rank)) {
      best = (int)i;
      best_cost = cost;
      best_rank = rank;
    }
  }
  return best;
}
