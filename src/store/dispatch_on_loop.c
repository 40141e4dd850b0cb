/* Point reads on the server's loop thread. A find by _id (or by a few) on a
 * cached collection costs less than handing it to a sleeping worker and back: on
 * a busy machine the two context switches are most of the store's CPU per read.
 * Which thread runs a request never changes its answer: dispatch_message() does
 * the work. */
#include "store/dispatch.h"
#include "common/clock.h"
#include "store/slow_disk.h"
#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

/* After a point read here read a data file (a pread, slow_disk.c: a miss of
 * WiredTiger's cache), reads go to the workers this long: the data has outgrown
 * the cache, and such reads would hold every connection behind the disk. So at
 * most about one such read a second runs on the loop. */
#define POINT_READS_PAUSE_AFTER_DISK_MS 1000

/* Past eviction_trigger (95% full) or eviction_dirty_trigger (20% dirty)
 * WiredTiger makes the reading thread evict pages and wait; the loop keeps out
 * a little before, reading the cache's fill at most this often. */
#define POINT_READS_PRESSURE_CHECK_MS 100
#define POINT_READS_MAX_CACHE_USED_PERCENT 90.0
#define POINT_READS_MAX_CACHE_DIRTY_PERCENT 15.0

/* A find of {_id: {$in: ids}} runs here with at most this many ids: with a cold
 * cache each may read two pages from disk before the pause above begins, while
 * every connection waits for the loop. */
#define POINT_READ_MAX_IDS 8

/* The find fields whose work is bounded by the one document an _id matches.
 * Anything else (hint, min, max, collation, tailable, a transaction's fields)
 * may scan or wait, and goes to a worker. */
static bool is_point_read_field(const char *field)
{
    static const char *const fields[] = {
        "find",           "filter",          "projection",  "sort",        "skip",          "limit",
        "batchSize",      "singleBatch",     "comment",     "maxTimeMS",   "readConcern",   "$db",
        "lsid",           "$clusterTime",    "$readPreference", "apiVersion", "apiStrict",
        "apiDeprecationErrors", "noCursorTimeout", "allowPartialResults", "returnKey", "showRecordId",
        NULL,
    };
    for (const char *const *name = fields; *name != NULL; name++) {
        if (strcmp(field, *name) == 0) {
            return true;
        }
    }
    return false;
}

/* An _id the _id index finds by an exact search: a plain scalar (not an operator
 * document, an array, a regex, null...). */
static bool is_exact_id(const bson_iter_t *value)
{
    switch (bson_iter_type(value)) {
    case BSON_TYPE_UTF8:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
    case BSON_TYPE_OID:
    case BSON_TYPE_DATE_TIME:
    case BSON_TYPE_BINARY:
    case BSON_TYPE_BOOL:
    case BSON_TYPE_TIMESTAMP:
        return true;
    default:
        return false;
    }
}

/* {$in: [id, ...]}, one to POINT_READ_MAX_IDS exact ids: that many searches (the
 * proxy asks this before each write, whether the fast tier holds its ids). */
static bool is_few_ids(const bson_iter_t *condition)
{
    bson_iter_t operators, ids;
    if (!BSON_ITER_HOLDS_DOCUMENT(condition) || !bson_iter_recurse(condition, &operators) ||
        !bson_iter_next(&operators) || strcmp(bson_iter_key(&operators), "$in") != 0 ||
        !BSON_ITER_HOLDS_ARRAY(&operators) || !bson_iter_recurse(&operators, &ids) || bson_iter_next(&operators)) {
        return false;
    }
    int count = 0;
    while (bson_iter_next(&ids)) {
        if (!is_exact_id(&ids) || ++count > POINT_READ_MAX_IDS) {
            return false;
        }
    }
    return count > 0;
}

/* {_id: id} or {_id: {$in: [a few ids]}}: exact searches in the _id index. */
static bool is_id_lookup(const bson_iter_t *filter_field)
{
    bson_iter_t filter;
    if (!BSON_ITER_HOLDS_DOCUMENT(filter_field) || !bson_iter_recurse(filter_field, &filter) ||
        !bson_iter_next(&filter) || strcmp(bson_iter_key(&filter), "_id") != 0) {
        return false;
    }
    if (!is_exact_id(&filter) && !is_few_ids(&filter)) {
        return false;
    }
    return !bson_iter_next(&filter);
}

bool dispatch_is_point_read(const bson_t *body, char *out_ns, size_t ns_size)
{
    bson_iter_t iter;
    const char *collection = NULL;
    const char *database = NULL;
    bool has_filter = false;
    if (!bson_iter_init(&iter, body) || !bson_iter_next(&iter) || strcmp(bson_iter_key(&iter), "find") != 0 ||
        !BSON_ITER_HOLDS_UTF8(&iter)) {
        return false;
    }
    collection = bson_iter_utf8(&iter, NULL);
    while (bson_iter_next(&iter)) {
        const char *field = bson_iter_key(&iter);
        if (!is_point_read_field(field)) {
            return false;
        }
        if (strcmp(field, "filter") == 0) {
            if (!is_id_lookup(&iter)) {
                return false;
            }
            has_filter = true;
        } else if (strcmp(field, "$db") == 0 && database == NULL && BSON_ITER_HOLDS_UTF8(&iter)) {
            database = bson_iter_utf8(&iter, NULL); /* the first, as dispatch_command reads it */
        }
    }
    if (!has_filter || database == NULL) {
        return false;
    }
    int written = snprintf(out_ns, ns_size, "%s.%s", database, collection);
    return written > 0 && (size_t)written < ns_size;
}

/* Whether the loop may run point reads now: not paused after a read from a
 * data file, and WiredTiger's cache not near the fill that drafts readers into
 * eviction. */
static bool loop_may_read(store_t *store, storage_session_t *session)
{
    int64_t now_ms = clock_monotonic_ms();
    if (now_ms < store->loop_point_reads.paused_until_ms) {
        return false;
    }
    if (now_ms - store->loop_point_reads.pressure_checked_ms >= POINT_READS_PRESSURE_CHECK_MS) {
        storage_pressure_t pressure;
        bool known = storage_read_pressure(session, &pressure);
        store->loop_point_reads.cache_pressed = !known ||
                                                pressure.cache_used_percent >= POINT_READS_MAX_CACHE_USED_PERCENT ||
                                                pressure.cache_dirty_percent >= POINT_READS_MAX_CACHE_DIRTY_PERCENT;
        store->loop_point_reads.pressure_checked_ms = now_ms;
    }
    return !store->loop_point_reads.cache_pressed;
}

/* The message is one OP_MSG section, its body: no document sequence (which the
 * command would merge in unchecked here) and no checksum. */
static bool is_body_alone(const server_request_t *request, const bson_t *body)
{
    return request->length == WIRE_HEADER_SIZE + sizeof(uint32_t) + 1 + body->len;
}

bool dispatch_point_read_on_loop(store_t *store, storage_session_t *session, const server_request_t *request,
                                 server_reply_t *out_reply)
{
    bson_t body;
    bson_error_t error;
    char ns[256];
    if (!wire_op_msg_find_body(request->message, request->length, &body, &error) ||
        !is_body_alone(request, &body) || !dispatch_is_point_read(&body, ns, sizeof ns) ||
        !loop_may_read(store, session)) {
        return false;
    }
    /* Holding the catalog shared across the command keeps a DDL from taking it
     * between this check and the handler's own shared lock, which then cannot
     * wait (the lock prefers readers): the loop never waits for an index build. */
    if (!storage_try_lock_shared(store->storage)) {
        return false;
    }
    if (storage_find_collection(store->storage, ns) == NULL) {
        storage_unlock(store->storage); /* a view's pipeline, or nothing: a worker's */
        return false;
    }
    slow_disk_thread_reads_t before = slow_disk_thread_reads();
    dispatch_message(store, session, request, out_reply);
    storage_unlock(store->storage);
    if (slow_disk_thread_reads().reads != before.reads) {
        store->loop_point_reads.paused_until_ms = clock_monotonic_ms() + POINT_READS_PAUSE_AFTER_DISK_MS;
    }
    atomic_fetch_add_explicit(&store->loop_point_reads.count, 1, memory_order_relaxed);
    return true;
}
