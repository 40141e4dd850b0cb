/* The shared progress record of the tier workers (progress.h): one mutex, a
 * generation counter with a condition variable for waiting workers, and a
 * listener for the proxy's loop. */
#include "tier/progress.h"

#include "query/order.h"
#include "common/clock.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

typedef struct pin {
    size_t index;
    bool whole_namespace;
    bson_value_t id; /* owned unless whole_namespace */
    int count;
} pin_t;

typedef struct eviction {
    bool active;
    bson_value_t id; /* a view, valid while active */
} eviction_t;

/* One per namespace, in the config's order (config_namespace_t.index). */
typedef struct namespace_slot {
    tier_namespace_progress_t progress;
    eviction_t eviction; /* the evictor's delete under way */
} namespace_slot_t;

struct tier_progress {
    pthread_mutex_t mutex;
    pthread_cond_t changed;
    uint64_t generation;
    tier_progress_listener_fn listener;
    void *listener_context;
    namespace_slot_t *namespaces;
    size_t namespace_count;
    tier_worker_progress_t workers[TIER_WORKER_COUNT];
    pin_t *pins;
    size_t pin_count;
    size_t pin_capacity;
    int peers; /* other live proxies of this config (tier/lease.h) */
};

void tier_progress_set_peers(tier_progress_t *progress, int peers)
{
    pthread_mutex_lock(&progress->mutex);
    progress->peers = peers;
    pthread_mutex_unlock(&progress->mutex);
}

int tier_progress_peers(tier_progress_t *progress)
{
    pthread_mutex_lock(&progress->mutex);
    int peers = progress->peers;
    pthread_mutex_unlock(&progress->mutex);
    return peers;
}

const char *tier_worker_name(tier_worker_t worker)
{
    switch (worker) {
    case TIER_WORKER_FEEDER: return "feeder";
    case TIER_WORKER_EVICTOR: return "evictor";
    case TIER_WORKER_WARMER: return "warmer";
    default: return "worker";
    }
}

tier_progress_t *tier_progress_new(size_t namespace_count)
{
    tier_progress_t *progress = bson_malloc0(sizeof *progress);
    pthread_condattr_t attributes;
    pthread_mutex_init(&progress->mutex, NULL);
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&progress->changed, &attributes);
    pthread_condattr_destroy(&attributes);
    progress->namespace_count = namespace_count;
    progress->namespaces = bson_malloc0((namespace_count + 1) * sizeof *progress->namespaces);
    for (size_t i = 0; i < namespace_count; i++) {
        progress->namespaces[i].progress.warm_remaining = -1;
    }
    return progress;
}

void tier_progress_destroy(tier_progress_t *progress)
{
    if (progress == NULL) {
        return;
    }
    pthread_cond_destroy(&progress->changed);
    pthread_mutex_destroy(&progress->mutex);
    for (size_t i = 0; i < progress->pin_count; i++) {
        if (!progress->pins[i].whole_namespace) {
            bson_value_destroy(&progress->pins[i].id);
        }
    }
    bson_free(progress->pins);
    bson_free(progress->namespaces);
    bson_free(progress);
}

size_t tier_progress_namespace_count(const tier_progress_t *progress)
{
    return progress->namespace_count;
}

void tier_progress_set_listener(tier_progress_t *progress, tier_progress_listener_fn listener, void *context)
{
    pthread_mutex_lock(&progress->mutex);
    progress->listener = listener;
    progress->listener_context = context;
    pthread_mutex_unlock(&progress->mutex);
}

tier_namespace_progress_t *tier_progress_lock_namespace(tier_progress_t *progress, size_t index)
{
    pthread_mutex_lock(&progress->mutex);
    return &progress->namespaces[index].progress;
}

tier_worker_progress_t *tier_progress_lock_worker(tier_progress_t *progress, tier_worker_t worker)
{
    pthread_mutex_lock(&progress->mutex);
    return &progress->workers[worker];
}

void tier_progress_unlock(tier_progress_t *progress, bool notify)
{
    tier_progress_listener_fn listener = NULL;
    void *context = NULL;
    if (notify) {
        progress->generation++;
        pthread_cond_broadcast(&progress->changed);
        listener = progress->listener;
        context = progress->listener_context;
    }
    pthread_mutex_unlock(&progress->mutex);
    if (listener != NULL) {
        listener(context);
    }
}

void tier_progress_set_applied(tier_progress_t *progress, uint64_t time)
{
    bool moved = false;
    pthread_mutex_lock(&progress->mutex);
    for (size_t i = 0; i < progress->namespace_count; i++) {
        tier_namespace_progress_t *item = &progress->namespaces[i].progress;
        if (!item->feed_stopped && item->applied_time < time) {
            item->applied_time = time;
            moved = true;
        }
    }
    if (progress->workers[TIER_WORKER_FEEDER].stream_time < time) {
        progress->workers[TIER_WORKER_FEEDER].stream_time = time;
    }
    tier_progress_unlock(progress, moved);
}

void tier_progress_namespace(tier_progress_t *progress, size_t index, tier_namespace_progress_t *out)
{
    pthread_mutex_lock(&progress->mutex);
    *out = progress->namespaces[index].progress;
    pthread_mutex_unlock(&progress->mutex);
}

int64_t tier_progress_lag_ms(const tier_worker_progress_t *feeder, int64_t now_wall_ms)
{
    if (feeder->unapplied_since_ms <= 0 || now_wall_ms <= feeder->unapplied_since_ms) {
        return 0;
    }
    return now_wall_ms - feeder->unapplied_since_ms;
}

void tier_progress_worker(tier_progress_t *progress, tier_worker_t worker, tier_worker_progress_t *out)
{
    pthread_mutex_lock(&progress->mutex);
    *out = progress->workers[worker];
    pthread_mutex_unlock(&progress->mutex);
}

void tier_progress_wait(tier_progress_t *progress, int64_t timeout_ms)
{
    struct timespec deadline = clock_deadline_after_ms(CLOCK_MONOTONIC, timeout_ms);
    pthread_mutex_lock(&progress->mutex);
    uint64_t generation = progress->generation;
    while (progress->generation == generation) {
        if (pthread_cond_timedwait(&progress->changed, &progress->mutex, &deadline) != 0) {
            break;
        }
    }
    pthread_mutex_unlock(&progress->mutex);
}

/* --- pins ---------------------------------------------------------------------------- */

static pin_t *find_pin(tier_progress_t *progress, size_t index, const bson_value_t *id)
{
    for (size_t i = 0; i < progress->pin_count; i++) {
        pin_t *pin = &progress->pins[i];
        if (pin->index == index && pin->whole_namespace == (id == NULL) &&
            (id == NULL || order_compare_values(&pin->id, id) == 0)) {
            return pin;
        }
    }
    return NULL;
}

bool tier_progress_pin(tier_progress_t *progress, size_t index, const bson_value_t *id)
{
    pthread_mutex_lock(&progress->mutex);
    eviction_t *eviction = &progress->namespaces[index].eviction;
    if (eviction->active && (id == NULL || order_compare_values(&eviction->id, id) == 0)) {
        pthread_mutex_unlock(&progress->mutex);
        return false;
    }
    pin_t *pin = find_pin(progress, index, id);
    if (pin == NULL) {
        if (progress->pin_count == progress->pin_capacity) {
            progress->pin_capacity = progress->pin_capacity == 0 ? 16 : progress->pin_capacity * 2;
            progress->pins = bson_realloc(progress->pins, progress->pin_capacity * sizeof *progress->pins);
        }
        pin = &progress->pins[progress->pin_count++];
        memset(pin, 0, sizeof *pin);
        pin->index = index;
        pin->whole_namespace = id == NULL;
        if (id != NULL) {
            bson_value_copy(id, &pin->id);
        }
    }
    pin->count++;
    pthread_mutex_unlock(&progress->mutex);
    return true;
}

void tier_progress_unpin(tier_progress_t *progress, size_t index, const bson_value_t *id)
{
    pthread_mutex_lock(&progress->mutex);
    pin_t *pin = find_pin(progress, index, id);
    if (pin != NULL && --pin->count == 0) {
        if (!pin->whole_namespace) {
            bson_value_destroy(&pin->id);
        }
        *pin = progress->pins[--progress->pin_count];
    }
    pthread_mutex_unlock(&progress->mutex);
}

size_t tier_progress_pin_count(tier_progress_t *progress)
{
    pthread_mutex_lock(&progress->mutex);
    size_t count = progress->pin_count;
    pthread_mutex_unlock(&progress->mutex);
    return count;
}

bool tier_progress_begin_eviction(tier_progress_t *progress, size_t index, const bson_value_t *id)
{
    pthread_mutex_lock(&progress->mutex);
    bool pinned = find_pin(progress, index, NULL) != NULL || find_pin(progress, index, id) != NULL;
    if (!pinned) {
        progress->namespaces[index].eviction.active = true;
        progress->namespaces[index].eviction.id = *id;
    }
    pthread_mutex_unlock(&progress->mutex);
    return !pinned;
}

void tier_progress_end_eviction(tier_progress_t *progress, size_t index)
{
    pthread_mutex_lock(&progress->mutex);
    progress->namespaces[index].eviction.active = false;
    tier_progress_unlock(progress, true);
}

/* --- thermoclineStatus ------------------------------------------------------------ */

static void append_time(bson_t *out, const char *key, uint64_t time)
{
    bson_append_timestamp(out, key, -1, (uint32_t)(time >> 32), (uint32_t)time);
}

void tier_progress_append_workers(tier_progress_t *progress, const char *key, bson_t *out)
{
    tier_worker_progress_t workers[TIER_WORKER_COUNT];
    pthread_mutex_lock(&progress->mutex);
    memcpy(workers, progress->workers, sizeof workers);
    pthread_mutex_unlock(&progress->mutex);

    bson_t all;
    bson_append_document_begin(out, key, -1, &all);
    for (int worker = 0; worker < TIER_WORKER_COUNT; worker++) {
        const tier_worker_progress_t *item = &workers[worker];
        bson_t document;
        bson_append_document_begin(&all, tier_worker_name((tier_worker_t)worker), -1, &document);
        BSON_APPEND_BOOL(&document, "runningHere", item->running);
        if (item->lease_known) {
            bson_t lease;
            BSON_APPEND_DOCUMENT_BEGIN(&document, "lease", &lease);
            BSON_APPEND_UTF8(&lease, "holder", item->lease_holder);
            BSON_APPEND_INT64(&lease, "term", item->lease_term);
            BSON_APPEND_BOOL(&lease, "heldHere", item->lease_held);
            bson_append_document_end(&document, &lease);
        }
        if (item->updated_ms > 0) {
            BSON_APPEND_DATE_TIME(&document, "lastReport", item->updated_ms);
        }
        if (worker == TIER_WORKER_FEEDER) {
            append_time(&document, "appliedTime", item->stream_time);
            BSON_APPEND_INT64(&document, "lagMillis", tier_progress_lag_ms(item, clock_wall_ms()));
            BSON_APPEND_INT64(&document, "eventsApplied", item->events_applied);
            BSON_APPEND_INT64(&document, "eventsSuppressed", item->events_suppressed);
            BSON_APPEND_INT64(&document, "batches", item->batches);
            BSON_APPEND_INT64(&document, "archiveWrites", item->archive_writes);
            BSON_APPEND_INT64(&document, "retries", item->retries);
            BSON_APPEND_BOOL(&document, "archiveReachable", item->archive_reachable);
        }
        if (item->last_error[0] != '\0') {
            BSON_APPEND_UTF8(&document, "lastError", item->last_error);
        }
        bson_append_document_end(&all, &document);
    }
    bson_append_document_end(out, &all);
}

/* {count, documents, oldest, sample: [{_id, code, message, at}]}: what an operator
 * needs to find the documents whose writes the archive refused. */
static void append_refusals(bson_t *out, const tier_namespace_progress_t *item)
{
    bson_t refusals, sample, entry, id_document;
    bson_iter_t iter;
    BSON_APPEND_DOCUMENT_BEGIN(out, "refusals", &refusals);
    BSON_APPEND_INT64(&refusals, "count", item->refusals);
    BSON_APPEND_INT64(&refusals, "documents", item->refused_documents);
    if (item->refusal_oldest_ms > 0) {
        BSON_APPEND_DATE_TIME(&refusals, "oldest", item->refusal_oldest_ms);
    }
    BSON_APPEND_ARRAY_BEGIN(&refusals, "sample", &sample);
    for (size_t i = 0; i < item->refusal_sample_count && i < TIER_REFUSAL_SAMPLE; i++) {
        const tier_refusal_sample_t *one = &item->refusal_sample[i];
        char key[16];
        const char *key_string;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        bson_append_document_begin(&sample, key_string, -1, &entry);
        if (one->id_length > 0 && bson_init_static(&id_document, one->id, one->id_length) &&
            bson_iter_init_find(&iter, &id_document, "_id")) {
            BSON_APPEND_VALUE(&entry, "_id", bson_iter_value(&iter));
        }
        BSON_APPEND_INT32(&entry, "code", one->code);
        BSON_APPEND_UTF8(&entry, "message", one->message);
        BSON_APPEND_DATE_TIME(&entry, "at", one->at_ms);
        bson_append_document_end(&sample, &entry);
    }
    bson_append_array_end(&refusals, &sample);
    bson_append_document_end(out, &refusals);
}

void tier_progress_append_namespace(tier_progress_t *progress, size_t index, bson_t *out)
{
    tier_namespace_progress_t item;
    tier_progress_namespace(progress, index, &item);
    bson_t feeder, warmer, evictor;
    BSON_APPEND_DOCUMENT_BEGIN(out, "feeder", &feeder);
    append_time(&feeder, "appliedTime", item.applied_time);
    BSON_APPEND_UTF8(&feeder, "state", item.feed_stopped ? "stopped" : "running");
    if (item.feed_stopped) {
        BSON_APPEND_UTF8(&feeder, "error", item.feed_error);
    }
    append_refusals(&feeder, &item);
    bson_append_document_end(out, &feeder);
    BSON_APPEND_DOCUMENT_BEGIN(out, "warmer", &warmer);
    BSON_APPEND_UTF8(&warmer, "state", item.warm_declared ? "declared-complete"
                                       : item.coverage_valid ? "complete"
                                       : item.warm_started_ms > 0 ? "warming" : "waiting");
    BSON_APPEND_INT64(&warmer, "copied", item.warm_copied);
    if (item.warm_remaining >= 0) {
        BSON_APPEND_INT64(&warmer, "remainingEstimate", item.warm_remaining);
    }
    if (item.warm_started_ms > 0) {
        BSON_APPEND_DATE_TIME(&warmer, "passStarted", item.warm_started_ms);
    }
    if (item.warm_rate > 0) {
        /* The pace of the last progress interval (5 s), and the time left at that pace. */
        BSON_APPEND_DOUBLE(&warmer, "docsPerSecond", item.warm_rate);
        if (item.warm_remaining >= 0) {
            BSON_APPEND_INT64(&warmer, "etaSeconds", (int64_t)((double)item.warm_remaining / item.warm_rate + 0.5));
        }
    }
    if (item.warm_completed_ms > 0) {
        BSON_APPEND_DATE_TIME(&warmer, "firstPassCompleted", item.warm_completed_ms);
    }
    if (item.warm_copy_time != 0) {
        append_time(&warmer, "lastCopyTime", item.warm_copy_time);
    }
    bson_append_document_end(out, &warmer);
    BSON_APPEND_DOCUMENT_BEGIN(out, "evictor", &evictor);
    BSON_APPEND_INT64(&evictor, "evicted", item.evicted);
    BSON_APPEND_INT64(&evictor, "keptChanged", item.evict_changed);
    BSON_APPEND_INT64(&evictor, "keptRefused", item.evict_held);
    BSON_APPEND_INT64(&evictor, "keptPinned", item.evict_pinned);
    BSON_APPEND_INT64(&evictor, "keptUnsettled", item.evict_unsettled);
    if (item.evict_last_pass_ms > 0) {
        BSON_APPEND_DATE_TIME(&evictor, "lastPass", item.evict_last_pass_ms);
    }
    bson_append_document_end(out, &evictor);
}
