/* Leases: each tier worker (feeder, evictor, warmer) runs in one process at a time
 * among the proxies and worker processes that share a configuration. A lease per
 * worker, not per namespace: the feeder tails one stream for every namespace, and
 * one evictor or warmer per fast tier is what that tier's load wants.
 *
 * A lease is a document in the fast tier, thermocline.leases:
 *   {_id: "feeder", holder: "<host> pid <pid> #<instance>", claim: "<host> <listen>",
 *    term, renewals, renewedAt, timeoutMillis}
 * and, on the feeder's, unappliedSince (the date of its oldest event not yet
 * applied, null when caught up): every process reads the feeder's lag there, so a
 * proxy that does not run the feeder still keeps the archive shared with it
 * (proxy/archive_share.h).
 * The holder renews it every leaseTimeout/4 ($inc renewals, conditional on holder
 * and term). A standby takes it over (term + 1, conditional on the term and
 * renewals it read) once it has seen the document unchanged for leaseTimeout on
 * its own monotonic clock, so no two clocks are compared. A holder whose last
 * successful renewal began more than leaseTimeout/2 ago stops its worker before any
 * standby can take over; one that finds the lease changed stops at once. A clean
 * stop releases the lease (holder "") for an immediate takeover, and a proxy
 * restarted on the same host and listen address (claim) takes its own lease back
 * at once: the old process cannot still be alive, since it held that port. */
#ifndef TC_TIER_LEASE_H
#define TC_TIER_LEASE_H

#include "tier/thread_group.h"

#include <stdbool.h>
#include <stdint.h>

#define TIER_LEASES_COLLECTION "leases"
#define TIER_PROXIES_COLLECTION "proxies" /* {_id: holder name, claim, beats, beatAt}: live proxies */
#define TIER_LEASE_TEXT_SIZE 160

/* A lease document as read. */
typedef struct tier_lease_view {
    bool exists;
    char holder[TIER_LEASE_TEXT_SIZE]; /* "" when released */
    char claim[TIER_LEASE_TEXT_SIZE];  /* "" for a process without a listen address */
    int64_t term;
    int64_t renewals;
    int64_t unapplied_since_ms; /* the feeder's lease: as its holder last renewed it */
} tier_lease_view_t;

typedef enum tier_lease_decision {
    TIER_LEASE_WAIT,      /* someone holds it and renews it */
    TIER_LEASE_CREATE,    /* no document yet: insert one (a duplicate means someone won) */
    TIER_LEASE_TAKE_OVER, /* released, ours by claim, or silent for the timeout */
} tier_lease_decision_t;

/* What a standby does: seen is what it read now, first_seen_ms when it first read
 * that same holder, term and renewals (its monotonic clock). me and my_claim: this
 * process ("" claim: none). Pure. */
tier_lease_decision_t tier_lease_decide(const tier_lease_view_t *seen, const char *me, const char *my_claim,
                                        int64_t first_seen_ms, int64_t now_ms, int64_t timeout_ms);

/* Whether two reads show the same holder, term and renewals. */
bool tier_lease_view_same(const tier_lease_view_t *left, const tier_lease_view_t *right);

/* --- the process's leases ---------------------------------------------------------
 * One thread per process (tier_leases_run in the workers' group) reads, takes,
 * renews and releases the leases of the workers this process may run; each
 * worker's thread waits for its lease, runs the worker in a scope of the group,
 * and the scope stops when the lease is lost. */
typedef struct tier_leases tier_leases_t; /* struct tier_leases: lease.c */

#endif
