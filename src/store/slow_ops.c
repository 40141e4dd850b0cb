/* The store's slow-operation log lines (see slow_ops.h). */
#include "store/slow_ops.h"

#include "common/bson_view.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/text_buffer.h"

#include <string.h>

#define LINE_SIZE 1024

void slow_op_start(slow_op_watch_t *watch, int64_t submitted_us)
{
    watch->started_us = clock_monotonic_us();
    watch->submitted_us = submitted_us > 0 && submitted_us <= watch->started_us ? submitted_us : watch->started_us;
    watch->reads_before = slow_disk_thread_reads();
}

/* What a successful command returned or wrote, named as mongod's slow-query fields. */
static void append_reply_counts(text_buffer_t *text, const char *name, const bson_t *reply)
{
    bson_iter_t iter, batch;
    if (name == NULL || reply == NULL) {
        return;
    }
    if (strcmp(name, "find") == 0 || strcmp(name, "aggregate") == 0 || strcmp(name, "getMore") == 0) {
        if (bson_iter_init(&iter, reply) && (bson_iter_find_descendant(&iter, "cursor.firstBatch", &batch) ||
                                             (bson_iter_init(&iter, reply) &&
                                              bson_iter_find_descendant(&iter, "cursor.nextBatch", &batch))) &&
            BSON_ITER_HOLDS_ARRAY(&batch) && bson_iter_recurse(&batch, &iter)) {
            uint32_t returned = 0;
            while (bson_iter_next(&iter)) {
                returned++;
            }
            text_buffer_append(text, "; nreturned %u", returned);
        }
        return;
    }
    int64_t count = bson_iter_init_find(&iter, reply, "n") ? bson_iter_as_int64(&iter) : 0;
    if (strcmp(name, "insert") == 0) {
        text_buffer_append(text, "; ninserted %lld", (long long)count);
    } else if (strcmp(name, "delete") == 0) {
        text_buffer_append(text, "; ndeleted %lld", (long long)count);
    } else if (strcmp(name, "update") == 0) {
        /* The reply's n counts the upserted documents too; mongod's nMatched does not. */
        int64_t modified = bson_iter_init_find(&iter, reply, "nModified") ? bson_iter_as_int64(&iter) : 0;
        bson_t upserted;
        int64_t upserted_count = bson_iter_init_find(&iter, reply, "upserted") && BSON_ITER_HOLDS_ARRAY(&iter) &&
                                         bson_view_of(&iter, &upserted)
                                     ? bson_count_keys(&upserted)
                                     : 0;
        text_buffer_append(text, "; nMatched %lld, nModified %lld, nUpserted %lld", (long long)(count - upserted_count),
                           (long long)modified, (long long)upserted_count);
    }
}

void slow_op_finish(const slow_op_watch_t *watch, store_t *store, storage_session_t *session, const char *name,
                    const char *database, const bson_t *command, const bson_t *reply, const bson_error_t *error,
                    uint64_t connection_id)
{
    int64_t slow_ms = store->options.slow_ms;
    int64_t now = clock_monotonic_us();
    int64_t total_ms = (now - watch->submitted_us) / 1000;
    if (now - watch->submitted_us <= slow_ms * 1000 || !tc_log_enabled(TC_LOG_INFO)) {
        return; /* as mongod: slower than slowms, so 0 logs every command */
    }
    slow_disk_thread_reads_t reads = slow_disk_thread_reads();
    storage_pressure_t pressure;
    bool have_pressure = session != NULL && storage_read_pressure(session, &pressure);
    /* The facts that apply to some operations only, as one text; the others are
     * attributes of their own (in attr under --log-format json, as mongod's). */
    char details[LINE_SIZE], shape[LINE_SIZE];
    text_buffer_t text = {.data = details, .size = sizeof details};
    details[0] = '\0';
    uint64_t throttled = reads.throttled_wait_micros - watch->reads_before.throttled_wait_micros;
    if (throttled > 0) {
        text_buffer_append(&text, ", of which waiting for the emulated disk (--read-iops) %llu ms",
                           (unsigned long long)(throttled / 1000));
    }
    if (have_pressure) {
        text_buffer_append(&text, "; WiredTiger: %scache %.0f%% used, %.0f%% dirty",
                           pressure.checkpoint_running ? "checkpoint running, " : "", pressure.cache_used_percent,
                           pressure.cache_dirty_percent);
    }
    if (error == NULL) {
        append_reply_counts(&text, name, reply);
    } else {
        text_buffer_append(&text, "; failed with %s (%u)", tc_error_code_name((int32_t)error->code), error->code);
    }
    text_buffer_t shape_text = {.data = shape, .size = sizeof shape};
    shape[0] = '\0';
    text_buffer_append_shape(&shape_text, command);
    TC_LOG_ATTRS(TC_LOG_INFO, "COMMAND", connection_id,
                 "Slow query: {command} on {ns} took {durationMillis} ms (slowms {slowms}): queued for a worker "
                 "{queuedMillis} ms, running {runningMillis} ms; data-file reads {dataFileReads} ({dataFileBytes} "
                 "bytes) {dataFileMillis} ms{details}; command {shape}",
                 TC_ATTR_STR("command", name != NULL ? name : "(unparsed)"),
                 TC_ATTR_STR("ns", database != NULL ? database : "(no database)"),
                 TC_ATTR_INT("durationMillis", total_ms), TC_ATTR_INT("slowms", slow_ms),
                 TC_ATTR_INT("queuedMillis", (watch->started_us - watch->submitted_us) / 1000),
                 TC_ATTR_INT("runningMillis", (now - watch->started_us) / 1000),
                 TC_ATTR_INT("dataFileReads", reads.reads - watch->reads_before.reads),
                 TC_ATTR_INT("dataFileBytes", reads.bytes_read - watch->reads_before.bytes_read),
                 TC_ATTR_INT("dataFileMillis", (reads.read_micros - watch->reads_before.read_micros) / 1000),
                 TC_ATTR_STR("details", details), TC_ATTR_STR("shape", shape));
}
