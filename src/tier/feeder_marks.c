/* The feeder's upkeep of the worker-writes marks (tier/worker_writes.h): which
 * eviction ranges deletes took, and the marks it has passed long enough ago. */
#include "tier/feeder_private.h"

#include "common/bson_view.h"
#include "common/log.h"
#include "common/timestamp.h"

#define LOG_COMPONENT "FEEDER"

/* Whether a delete already took the eviction mark key's range ending at range_to
 * (consumed: {key, to} entries); if not, this one takes it. */
bool feeder_consume_range(bson_t *consumed, const bson_t *key, uint64_t range_to)
{
    bson_iter_t iter, field;
    bson_iter_init(&iter, consumed);
    while (bson_iter_next(&iter)) {
        bson_t item, item_key;
        if (bson_view_of(&iter, &item) && bson_iter_init_find(&field, &item, "key") &&
            bson_view_of(&field, &item_key) && bson_equal(&item_key, key) && timestamp_find(&item, "to") == range_to) {
            return false;
        }
    }
    char index_key[16];
    const char *index_string;
    bson_t entry;
    bson_uint32_to_string(bson_count_keys(consumed), &index_string, index_key, sizeof index_key);
    BSON_APPEND_DOCUMENT_BEGIN(consumed, index_string, &entry);
    BSON_APPEND_DOCUMENT(&entry, "key", key);
    timestamp_append(&entry, "to", range_to);
    bson_append_document_end(consumed, &entry);
    return true;
}

/* The indexes feeder_clean_marks' clauses (and the warmer's and the recovery's
 * reads of pending marks) are bounded by: without them every clean, once a
 * second, scanned every mark of the last WORKER_WRITES_RETENTION_SECONDS (a
 * faithful lab's warm-up alone leaves 54,000), a tenth of a second of the fast
 * tier's CPU each time. Creating existing indexes again is a no-op. */
void feeder_index_marks(feeder_t *feeder)
{
    static const char *const second_fields[] = {"to", "since"};
    bson_t command = BSON_INITIALIZER, indexes, index, key, reply;
    bson_error_t error;
    BSON_APPEND_UTF8(&command, "createIndexes", TIER_MARKS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "indexes", &indexes);
    for (uint32_t i = 0; i < sizeof second_fields / sizeof second_fields[0]; i++) {
        char array_key[16], name[32];
        const char *array_key_string;
        bson_uint32_to_string(i, &array_key_string, array_key, sizeof array_key);
        bson_append_document_begin(&indexes, array_key_string, -1, &index);
        BSON_APPEND_DOCUMENT_BEGIN(&index, "key", &key);
        BSON_APPEND_INT32(&key, "state", 1);
        BSON_APPEND_INT32(&key, second_fields[i], 1);
        bson_append_document_end(&index, &key);
        snprintf(name, sizeof name, "state_1_%s_1", second_fields[i]);
        BSON_APPEND_UTF8(&index, "name", name);
        bson_append_document_end(&indexes, &index);
    }
    bson_append_array_end(&command, &indexes);
    if (!tier_command(feeder->fast, TIER_DATABASE, &command, &reply, &error)) {
        TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, 0,
               "cannot index %s.%s (%s): cleaning the marks scans them all until it can", TIER_DATABASE,
               TIER_MARKS_COLLECTION, error.message);
    }
    bson_destroy(&reply);
    bson_destroy(&command);
}

/* Marks the feeder has matched or passed: done marks WORKER_WRITES_RETENTION_SECONDS
 * before the applied time (the proxy's clients' change streams, which may lag or
 * resume behind the feeder, classify their events with them too), "recovered"
 * marks consumed since the last clean, copy marks left pending a minute. */
void feeder_clean_marks(feeder_t *feeder)
{
    bson_t command = BSON_INITIALIZER, deletes, statement, query, any, clause, condition, concern, reply, kinds;
    bson_error_t error;
    uint32_t seconds = (uint32_t)(feeder->applied_time >> 32);
    uint32_t retained = seconds > WORKER_WRITES_RETENTION_SECONDS ? seconds - WORKER_WRITES_RETENTION_SECONDS : 0;
    BSON_APPEND_UTF8(&command, "delete", TIER_MARKS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&command, "deletes", &deletes);
    BSON_APPEND_DOCUMENT_BEGIN(&deletes, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    BSON_APPEND_ARRAY_BEGIN(&query, "$or", &any);
    BSON_APPEND_DOCUMENT_BEGIN(&any, "0", &clause);
    BSON_APPEND_UTF8(&clause, "state", "done");
    BSON_APPEND_DOCUMENT_BEGIN(&clause, "to", &condition);
    bson_append_timestamp(&condition, "$lte", 4, retained, 0);
    bson_append_document_end(&clause, &condition);
    bson_append_document_end(&any, &clause);
    BSON_APPEND_DOCUMENT_BEGIN(&any, "1", &clause);
    BSON_APPEND_DOCUMENT_BEGIN(&clause, "_id.op", &condition);
    BSON_APPEND_ARRAY_BEGIN(&condition, "$in", &kinds);
    BSON_APPEND_UTF8(&kinds, "0", "warm");
    BSON_APPEND_UTF8(&kinds, "1", "fault");
    bson_append_array_end(&condition, &kinds);
    bson_append_document_end(&clause, &condition);
    BSON_APPEND_UTF8(&clause, "state", "pending");
    BSON_APPEND_DOCUMENT_BEGIN(&clause, "since", &condition);
    bson_append_timestamp(&condition, "$lt", 3, seconds > 60 ? seconds - 60 : 0, 0);
    bson_append_document_end(&clause, &condition);
    bson_append_document_end(&any, &clause);
    if (!bson_empty(&feeder->consumed_marks)) {
        bson_t keys;
        bson_iter_t entry, field;
        uint32_t count = 0;
        BSON_APPEND_DOCUMENT_BEGIN(&any, "2", &clause);
        BSON_APPEND_UTF8(&clause, "state", "recovered");
        BSON_APPEND_DOCUMENT_BEGIN(&clause, "_id", &condition);
        BSON_APPEND_ARRAY_BEGIN(&condition, "$in", &keys);
        bson_iter_init(&entry, &feeder->consumed_marks);
        while (bson_iter_next(&entry)) {
            bson_t item, key;
            char index_key[16];
            const char *index_string;
            if (bson_view_of(&entry, &item) && bson_iter_init_find(&field, &item, "key") && bson_view_of(&field, &key)) {
                bson_uint32_to_string(count++, &index_string, index_key, sizeof index_key);
                BSON_APPEND_DOCUMENT(&keys, index_string, &key);
            }
        }
        bson_append_array_end(&condition, &keys);
        bson_append_document_end(&clause, &condition);
        bson_append_document_end(&any, &clause);
    }
    bson_append_array_end(&query, &any);
    bson_append_document_end(&statement, &query);
    BSON_APPEND_INT32(&statement, "limit", 0);
    bson_append_document_end(&deletes, &statement);
    bson_append_array_end(&command, &deletes);
    BSON_APPEND_DOCUMENT_BEGIN(&command, "writeConcern", &concern);
    BSON_APPEND_INT32(&concern, "w", 1);
    bson_append_document_end(&command, &concern);
    if (tier_command(feeder->fast, TIER_DATABASE, &command, &reply, &error)) {
        bson_reinit(&feeder->consumed_marks);
    }
    bson_destroy(&reply);
    bson_destroy(&command);
}
