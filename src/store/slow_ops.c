/* The store's slow-operation log lines (see slow_ops.h). */
#include "store/slow_ops.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/text_buffer.h"

#define LINE_SIZE 1024

void slow_op_start(slow_op_watch_t *watch, int64_t submitted_us)
{
    watch->started_us = clock_monotonic_us();
    watch->submitted_us = submitted_us > 0 && submitted_us <= watch->started_us ? submitted_us : watch->started_us;
    watch->reads_before = slow_disk_thread_reads();
}

void slow_op_finish(const slow_op_watch_t *watch, store_t *store, storage_session_t *session, const char *name,
                    const char *database, const bson_t *command, const bson_error_t *error, uint64_t connection_id)
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
    char line[LINE_SIZE];
    text_buffer_t text = {.data = line, .size = sizeof line};
    line[0] = '\0';
    text_buffer_append(&text, "Slow query: %s on %s took %lld ms (slowms %lld): queued for a worker %lld ms, "
                              "running %lld ms; data-file reads %llu (%llu bytes) %llu ms",
                       name != NULL ? name : "(unparsed)", database != NULL ? database : "(no database)",
                       (long long)total_ms, (long long)slow_ms,
                       (long long)((watch->started_us - watch->submitted_us) / 1000),
                       (long long)((now - watch->started_us) / 1000),
                       (unsigned long long)(reads.reads - watch->reads_before.reads),
                       (unsigned long long)(reads.bytes_read - watch->reads_before.bytes_read),
                       (unsigned long long)((reads.read_micros - watch->reads_before.read_micros) / 1000));
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
    if (error != NULL) {
        text_buffer_append(&text, "; failed with %s (%u)", tc_error_code_name((int32_t)error->code), error->code);
    }
    text_buffer_append(&text, "; command ");
    text_buffer_append_shape(&text, command);
    TC_LOG(TC_LOG_INFO, "COMMAND", connection_id, "%s", line);
}
