/* The TTL monitor's thread (ttl_monitor.h): a pass lists the TTL indexes under
 * the catalog lock, then runs one delete command per index outside it, each in
 * the store's own name (no access check, as mongod's internal client). */
#include "store/ttl_monitor.h"

#include "common/clock.h"
#include "common/log.h"
#include "store/dispatch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define LOG_COMPONENT "INDEX"

struct ttl_monitor {
    store_t *store;
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t wakeup;
    bool stop;
    atomic_llong sleep_seconds;
    atomic_bool enabled;
    atomic_llong passes;
    atomic_llong deleted_documents;
};

/* One TTL index, copied out of the catalog for a pass. */
typedef struct ttl_rule {
    char *database;
    char *collection;
    char *field;
    int64_t seconds;
    bson_t partial_filter; /* empty: none */
} ttl_rule_t;

typedef struct ttl_rules {
    ttl_rule_t *items;
    size_t count, capacity;
} ttl_rules_t;

bool ttl_monitor_index_ttl(const index_descriptor_t *index, int64_t *out_seconds)
{
    bson_iter_t iter;
    if (index->is_id || bson_count_keys(&index->key_pattern) != 1 ||
        !bson_iter_init_find(&iter, &index->spec, "expireAfterSeconds") || !BSON_ITER_HOLDS_NUMBER(&iter)) {
        return false;
    }
    *out_seconds = bson_iter_as_int64(&iter);
    return true;
}

static void collect_rules(collection_t *collection, void *context)
{
    ttl_rules_t *rules = context;
    bson_iter_t iter;
    if (bson_iter_init_find(&iter, &collection->options, "capped") && bson_iter_as_bool(&iter)) {
        return; /* mongod deletes nothing from a capped collection */
    }
    for (size_t i = 0; i < collection->index_count; i++) {
        const index_descriptor_t *index = collection->indexes[i];
        int64_t seconds;
        bson_iter_t field;
        if (!ttl_monitor_index_ttl(index, &seconds) || !bson_iter_init(&field, &index->key_pattern) ||
            !bson_iter_next(&field)) {
            continue;
        }
        if (rules->count == rules->capacity) {
            rules->capacity = rules->capacity == 0 ? 8 : rules->capacity * 2;
            rules->items = bson_realloc(rules->items, rules->capacity * sizeof *rules->items);
        }
        ttl_rule_t *rule = &rules->items[rules->count++];
        rule->database = bson_strdup(collection->database);
        rule->collection = bson_strdup(collection->name);
        rule->field = bson_strdup(bson_iter_key(&field));
        rule->seconds = seconds;
        bson_init(&rule->partial_filter);
        if (bson_iter_init_find(&iter, &index->spec, "partialFilterExpression") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            const bson_value_t *value = bson_iter_value(&iter);
            bson_t filter;
            if (bson_init_static(&filter, value->value.v_doc.data, value->value.v_doc.data_len)) {
                bson_concat(&rule->partial_filter, &filter);
            }
        }
    }
}

static void rules_cleanup(ttl_rules_t *rules)
{
    for (size_t i = 0; i < rules->count; i++) {
        bson_free(rules->items[i].database);
        bson_free(rules->items[i].collection);
        bson_free(rules->items[i].field);
        bson_destroy(&rules->items[i].partial_filter);
    }
    bson_free(rules->items);
}

/* {delete: collection, deletes: [{q: {field: {$lt: now - seconds}} (and the
 * index's partial filter), limit: 0}], $db}: a Date bound matches only dates
 * (type bracketing), and an array when any of its dates is past, as mongod's
 * TTL index scan finds it. */
static void build_delete(const ttl_rule_t *rule, int64_t now_ms, bson_t *out)
{
    bson_t deletes, statement, query, clauses, clause, condition;
    bson_init(out);
    BSON_APPEND_UTF8(out, "delete", rule->collection);
    BSON_APPEND_ARRAY_BEGIN(out, "deletes", &deletes);
    BSON_APPEND_DOCUMENT_BEGIN(&deletes, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    BSON_APPEND_ARRAY_BEGIN(&query, "$and", &clauses);
    BSON_APPEND_DOCUMENT_BEGIN(&clauses, "0", &clause);
    BSON_APPEND_DOCUMENT_BEGIN(&clause, rule->field, &condition);
    BSON_APPEND_DATE_TIME(&condition, "$lt", now_ms - rule->seconds * 1000);
    bson_append_document_end(&clause, &condition);
    bson_append_document_end(&clauses, &clause);
    if (!bson_empty(&rule->partial_filter)) {
        BSON_APPEND_DOCUMENT(&clauses, "1", &rule->partial_filter);
    }
    bson_append_array_end(&query, &clauses);
    bson_append_document_end(&statement, &query);
    BSON_APPEND_INT32(&statement, "limit", 0);
    bson_append_document_end(&deletes, &statement);
    bson_append_array_end(out, &deletes);
    BSON_APPEND_UTF8(out, "$db", rule->database);
}

static void run_pass(ttl_monitor_t *monitor, storage_session_t *session)
{
    ttl_rules_t rules = {0};
    storage_lock_shared(monitor->store->storage);
    storage_visit_collections(monitor->store->storage, collect_rules, &rules);
    storage_unlock(monitor->store->storage);
    int64_t now_ms = clock_wall_ms();
    for (size_t i = 0; i < rules.count; i++) {
        bson_t command, reply = BSON_INITIALIZER;
        bson_iter_t iter;
        dispatch_control_t control = {.internal = true};
        build_delete(&rules.items[i], now_ms, &command);
        dispatch_command(monitor->store, session, &command, 0, "TTLMonitor", &reply, &control);
        if (bson_iter_init_find(&iter, &reply, "n") && BSON_ITER_HOLDS_NUMBER(&iter)) {
            atomic_fetch_add(&monitor->deleted_documents, bson_iter_as_int64(&iter));
        }
        if (!bson_iter_init_find(&iter, &reply, "ok") || bson_iter_as_double(&iter) != 1.0 ||
            bson_iter_init_find(&iter, &reply, "writeErrors")) {
            char *text = bson_as_relaxed_extended_json(&reply, NULL);
            TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                         "TTL monitor: deleting the expired documents of {ns} failed: {reply}; tried again next pass",
                         TC_ATTR_STR("ns", rules.items[i].collection), TC_ATTR_STR("reply", text));
            bson_free(text);
        }
        bson_destroy(&command);
        bson_destroy(&reply);
    }
    atomic_fetch_add(&monitor->passes, 1);
    rules_cleanup(&rules);
}

static void *monitor_main(void *argument)
{
    ttl_monitor_t *monitor = argument;
    bson_error_t error;
    storage_session_t *session = storage_session_new(monitor->store->storage, &error);
    if (session == NULL) {
        TC_LOG_ATTRS(TC_LOG_ERROR, LOG_COMPONENT, 0, "TTL monitor: no storage session ({error}): no TTL deletes",
                     TC_ATTR_STR("error", error.message));
        return NULL;
    }
    pthread_mutex_lock(&monitor->mutex);
    int64_t last_pass_ms = clock_monotonic_ms();
    while (!monitor->stop) {
        int64_t due_ms = last_pass_ms + atomic_load(&monitor->sleep_seconds) * 1000;
        int64_t now_ms = clock_monotonic_ms();
        if (now_ms < due_ms) {
            /* Woken early by a changed ttlMonitorSleepSecs too: wait at most a second. */
            int64_t wait_ms = due_ms - now_ms < 1000 ? due_ms - now_ms : 1000;
            struct timespec deadline = clock_deadline_after_ms(CLOCK_REALTIME, wait_ms);
            pthread_cond_timedwait(&monitor->wakeup, &monitor->mutex, &deadline);
            continue;
        }
        last_pass_ms = now_ms;
        if (!atomic_load(&monitor->enabled)) {
            continue;
        }
        pthread_mutex_unlock(&monitor->mutex);
        run_pass(monitor, session);
        pthread_mutex_lock(&monitor->mutex);
    }
    pthread_mutex_unlock(&monitor->mutex);
    storage_session_destroy(session);
    return NULL;
}

ttl_monitor_t *ttl_monitor_start(store_t *store, bson_error_t *error)
{
    ttl_monitor_t *monitor = bson_malloc0(sizeof *monitor);
    monitor->store = store;
    atomic_store(&monitor->sleep_seconds, TTL_MONITOR_DEFAULT_SLEEP_SECONDS);
    atomic_store(&monitor->enabled, true);
    pthread_mutex_init(&monitor->mutex, NULL);
    pthread_cond_init(&monitor->wakeup, NULL);
    if (pthread_create(&monitor->thread, NULL, monitor_main, monitor) != 0) {
        pthread_mutex_destroy(&monitor->mutex);
        pthread_cond_destroy(&monitor->wakeup);
        bson_free(monitor);
        tc_error_set(error, TC_ERR_INTERNAL, "cannot start the TTL monitor's thread");
        return NULL;
    }
    return monitor;
}

void ttl_monitor_stop(ttl_monitor_t *monitor)
{
    if (monitor == NULL) {
        return;
    }
    pthread_mutex_lock(&monitor->mutex);
    monitor->stop = true;
    pthread_cond_signal(&monitor->wakeup);
    pthread_mutex_unlock(&monitor->mutex);
    pthread_join(monitor->thread, NULL);
    pthread_mutex_destroy(&monitor->mutex);
    pthread_cond_destroy(&monitor->wakeup);
    bson_free(monitor);
}

int64_t ttl_monitor_sleep_seconds(ttl_monitor_t *monitor)
{
    return atomic_load(&monitor->sleep_seconds);
}

void ttl_monitor_set_sleep_seconds(ttl_monitor_t *monitor, int64_t seconds)
{
    atomic_store(&monitor->sleep_seconds, seconds);
}

bool ttl_monitor_enabled(ttl_monitor_t *monitor)
{
    return atomic_load(&monitor->enabled);
}

void ttl_monitor_set_enabled(ttl_monitor_t *monitor, bool enabled)
{
    atomic_store(&monitor->enabled, enabled);
}

void ttl_monitor_append_metrics(ttl_monitor_t *monitor, bson_t *out)
{
    BSON_APPEND_INT64(out, "deletedDocuments", atomic_load(&monitor->deleted_documents));
    BSON_APPEND_INT64(out, "passes", atomic_load(&monitor->passes));
}
