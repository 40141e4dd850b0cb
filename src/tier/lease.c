/* Leases of the tier workers (lease.h): the pure rule a standby follows, and the
 * thread that takes, renews and releases this process's leases in the fast tier
 * and stops a worker whose lease is gone. */
#include "tier/lease_private.h"

#include "common/bson_view.h"
#include "common/clock.h"
#include "common/log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LOG_COMPONENT "LEASE"
#define TICK_MIN_MS 50
#define TICK_MAX_MS 500
#define PEERS_MAX 64

/* --- the rule ---------------------------------------------------------------------- */

bool tier_lease_view_same(const tier_lease_view_t *left, const tier_lease_view_t *right)
{
    return left->exists == right->exists && left->term == right->term && left->renewals == right->renewals &&
           strcmp(left->holder, right->holder) == 0;
}

tier_lease_decision_t tier_lease_decide(const tier_lease_view_t *seen, const char *me, const char *my_claim,
                                        int64_t first_seen_ms, int64_t now_ms, int64_t timeout_ms)
{
    if (!seen->exists) {
        return TIER_LEASE_CREATE;
    }
    if (seen->holder[0] == '\0' || strcmp(seen->holder, me) == 0) {
        return TIER_LEASE_TAKE_OVER; /* released, or ours from before a lost reply */
    }
    if (my_claim[0] != '\0' && strcmp(seen->claim, my_claim) == 0) {
        return TIER_LEASE_TAKE_OVER; /* a previous process on this host and port: gone */
    }
    return now_ms - first_seen_ms >= timeout_ms ? TIER_LEASE_TAKE_OVER : TIER_LEASE_WAIT;
}

/* --- the process's leases ---------------------------------------------------------- */

typedef struct lease_slot {
    bool wanted;               /* this process may run the worker */
    bool held;
    int64_t term;
    int64_t last_renewal_ms;   /* monotonic start of the last successful write */
    tier_group_t *scope;       /* the running worker's scope, or NULL */
    tier_lease_view_t seen;    /* standby: the last read */
    int64_t first_seen_ms;     /* standby: when seen was first read as it is */
} lease_slot_t;

/* Another proxy's heartbeat as last seen. */
typedef struct peer {
    char id[TIER_LEASE_TEXT_SIZE];
    int64_t beats;
    int64_t changed_ms; /* when beats was last seen to change (monotonic) */
} peer_t;

struct tier_leases {
    peer_t peers[PEERS_MAX];
    size_t peer_count;
    pthread_mutex_t mutex;
    tier_context_t *context;
    int64_t timeout_ms;
    char me[TIER_LEASE_TEXT_SIZE];
    char claim[TIER_LEASE_TEXT_SIZE];
    lease_slot_t slots[TIER_WORKER_COUNT];
};

tier_leases_t *tier_leases_new(tier_context_t *context, unsigned which, const char *claim)
{
    tier_leases_t *leases = bson_malloc0(sizeof *leases);
    char host[64] = "";
    pthread_mutex_init(&leases->mutex, NULL);
    leases->context = context;
    leases->timeout_ms = context->config->lease_timeout_ms;
    gethostname(host, sizeof host - 1);
    snprintf(leases->me, sizeof leases->me, "%s pid %d #%08x", host, (int)getpid(),
             (unsigned)(clock_monotonic_ns() & 0xffffffffu));
    if (claim != NULL && claim[0] != '\0') {
        snprintf(leases->claim, sizeof leases->claim, "%s %s", host, claim);
    }
    for (int worker = 0; worker < TIER_WORKER_COUNT; worker++) {
        leases->slots[worker].wanted = (which & (1u << worker)) != 0;
    }
    return leases;
}

void tier_leases_destroy(tier_leases_t *leases)
{
    if (leases != NULL) {
        pthread_mutex_destroy(&leases->mutex);
        bson_free(leases);
    }
}

/* What thermoclineStatus shows of a lease (progress.h). */
static void publish(tier_leases_t *leases, tier_worker_t worker, const tier_lease_view_t *view, bool held)
{
    tier_worker_progress_t *item = tier_progress_lock_worker(leases->context->progress, worker);
    item->lease_known = view->exists;
    item->lease_held = held;
    item->lease_term = view->term;
    snprintf(item->lease_holder, sizeof item->lease_holder, "%s", view->holder);
    tier_progress_unlock(leases->context->progress, false);
}

static void append_majority(bson_t *command)
{
    bson_t concern;
    BSON_APPEND_DOCUMENT_BEGIN(command, "writeConcern", &concern);
    BSON_APPEND_UTF8(&concern, "w", "majority");
    bson_append_document_end(command, &concern);
}

/* The lease document of worker, read into out. */
static bool read_lease(mongoc_client_t *fast, tier_worker_t worker, tier_lease_view_t *out, bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, documents;
    bson_iter_t iter, field;
    memset(out, 0, sizeof *out);
    BSON_APPEND_UTF8(&filter, "_id", tier_worker_name(worker));
    bool ok = tier_read_state(fast, TIER_LEASES_COLLECTION, &filter, &documents, error);
    if (ok && bson_iter_init(&iter, &documents) && bson_iter_next(&iter) && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_t document;
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&document, data, length);
        out->exists = true;
        if (bson_iter_init_find(&field, &document, "holder") && BSON_ITER_HOLDS_UTF8(&field)) {
            snprintf(out->holder, sizeof out->holder, "%s", bson_iter_utf8(&field, NULL));
        }
        if (bson_iter_init_find(&field, &document, "claim") && BSON_ITER_HOLDS_UTF8(&field)) {
            snprintf(out->claim, sizeof out->claim, "%s", bson_iter_utf8(&field, NULL));
        }
        out->term = bson_iter_init_find(&field, &document, "term") ? bson_iter_as_int64(&field) : 0;
        out->renewals = bson_iter_init_find(&field, &document, "renewals") ? bson_iter_as_int64(&field) : 0;
        if (bson_iter_init_find(&field, &document, "unappliedSince") && BSON_ITER_HOLDS_DATE_TIME(&field)) {
            out->unapplied_since_ms = bson_iter_date_time(&field);
        }
    }
    bson_destroy(&documents);
    bson_destroy(&filter);
    return ok;
}

/* One update of a document of collection (leases, proxies) in the thermocline
 * database: applied only if it still is as `where` says (upsert: or inserted);
 * *out_matched tells whether one document was. */
static bool update_state(mongoc_client_t *fast, const char *collection, const bson_t *where, const bson_t *change,
                         bool upsert, bool *out_matched, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, updates, statement, reply;
    bson_iter_t iter;
    BSON_APPEND_UTF8(&command, "update", collection);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &statement);
    BSON_APPEND_DOCUMENT(&statement, "q", where);
    BSON_APPEND_DOCUMENT(&statement, "u", change);
    BSON_APPEND_BOOL(&statement, "upsert", upsert);
    bson_append_document_end(&updates, &statement);
    bson_append_array_end(&command, &updates);
    append_majority(&command);
    bool ok = tier_command(fast, TIER_DATABASE, &command, &reply, error);
    *out_matched = ok && bson_iter_init_find(&iter, &reply, "n") && bson_iter_as_int64(&iter) == 1;
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

/* {_id, holder: me, term}: the lease as this process holds it. */
static void held_filter(const tier_leases_t *leases, tier_worker_t worker, int64_t term, bson_t *out)
{
    bson_init(out);
    BSON_APPEND_UTF8(out, "_id", tier_worker_name(worker));
    BSON_APPEND_UTF8(out, "holder", leases->me);
    BSON_APPEND_INT64(out, "term", term);
}

/* Takes worker's lease as decided: a new document, or the one seen, conditionally. */
static bool take_lease(tier_leases_t *leases, mongoc_client_t *fast, tier_worker_t worker,
                       tier_lease_decision_t decision, const tier_lease_view_t *seen, bson_error_t *error)
{
    bson_t document = BSON_INITIALIZER;
    int64_t term = decision == TIER_LEASE_CREATE ? 1 : seen->term + 1;
    bool taken = false, ok;
    BSON_APPEND_UTF8(&document, "holder", leases->me);
    BSON_APPEND_UTF8(&document, "claim", leases->claim);
    BSON_APPEND_INT64(&document, "term", term);
    BSON_APPEND_INT64(&document, "renewals", 0);
    BSON_APPEND_DATE_TIME(&document, "renewedAt", clock_wall_ms());
    BSON_APPEND_INT64(&document, "timeoutMillis", leases->timeout_ms);
    if (decision == TIER_LEASE_CREATE) {
        /* An insert: of two creators, the _id index lets one in. */
        bson_t command = BSON_INITIALIZER, documents, reply;
        bson_iter_t iter;
        BSON_APPEND_UTF8(&command, "insert", TIER_LEASES_COLLECTION);
        BSON_APPEND_ARRAY_BEGIN(&command, "documents", &documents);
        BSON_APPEND_UTF8(&document, "_id", tier_worker_name(worker));
        BSON_APPEND_DOCUMENT(&documents, "0", &document);
        bson_append_array_end(&command, &documents);
        append_majority(&command);
        ok = tier_command(fast, TIER_DATABASE, &command, &reply, error);
        taken = ok && bson_iter_init_find(&iter, &reply, "n") && bson_iter_as_int64(&iter) == 1;
        bson_destroy(&reply);
        bson_destroy(&command);
    } else {
        /* Conditional on the document as read: of two standbys, one matches. */
        bson_t where = BSON_INITIALIZER, change = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&where, "_id", tier_worker_name(worker));
        BSON_APPEND_UTF8(&where, "holder", seen->holder);
        BSON_APPEND_INT64(&where, "term", seen->term);
        BSON_APPEND_INT64(&where, "renewals", seen->renewals);
        BSON_APPEND_DOCUMENT(&change, "$set", &document);
        ok = update_state(fast, TIER_LEASES_COLLECTION, &where, &change, false, &taken, error);
        bson_destroy(&where);
        bson_destroy(&change);
    }
    bson_destroy(&document);
    if (taken) {
        lease_slot_t *slot = &leases->slots[worker];
        pthread_mutex_lock(&leases->mutex);
        slot->held = true;
        slot->term = term;
        slot->last_renewal_ms = clock_monotonic_ms();
        pthread_mutex_unlock(&leases->mutex);
        tier_lease_view_t mine = {.exists = true, .term = term};
        snprintf(mine.holder, sizeof mine.holder, "%s", leases->me);
        publish(leases, worker, &mine, true);
        TC_LOG(TC_LOG_INFO, LOG_COMPONENT, 0, "took the %s's lease (term %lld%s%s): the %s runs in this process",
               tier_worker_name(worker), (long long)term, seen->exists && seen->holder[0] != '\0' ? ", from " : "",
               seen->exists ? seen->holder : "", tier_worker_name(worker));
    }
    return ok;
}

/* The worker's lease is gone (taken, or not renewed in time): its worker stops. */
static void lose_lease(tier_leases_t *leases, tier_worker_t worker, const char *why)
{
    lease_slot_t *slot = &leases->slots[worker];
    pthread_mutex_lock(&leases->mutex);
    slot->held = false;
    if (slot->scope != NULL) {
        tier_group_scope_stop(slot->scope);
    }
    slot->seen.exists = false; /* read afresh before any takeover */
    pthread_mutex_unlock(&leases->mutex);
    TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, 0, "lost the %s's lease (term %lld): %s; the %s stops in this process",
           tier_worker_name(worker), (long long)slot->term, why, tier_worker_name(worker));
}

/* A standby's view of the feeder's lag: its holder's, as renewed in the lease. */
static void follow_feeder_lag(tier_leases_t *leases, const tier_lease_view_t *seen)
{
    tier_worker_progress_t *item = tier_progress_lock_worker(leases->context->progress, TIER_WORKER_FEEDER);
    if (!item->running) {
        item->unapplied_since_ms = seen->holder[0] != '\0' ? seen->unapplied_since_ms : 0;
    }
    tier_progress_unlock(leases->context->progress, false);
}

/* The feeder's holder publishes its lag with each renewal (lease.h). */
static void append_feeder_lag(tier_leases_t *leases, bson_t *set)
{
    tier_worker_progress_t feeder;
    tier_progress_worker(leases->context->progress, TIER_WORKER_FEEDER, &feeder);
    if (feeder.unapplied_since_ms > 0) {
        BSON_APPEND_DATE_TIME(set, "unappliedSince", feeder.unapplied_since_ms);
    } else {
        BSON_APPEND_NULL(set, "unappliedSince");
    }
}

static void renew(tier_leases_t *leases, mongoc_client_t *fast, tier_worker_t worker, int64_t started)
{
    lease_slot_t *slot = &leases->slots[worker];
    bson_t where, change = BSON_INITIALIZER, increment, set;
    bson_error_t error;
    bool matched = false;
    held_filter(leases, worker, slot->term, &where);
    BSON_APPEND_DOCUMENT_BEGIN(&change, "$inc", &increment);
    BSON_APPEND_INT64(&increment, "renewals", 1);
    bson_append_document_end(&change, &increment);
    BSON_APPEND_DOCUMENT_BEGIN(&change, "$set", &set);
    BSON_APPEND_DATE_TIME(&set, "renewedAt", clock_wall_ms());
    if (worker == TIER_WORKER_FEEDER) {
        append_feeder_lag(leases, &set);
    }
    bson_append_document_end(&change, &set);
    bool ok = update_state(fast, TIER_LEASES_COLLECTION, &where, &change, false, &matched, &error);
    bson_destroy(&where);
    bson_destroy(&change);
    if (ok && matched) {
        pthread_mutex_lock(&leases->mutex);
        slot->last_renewal_ms = started;
        pthread_mutex_unlock(&leases->mutex);
    } else if (ok) {
        lose_lease(leases, worker, "another process took it over");
    } else if (clock_monotonic_ms() - slot->last_renewal_ms > leases->timeout_ms / 2) {
        /* Before any standby can have waited out the timeout since that renewal. */
        char why[sizeof error.message + 64];
        snprintf(why, sizeof why, "not renewed for half of leaseTimeout (%s)", error.message);
        lose_lease(leases, worker, why);
    }
}

static void stand_by(tier_leases_t *leases, mongoc_client_t *fast, tier_worker_t worker, int64_t now)
{
    lease_slot_t *slot = &leases->slots[worker];
    tier_lease_view_t seen;
    bson_error_t error;
    if (!read_lease(fast, worker, &seen, &error)) {
        tier_report_error(leases->context, worker, "cannot read the %s's lease: %s", tier_worker_name(worker),
                          error.message);
        return;
    }
    if (!slot->seen.exists || !tier_lease_view_same(&seen, &slot->seen)) {
        slot->seen = seen;
        slot->first_seen_ms = now;
    }
    publish(leases, worker, &seen, false);
    if (worker == TIER_WORKER_FEEDER) {
        follow_feeder_lag(leases, &seen);
    }
    if (!slot->wanted) {
        return; /* only watched: this process never runs it */
    }
    tier_lease_decision_t decision =
        tier_lease_decide(&seen, leases->me, leases->claim, slot->first_seen_ms, now, leases->timeout_ms);
    if (decision != TIER_LEASE_WAIT && !take_lease(leases, fast, worker, decision, &seen, &error)) {
        tier_report_error(leases->context, worker, "cannot take the %s's lease: %s", tier_worker_name(worker),
                          error.message);
    }
}

/* --- proxies' heartbeats ------------------------------------------------------------
 * A proxy (a process with a claim) beats in thermocline.proxies every tick; the
 * others it sees beating within leaseTimeout are its peers (progress.h), which
 * make its archive reads wait for writes acknowledged through them, and its
 * feeder checkpoint more often. A worker process only counts them. */

static void count_peers(tier_leases_t *leases, const bson_t *documents, int64_t now)
{
    bson_iter_t iter, field;
    int alive = 0;
    bson_iter_init(&iter, documents);
    while (bson_iter_next(&iter)) {
        bson_t document;
        if (!bson_view_of(&iter, &document) || !bson_iter_init_find(&field, &document, "_id") ||
            !BSON_ITER_HOLDS_UTF8(&field) || strcmp(bson_iter_utf8(&field, NULL), leases->me) == 0) {
            continue;
        }
        const char *id = bson_iter_utf8(&field, NULL);
        int64_t beats = bson_iter_init_find(&field, &document, "beats") ? bson_iter_as_int64(&field) : 0;
        peer_t *peer = NULL;
        for (size_t i = 0; i < leases->peer_count && peer == NULL; i++) {
            peer = strcmp(leases->peers[i].id, id) == 0 ? &leases->peers[i] : NULL;
        }
        if (peer == NULL && leases->peer_count < PEERS_MAX) {
            peer = &leases->peers[leases->peer_count++];
            snprintf(peer->id, sizeof peer->id, "%s", id);
            peer->beats = beats;
            peer->changed_ms = now;
        }
        if (peer != NULL && peer->beats != beats) {
            peer->beats = beats;
            peer->changed_ms = now;
        }
        alive += peer != NULL && now - peer->changed_ms < leases->timeout_ms;
    }
    tier_progress_set_peers(leases->context->progress, alive);
}

static void beat(tier_leases_t *leases, mongoc_client_t *fast, int64_t now)
{
    bson_t where = BSON_INITIALIZER, change = BSON_INITIALIZER, set, increment, filter = BSON_INITIALIZER, documents;
    bson_error_t error;
    bool matched;
    BSON_APPEND_UTF8(&where, "_id", leases->me);
    BSON_APPEND_DOCUMENT_BEGIN(&change, "$set", &set);
    BSON_APPEND_UTF8(&set, "claim", leases->claim);
    BSON_APPEND_DATE_TIME(&set, "beatAt", clock_wall_ms());
    bson_append_document_end(&change, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&change, "$inc", &increment);
    BSON_APPEND_INT64(&increment, "beats", 1);
    bson_append_document_end(&change, &increment);
    /* A worker process (no claim) does not beat, but counts the proxies too: its
     * feeder checkpoints for them (feeder.c). */
    if (leases->claim[0] == '\0' || update_state(fast, TIER_PROXIES_COLLECTION, &where, &change, true, &matched,
                                                   &error)) {
        if (tier_read_state(fast, TIER_PROXIES_COLLECTION, &filter, &documents, &error)) {
            count_peers(leases, &documents, now);
        }
        bson_destroy(&documents);
    }
    bson_destroy(&filter);
    bson_destroy(&change);
    bson_destroy(&where);
}

static void leave(tier_leases_t *leases, mongoc_client_t *fast)
{
    bson_t query = BSON_INITIALIZER;
    bson_error_t error;
    BSON_APPEND_UTF8(&query, "_id", leases->me);
    tier_delete_state(fast, TIER_PROXIES_COLLECTION, &query, 1, NULL, &error); /* a dead one stops counting anyway */
    bson_destroy(&query);
}

/* A clean stop hands the leases on at once. */
static void release_all(tier_leases_t *leases, mongoc_client_t *fast)
{
    for (int worker = 0; worker < TIER_WORKER_COUNT; worker++) {
        lease_slot_t *slot = &leases->slots[worker];
        if (!slot->held) {
            continue;
        }
        bson_t where, change = BSON_INITIALIZER, set, increment;
        bson_error_t error;
        bool matched;
        held_filter(leases, (tier_worker_t)worker, slot->term, &where);
        BSON_APPEND_DOCUMENT_BEGIN(&change, "$set", &set);
        BSON_APPEND_UTF8(&set, "holder", "");
        BSON_APPEND_UTF8(&set, "claim", "");
        bson_append_document_end(&change, &set);
        BSON_APPEND_DOCUMENT_BEGIN(&change, "$inc", &increment);
        BSON_APPEND_INT64(&increment, "renewals", 1);
        bson_append_document_end(&change, &increment);
        if (!update_state(fast, TIER_LEASES_COLLECTION, &where, &change, false, &matched, &error)) {
            TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, 0, "cannot release the %s's lease: %s; another process takes "
                   "it over after leaseTimeout", tier_worker_name((tier_worker_t)worker), error.message);
        }
        bson_destroy(&where);
        bson_destroy(&change);
        slot->held = false;
    }
}

void tier_leases_run(tier_group_t *group, void *argument)
{
    tier_leases_t *leases = argument;
    mongoc_client_t *fast = mongoc_client_pool_pop(leases->context->fast_pool);
    int64_t tick = leases->timeout_ms / 4;
    tick = tick < TICK_MIN_MS ? TICK_MIN_MS : tick > TICK_MAX_MS ? TICK_MAX_MS : tick;
    while (!tier_group_stopping(group)) {
        int64_t started = clock_monotonic_ms();
        beat(leases, fast, started);
        for (int worker = 0; worker < TIER_WORKER_COUNT && !tier_group_stopping(group); worker++) {
            lease_slot_t *slot = &leases->slots[worker];
            if (!slot->wanted && worker != TIER_WORKER_FEEDER) {
                continue; /* the feeder's is watched for its lag even here */
            }
            if (slot->held) {
                renew(leases, fast, (tier_worker_t)worker, started);
            } else {
                stand_by(leases, fast, (tier_worker_t)worker, started);
            }
        }
        tier_group_sleep(group, tick - (clock_monotonic_ms() - started));
    }
    /* The workers stop with the group: only once they have (their last writes
     * done) may a successor take over. */
    for (int waited = 0; waited < 600; waited++) {
        bool running = false;
        pthread_mutex_lock(&leases->mutex);
        for (int worker = 0; worker < TIER_WORKER_COUNT; worker++) {
            running |= leases->slots[worker].scope != NULL;
        }
        pthread_mutex_unlock(&leases->mutex);
        if (!running) {
            break;
        }
        usleep(50 * 1000);
    }
    release_all(leases, fast);
    if (leases->claim[0] != '\0') {
        leave(leases, fast);
    }
    mongoc_client_pool_push(leases->context->fast_pool, fast);
}

tier_group_t *tier_leases_wait(tier_leases_t *leases, tier_worker_t worker, tier_group_t *group, int64_t *out_term)
{
    lease_slot_t *slot = &leases->slots[worker];
    while (tier_group_sleep(group, 50)) {
        pthread_mutex_lock(&leases->mutex);
        if (slot->held) {
            slot->scope = tier_group_scope_new(group);
            *out_term = slot->term;
            pthread_mutex_unlock(&leases->mutex);
            return slot->scope;
        }
        pthread_mutex_unlock(&leases->mutex);
    }
    return NULL;
}

void tier_leases_end(tier_leases_t *leases, tier_worker_t worker, tier_group_t *scope)
{
    pthread_mutex_lock(&leases->mutex);
    leases->slots[worker].scope = NULL;
    pthread_mutex_unlock(&leases->mutex);
    tier_group_scope_destroy(scope);
}

void tier_lease_fence(bson_t *query, int64_t term)
{
    bson_t clauses, clause, condition;
    BSON_APPEND_ARRAY_BEGIN(query, "$or", &clauses);
    BSON_APPEND_DOCUMENT_BEGIN(&clauses, "0", &clause);
    BSON_APPEND_DOCUMENT_BEGIN(&clause, "leaseTerm", &condition);
    BSON_APPEND_INT64(&condition, "$lte", term);
    bson_append_document_end(&clause, &condition);
    bson_append_document_end(&clauses, &clause);
    BSON_APPEND_DOCUMENT_BEGIN(&clauses, "1", &clause);
    BSON_APPEND_DOCUMENT_BEGIN(&clause, "leaseTerm", &condition);
    BSON_APPEND_BOOL(&condition, "$exists", false);
    bson_append_document_end(&clause, &condition);
    bson_append_document_end(&clauses, &clause);
    bson_append_array_end(query, &clauses);
}

bool tier_holds_lease(const tier_context_t *context, tier_worker_t worker)
{
    return context->leases == NULL || tier_leases_still_held(context->leases, worker, context->lease_term);
}

bool tier_leases_still_held(tier_leases_t *leases, tier_worker_t worker, int64_t term)
{
    lease_slot_t *slot = &leases->slots[worker];
    pthread_mutex_lock(&leases->mutex);
    bool held = slot->held && slot->term == term &&
                clock_monotonic_ms() - slot->last_renewal_ms <= leases->timeout_ms / 2;
    pthread_mutex_unlock(&leases->mutex);
    return held;
}
