/* The process's leases (lease.c), for tier.c: the thread that keeps them and what
 * each worker's thread calls around its run. */
#ifndef TC_TIER_LEASE_PRIVATE_H
#define TC_TIER_LEASE_PRIVATE_H

#include "tier/lease.h"
#include "tier/tier_private.h"

/* The leases of the workers in which (TIER_RUN_* bits), for a process named by
 * claim (host-unique: "127.0.0.1:27017", the proxy's listen address; NULL for a
 * worker process). context is borrowed. Free with tier_leases_destroy() once
 * tier_leases_run has returned. */
tier_leases_t *tier_leases_new(tier_context_t *context, unsigned which, const char *claim);
void tier_leases_destroy(tier_leases_t *leases);

/* The thread that reads, takes, renews and (at the group's stop) releases them
 * (argument: the tier_leases_t). */
void tier_leases_run(tier_group_t *group, void *argument);

/* Waits until this process holds worker's lease: a scope of group that stops when
 * the lease is lost, and the lease's term; NULL when group stops first. */
tier_group_t *tier_leases_wait(tier_leases_t *leases, tier_worker_t worker, tier_group_t *group, int64_t *out_term);

/* The worker returned from its scope: forget and free it. */
void tier_leases_end(tier_leases_t *leases, tier_worker_t worker, tier_group_t *scope);

/* Whether the lease of term is still this process's, renewed within half of
 * leaseTimeout: checked right before a write a successor must not see. */
bool tier_leases_still_held(tier_leases_t *leases, tier_worker_t worker, int64_t term);

#endif
