/* route.c: the replica choice shared by the HTTP (proxy.c) and gRPC (grpc_proxy.c) request
 * paths: which replicas a request may go to (model, version, group, gRPC port, not tried
 * yet, usable), and whether it may retry on another one (the retry budget).
 *
 * The candidate list holds every replica of the table (GW_MAX_REPLICAS): its arrays are a
 * loop's scratch (gw_scratch, allocated once when the loop starts), so a request reaches
 * every replica and the choice under g->mu stays allocation-free (internal.h, invariant 1).
 */
#include <stdlib.h>
#include <string.h>

#include "gateway/internal.h"

gw_scratch *gw_scratch_new(void) {
  gw_scratch *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->cand = calloc(GW_MAX_REPLICAS, sizeof *s->cand);
  s->out = calloc(GW_MAX_REPLICAS, sizeof *s->out);
  s->w = calloc(GW_MAX_REPLICAS, sizeof *s->w);
  s->ids = calloc(GW_MAX_REPLICAS, sizeof *s->ids);
  s->loads = calloc(GW_MAX_REPLICAS, sizeof *s->loads);
  if (!s->cand || !s->out || !s->w || !s->ids || !s->loads) {
    gw_scratch_free(s);
    return NULL;
  }
  return s;
}

void gw_scratch_free(gw_scratch *s) {
  if (!s) return;
  free(s->cand);
  free(s->out);
  free(s->w);
  free(s->ids);
  free(s->loads);
  free(s);
}

bool gw_pick_tried(const gw_pick *p, const gw_replica *r) {
  for (int i = 0; i < p->n_tries; i++)
    if (p->tried[i] == r) return true;
  return false;
}

size_t gw_candidates(gateway *g, const gw_pick *p, uint64_t now, gw_replica **cand,
                     bool *listed) {
  size_t n = 0;
  *listed = false;
  bool by_model = p->model && p->model[0];
  for (size_t i = 0; i < g->n_reps; i++) {
    gw_replica *r = g->reps[i];
    if (!r->sources || (p->grpc && !r->grpc_port)) continue;
    if (by_model && !gw_replica_has_model(r, p->model, p->version)) continue;
    *listed = true;
    if (p->group && p->group[0] && strcmp(p->group, r->group)) continue;
    if (!gw_replica_usable(r, now) || gw_pick_tried(p, r)) continue;
    if (!cand) return 1;
    cand[n++] = r;
  }
  return n;
}

bool gw_retry_allowed(gateway *g, gw_pick *p, uint64_t now, uint64_t deadline_ms) {
  if (g->cfg.retries <= 0 || p->n_tries >= 1 + g->cfg.retries) return false;
  if (p->n_tries >= (int)(sizeof p->tried / sizeof p->tried[0])) return false;
  if (now >= deadline_ms) return false;
  if (!p->holds_retry) {
    long long active = atomic_load(&g->active);
    long long budget = (long long)(g->cfg.retry_budget_ratio * (double)active);
    if (budget < g->cfg.retry_budget_min) budget = g->cfg.retry_budget_min;
    if (atomic_fetch_add(&g->retries_active, 1) >= budget) {
      atomic_fetch_sub(&g->retries_active, 1);
      return false;
    }
    p->holds_retry = true;  /* returned by the request's end (retries_active) */
  }
  bool listed;
  pthread_mutex_lock(&g->mu);
  size_t n = gw_candidates(g, p, now, NULL, &listed);
  pthread_mutex_unlock(&g->mu);
  return n > 0;
}
