/* The store's slow-operation log lines (see slow_ops.h). */
#include "store/slow_ops.h"

#include "common/bson_view.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/text_buffer.h"
#include "store/op_latency.h"

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

/* The facts of one slow line, from slow_op_finish or a held durable write. */
typedef struct slow_line {
    const char *name;
    const char *database;
    const char *shape;
    const char *outcome; /* reply counts or the failure */
    uint64_t connection_id;
    int64_t slow_ms;
    const slow_op_watch_t *watch;
    int64_t ended_us;               /* the command's end */
    int64_t journal_wait_us;        /* -1: its reply did not wait for the journal */
    slow_disk_thread_reads_t reads; /* the command's own data-file reads */
    storage_session_t *session;     /* for WiredTiger's state, or NULL */
} slow_line_t;

#define MESSAGE_HEAD "Slow query: {command} on {ns} took {durationMillis} ms (slowms {slowms}): queued for a worker "
#define MESSAGE_TAIL                                                                                                 \
    "data-file reads {dataFileReads} ({dataFileBytes} bytes) {dataFileMillis} ms{details}; command {shape}"

static void write_line(const slow_line_t *line, int64_t now)
{
    storage_pressure_t pressure;
    bool have_pressure = line->session != NULL && storage_read_pressure(line->session, &pressure);
    /* The facts that apply to some operations only, as one text; the others are
     * attributes of their own (in attr under --log-format json, as mongod's). */
    char details[LINE_SIZE];
    text_buffer_t text = {.data = details, .size = sizeof details};
    details[0] = '\0';
    if (line->reads.throttled_wait_micros > 0) {
        text_buffer_append(&text, ", of which waiting for the emulated disk (--read-iops) %llu ms",
                           (unsigned long long)(line->reads.throttled_wait_micros / 1000));
    }
    if (have_pressure) {
        text_buffer_append(&text, "; WiredTiger: %scache %.0f%% used, %.0f%% dirty",
                           pressure.checkpoint_running ? "checkpoint running, " : "", pressure.cache_used_percent,
                           pressure.cache_dirty_percent);
    }
    text_buffer_append(&text, "%s", line->outcome);
    tc_log_attr_t attrs[] = {
        TC_ATTR_STR("command", line->name != NULL ? line->name : "(unparsed)"),
        TC_ATTR_STR("ns", line->database != NULL ? line->database : "(no database)"),
        TC_ATTR_INT("durationMillis", (now - line->watch->submitted_us) / 1000),
        TC_ATTR_INT("slowms", line->slow_ms),
        TC_ATTR_INT("queuedMillis", (line->watch->started_us - line->watch->submitted_us) / 1000),
        TC_ATTR_INT("runningMillis", (line->ended_us - line->watch->started_us) / 1000),
        TC_ATTR_INT("dataFileReads", line->reads.reads),
        TC_ATTR_INT("dataFileBytes", line->reads.bytes_read),
        TC_ATTR_INT("dataFileMillis", line->reads.read_micros / 1000),
        TC_ATTR_STR("details", details),
        TC_ATTR_STR("shape", line->shape),
        TC_ATTR_INT("waitForWriteConcernDurationMillis", line->journal_wait_us / 1000),
    };
    size_t count = sizeof attrs / sizeof attrs[0];
    if (line->journal_wait_us < 0) {
        tc_log_write_attrs(TC_LOG_INFO, "COMMAND", line->connection_id,
                           MESSAGE_HEAD "{queuedMillis} ms, running {runningMillis} ms; " MESSAGE_TAIL, attrs,
                           count - 1);
    } else {
        tc_log_write_attrs(TC_LOG_INFO, "COMMAND", line->connection_id,
                           MESSAGE_HEAD "{queuedMillis} ms, running {runningMillis} ms, waiting for the journal "
                                        "{waitForWriteConcernDurationMillis} ms; " MESSAGE_TAIL,
                           attrs, count);
    }
}

/* The reads since watch began, on this thread. */
static slow_disk_thread_reads_t reads_since(const slow_op_watch_t *watch)
{
    slow_disk_thread_reads_t now = slow_disk_thread_reads(), before = watch->reads_before;
    return (slow_disk_thread_reads_t){.reads = now.reads - before.reads,
                                      .bytes_read = now.bytes_read - before.bytes_read,
                                      .read_micros = now.read_micros - before.read_micros,
                                      .throttled_wait_micros = now.throttled_wait_micros -
                                                               before.throttled_wait_micros};
}

/* The outcome part of the line: what a success returned or wrote, or the failure. */
static void append_outcome(text_buffer_t *text, const char *name, const bson_t *reply, const bson_error_t *error)
{
    if (error == NULL) {
        append_reply_counts(text, name, reply);
    } else {
        text_buffer_append(text, "; failed with %s (%u)", tc_error_code_name((int32_t)error->code), error->code);
    }
}

void slow_op_finish(const slow_op_watch_t *watch, store_t *store, storage_session_t *session, const char *name,
                    const char *database, const bson_t *command, const bson_t *reply, const bson_error_t *error,
                    uint64_t connection_id)
{
    int64_t slow_ms = store->options.slow_ms;
    int64_t now = clock_monotonic_us();
    if (now - watch->submitted_us <= slow_ms * 1000 || !tc_log_enabled(TC_LOG_INFO)) {
        return; /* as mongod: slower than slowms, so 0 logs every command */
    }
    char outcome[LINE_SIZE], shape[LINE_SIZE];
    text_buffer_t outcome_text = {.data = outcome, .size = sizeof outcome};
    text_buffer_t shape_text = {.data = shape, .size = sizeof shape};
    outcome[0] = shape[0] = '\0';
    append_outcome(&outcome_text, name, reply, error);
    text_buffer_append_shape(&shape_text, command);
    slow_line_t line = {.name = name,
                        .database = database,
                        .shape = shape,
                        .outcome = outcome,
                        .connection_id = connection_id,
                        .slow_ms = slow_ms,
                        .watch = watch,
                        .ended_us = now,
                        .journal_wait_us = -1,
                        .reads = reads_since(watch),
                        .session = session};
    write_line(&line, now);
}

struct slow_op_held {
    store_t *store;
    uint64_t connection_id;
    current_op_entry_t *operation; /* active until slow_op_end_wait, or NULL */
    slow_op_watch_t watch;
    int64_t latency_started_us;
    int64_t ended_us;      /* the command's end, where the wait for the journal began */
    int64_t wait_ended_us; /* slow_op_end_wait's */
    slow_disk_thread_reads_t reads;
    char name[64];
    char database[128];
    char outcome[LINE_SIZE];
    bool has_command;
    bson_t command; /* slow_op_adopt_command's */
    char shape[LINE_SIZE];
};

slow_op_held_t *slow_op_hold(const slow_op_watch_t *watch, store_t *store, const char *name, const char *database,
                             const bson_t *reply, const bson_error_t *error, uint64_t connection_id,
                             int64_t latency_started_us, current_op_entry_t *operation)
{
    slow_op_held_t *held = BSON_ALIGNED_ALLOC0(slow_op_held_t); /* holds a bson_t */
    held->store = store;
    held->connection_id = connection_id;
    held->operation = operation;
    held->watch = *watch;
    held->latency_started_us = latency_started_us;
    held->ended_us = clock_monotonic_us();
    held->wait_ended_us = held->ended_us;
    held->reads = reads_since(watch);
    bson_strncpy(held->name, name, sizeof held->name);
    bson_strncpy(held->database, database, sizeof held->database);
    text_buffer_t outcome_text = {.data = held->outcome, .size = sizeof held->outcome};
    held->outcome[0] = held->shape[0] = '\0';
    append_outcome(&outcome_text, name, reply, error);
    held->has_command = false;
    return held;
}

void slow_op_adopt_command(slow_op_held_t *held, bson_t *command)
{
    if (held->has_command) {
        return;
    }
    current_op_move_command(held->store->operations, held->operation, command, &held->command);
    held->has_command = true;
}

void slow_op_end_wait(slow_op_held_t *held, bool synced)
{
    if (held == NULL) {
        return;
    }
    if (held->operation != NULL) {
        current_op_end(held->store->operations, held->operation);
        held->operation = NULL;
    }
    held->wait_ended_us = clock_monotonic_us();
    uint64_t latency_us = (uint64_t)(held->wait_ended_us - held->latency_started_us);
    op_latency_record(&held->store->latencies, held->name, latency_us);
    if (!synced) {
        text_buffer_t outcome_text = {.data = held->outcome, .size = sizeof held->outcome};
        outcome_text.length = strlen(held->outcome);
        text_buffer_append(&outcome_text, "; not acknowledged: the journal sync failed");
    }
}

void slow_op_release(slow_op_held_t *held, storage_session_t *session)
{
    if (held == NULL) {
        return;
    }
    int64_t now = held->wait_ended_us;
    int64_t slow_ms = held->store->options.slow_ms;
    if (now - held->watch.submitted_us > slow_ms * 1000 && tc_log_enabled(TC_LOG_INFO)) {
        if (held->has_command) {
            text_buffer_t shape_text = {.data = held->shape, .size = sizeof held->shape};
            text_buffer_append_shape(&shape_text, &held->command);
        }
        slow_line_t line = {.name = held->name,
                            .database = held->database,
                            .shape = held->shape,
                            .outcome = held->outcome,
                            .connection_id = held->connection_id,
                            .slow_ms = slow_ms,
                            .watch = &held->watch,
                            .ended_us = held->ended_us,
                            .journal_wait_us = now - held->ended_us,
                            .reads = held->reads,
                            .session = session};
        write_line(&line, now);
    }
    if (held->has_command) {
        bson_destroy(&held->command);
    }
    bson_free(held);
}
