/* `thermocline check`, one namespace: can the archive's collection be tiered (the
 * checks at start, preflight.c), how many documents have no date in the time field
 * (they belong to no window), how large the window is (estimated from the archive:
 * count newer than maxAge times the average document, plus the indexes pro rata),
 * and what the index sync (index_sync.c) would change on the fast tier. */
#include "tier/check_private.h"

#include "common/clock.h"

#include <string.h>

/* The undated documents are a sample: counting stops there. */
#define UNDATED_SAMPLE_LIMIT 1000
/* Counts on a large archive may scan: bounded, and reported when cut short. */
#define COUNT_TIME_LIMIT_MS 10000

/* Runs {count: collection, query: filter, limit, maxTimeMS} on the archive. */
static bool count_documents(mongoc_client_t *client, const config_namespace_t *policy, const bson_t *filter,
                            int64_t limit, int64_t *out_count, bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, reply;
    bson_iter_t iter;
    BSON_APPEND_UTF8(&command, "count", policy->collection);
    BSON_APPEND_DOCUMENT(&command, "query", filter);
    if (limit > 0) {
        BSON_APPEND_INT64(&command, "limit", limit);
    }
    BSON_APPEND_INT32(&command, "maxTimeMS", COUNT_TIME_LIMIT_MS);
    bool ok = tier_command(client, policy->database, &command, &reply, error);
    *out_count = ok && bson_iter_init_find(&iter, &reply, "n") && BSON_ITER_HOLDS_NUMBER(&iter)
                     ? bson_iter_as_int64(&iter)
                     : 0;
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

static void check_undated(check_report_t *report, mongoc_client_t *archive, const config_namespace_t *policy)
{
    bson_t filter = BSON_INITIALIZER, condition, negated;
    bson_error_t error;
    int64_t count = 0;
    bson_append_document_begin(&filter, policy->time_field, -1, &condition);
    BSON_APPEND_DOCUMENT_BEGIN(&condition, "$not", &negated);
    BSON_APPEND_UTF8(&negated, "$type", "date");
    bson_append_document_end(&condition, &negated);
    bson_append_document_end(&filter, &condition);
    if (!count_documents(archive, policy, &filter, UNDATED_SAMPLE_LIMIT, &count, &error)) {
        check_report(report, CHECK_WARNING,
                     "archive: %s: cannot count the documents without a date in %s (%s): count them at a quiet "
                     "time (find({%s: {$not: {$type: \"date\"}}}))",
                     policy->ns, policy->time_field, check_reason(&error), policy->time_field);
    } else if (count > 0) {
        check_report(report, CHECK_WARNING,
                     "archive: %s: %s%lld documents have no date in %s: they belong to no window, so they stay in the "
                     "archive and every read that may match them is answered there; give them a date in %s if they "
                     "should be tiered (find them with {%s: {$not: {$type: \"date\"}}})",
                     policy->ns, count >= UNDATED_SAMPLE_LIMIT ? "at least " : "", (long long)count,
                     policy->time_field, policy->time_field, policy->time_field);
    }
    bson_destroy(&filter);
}

/* The window's size, estimated from the archive (which holds every document). */
static void measure_window(check_report_t *report, mongoc_client_t *archive, const config_namespace_t *policy,
                           check_window_t *out_window)
{
    bson_t filter = BSON_INITIALIZER, condition, command = BSON_INITIALIZER, stats;
    bson_error_t error;
    bson_iter_t iter;
    int64_t documents = 0;
    bson_append_document_begin(&filter, policy->time_field, -1, &condition);
    BSON_APPEND_DATE_TIME(&condition, "$gte", clock_wall_ms() - policy->max_age_ms);
    bson_append_document_end(&filter, &condition);
    BSON_APPEND_UTF8(&command, "collStats", policy->collection);
    if (!count_documents(archive, policy, &filter, 0, &documents, &error) ||
        !tier_command(archive, policy->database, &command, &stats, &error)) {
        check_report(report, CHECK_WARNING,
                     "archive: %s: cannot measure its window (%s): compare the size of the documents newer than "
                     "maxAge with the fast tier's cache by hand",
                     policy->ns, check_reason(&error));
    } else {
        double average = 0, index_bytes = 0, total_documents = 0;
        if (bson_iter_init_find(&iter, &stats, "avgObjSize") && BSON_ITER_HOLDS_NUMBER(&iter)) {
            average = bson_iter_as_double(&iter);
        }
        if (bson_iter_init_find(&iter, &stats, "totalIndexSize") && BSON_ITER_HOLDS_NUMBER(&iter)) {
            index_bytes = bson_iter_as_double(&iter);
        }
        if (bson_iter_init_find(&iter, &stats, "count") && BSON_ITER_HOLDS_NUMBER(&iter)) {
            total_documents = bson_iter_as_double(&iter);
        }
        out_window->measured = true;
        out_window->documents = documents;
        out_window->data_bytes = (double)documents * average;
        out_window->index_bytes = total_documents > 0 ? index_bytes * (double)documents / total_documents : 0;
        check_report(report, CHECK_NOTE, "archive: %s: %lld documents newer than maxAge, ~%.0f bytes and ~%.0f of "
                     "index", policy->ns, (long long)documents, out_window->data_bytes, out_window->index_bytes);
    }
    bson_destroy(&stats);
    bson_destroy(&command);
    bson_destroy(&filter);
}

/* The names of a BSON array of strings, ", "-separated, into out. */
static void join_names(const bson_t *names, char *out, size_t size)
{
    bson_iter_t iter;
    size_t used = 0;
    out[0] = '\0';
    bson_iter_init(&iter, names);
    while (bson_iter_next(&iter) && used < size) {
        int written = snprintf(out + used, size - used, "%s%s", used > 0 ? ", " : "", bson_iter_utf8(&iter, NULL));
        used += written > 0 ? (size_t)written : 0;
    }
}

static void check_parity(check_report_t *report, mongoc_client_t *archive, mongoc_client_t *fast,
                         const config_namespace_t *policy)
{
    bson_t create, drop;
    bson_error_t error;
    bool fast_exists = false, validation_differs = false, collation_differs = false;
    if (!index_sync_plan(archive, fast, policy, &fast_exists, &create, &drop, &validation_differs, &collation_differs,
                         &error)) {
        check_report(report, CHECK_WARNING, "fast: %s: cannot compare its indexes with the archive's (%s)", policy->ns,
                     check_reason(&error));
    } else if (!fast_exists) {
        check_report(report, CHECK_NOTE, "fast: %s not there yet: the index sync creates it as the archive's",
                     policy->ns);
    } else if (collation_differs) {
        check_report(report, CHECK_ERROR,
                     "fast: %s has another default collation than the archive's collection, and no command changes "
                     "it: drop the collection on the fast tier before the proxy starts (the index sync creates it "
                     "as the archive's)",
                     policy->ns);
    } else if (!bson_empty(&create) || !bson_empty(&drop) || validation_differs) {
        char created[400], dropped[400];
        join_names(&create, created, sizeof created);
        join_names(&drop, dropped, sizeof dropped);
        check_report(report, CHECK_WARNING,
                     "fast: %s differs from the archive's definition: the index sync (before the warmer's first "
                     "pass, then every indexSyncPeriod) will drop [%s], create [%s]%s; make such changes on the "
                     "archive (the fast tier follows it), and expect index builds on a large fast tier to delay "
                     "its coverage",
                     policy->ns, dropped, created, validation_differs ? " and set the archive's validator" : "");
    }
    bson_destroy(&create);
    bson_destroy(&drop);
}

void check_namespace(check_report_t *report, mongoc_client_t *archive, mongoc_client_t *fast,
                     const config_namespace_t *policy, check_window_t *out_window)
{
    bson_t info;
    bson_error_t error;
    bool exists = false, has_index = false;
    if (!index_sync_collection_info(archive, policy, &info, &exists, &error)) {
        check_report(report, CHECK_WARNING, "archive: %s: cannot read its collection (%s)", policy->ns,
                     check_reason(&error));
    } else if (!exists) {
        check_report(report, CHECK_WARNING,
                     "archive: %s does not exist yet: create it and its index {%s: 1} before loading it (the "
                     "warmer's passes read the window through it)",
                     policy->ns, policy->time_field);
    } else if (preflight_untierable_reason(&info) != NULL) {
        check_report(report, CHECK_ERROR, "archive: %s cannot be tiered: %s; take it out of the config's namespaces",
                     policy->ns, preflight_untierable_reason(&info));
    } else {
        if (!preflight_has_time_field_index(archive, policy, &has_index, &error)) {
            check_report(report, CHECK_WARNING, "archive: %s: cannot list its indexes (%s)", policy->ns,
                         check_reason(&error));
        } else if (!has_index) {
            char advice[600];
            preflight_time_index_advice(policy, advice, sizeof advice);
            check_report(report, policy->require_time_field_index ? CHECK_ERROR : CHECK_WARNING, "archive: %s%s",
                         advice, policy->require_time_field_index ? " (or set requireTimeFieldIndex: false for it)"
                                                                  : " (requireTimeFieldIndex: false)");
        }
        check_undated(report, archive, policy);
        measure_window(report, archive, policy, out_window);
        if (fast != NULL) {
            check_parity(report, archive, fast, policy);
        }
    }
    bson_destroy(&info);
}
