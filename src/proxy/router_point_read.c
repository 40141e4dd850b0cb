/* A find by _id (PLAN_ROUTE_FAST_THEN_ARCHIVE): the fast tier first, then the
 * archive for the ids it lacked, the two answers merged in _id order. */
#include "proxy/router_private.h"

#include "query/order.h"
#include "wire/wire.h"

#include <stdlib.h>
#include <string.h>

/* --- point reads: the fast tier first, the archive for the ids it lacks ------------------
 * The fast tier holds the newest version of every document it holds (every write
 * lands there), so its answer stands for the ids it returns; the archive answers for
 * the others once the feeder has caught up. The two answers merge in _id order. */

static bool projection_hides_id(const fields_t *command)
{
    bson_iter_t iter, field;
    return fields_find(command, "projection", &iter) && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
           bson_iter_recurse(&iter, &field) && bson_iter_find(&field, "_id") &&
           (BSON_ITER_HOLDS_BOOL(&field) || BSON_ITER_HOLDS_NUMBER(&field)) && !bson_iter_as_bool(&field);
}

/* A find for ids (a BSON array) with the client's projection, sort and read concern,
 * answered in one batch. */
static bool build_point_find(proxy_request_t *request, const bson_t *filter, uint32_t id_count, uint8_t **out_message,
                             size_t *out_length, bson_error_t *error)
{
    static const char *const copied[] = {"projection", "sort", "readConcern", "maxTimeMS", "comment", "$db"};
    bson_t find = BSON_INITIALIZER;
    bson_iter_t iter;
    BSON_APPEND_UTF8(&find, "find", request->namespace_state->config->collection);
    BSON_APPEND_DOCUMENT(&find, "filter", filter);
    for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
        if (fields_find(&request->fields, copied[i], &iter)) {
            bson_append_iter(&find, copied[i], -1, &iter);
        }
    }
    BSON_APPEND_INT64(&find, "batchSize", (int64_t)id_count + 1);
    BSON_APPEND_BOOL(&find, "singleBatch", true);
    bool ok = wire_op_msg_build(0, 0, 0, &find, NULL, 0, out_message, out_length, error);
    bson_destroy(&find);
    return ok;
}

/* The opening of a find's reply (router_take_ok_reply): true with its body and
 * firstBatch (views into reply); false, the request finished, otherwise (an ok
 * reply without a firstBatch is relayed as it is too). */
static bool take_point_batch(proxy_request_t *request, const uint8_t *reply, size_t length, const bson_error_t *error,
                             bson_t *out_body, bson_t *out_batch)
{
    bson_iter_t iter, batch;
    uint32_t batch_length;
    const uint8_t *data;
    if (!router_take_ok_reply(request, reply, length, error, out_body)) {
        return false;
    }
    if (bson_iter_init(&iter, out_body) && bson_iter_find_descendant(&iter, "cursor.firstBatch", &batch) &&
        BSON_ITER_HOLDS_ARRAY(&batch)) {
        bson_iter_array(&batch, &batch_length, &data);
        if (bson_init_static(out_batch, data, batch_length)) {
            return true;
        }
    }
    router_relay_reply(request, reply, length);
    return false;
}

/* Raw bytes, not a bson_t: qsort moves these, and a static bson_t points into itself. */
typedef struct point_document {
    const uint8_t *data;
    uint32_t length;
    bson_value_t id;
} point_document_t;

static int compare_point_ascending(const void *left, const void *right)
{
    return order_compare_values(&((const point_document_t *)left)->id, &((const point_document_t *)right)->id);
}

static int compare_point_descending(const void *left, const void *right)
{
    return -compare_point_ascending(left, right);
}

static size_t collect_points(const bson_t *array, point_document_t *out, size_t count)
{
    bson_iter_t iter, id;
    bson_iter_init(&iter, array);
    while (bson_iter_next(&iter)) {
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            continue;
        }
        bson_t document;
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&document, data, length);
        out[count].data = data;
        out[count].length = length;
        out[count].id.value_type = BSON_TYPE_NULL;
        if (bson_iter_init_find(&id, &document, "_id")) {
            out[count].id = *bson_iter_value(&id);
        }
        count++;
    }
    return count;
}

/* Answers with the fast tier's documents and the archive's (NULL: none), in _id
 * order (descending for sort {_id: -1}), cut to the limit, in one batch. */
static void finish_point_read(proxy_request_t *request, const bson_t *archive_documents)
{
    size_t capacity = bson_count_keys(&request->route.point.fast_documents) +
                      (archive_documents != NULL ? bson_count_keys(archive_documents) : 0);
    point_document_t *points = bson_malloc0((capacity + 1) * sizeof *points);
    size_t count = collect_points(&request->route.point.fast_documents, points, 0);
    if (archive_documents != NULL) {
        count = collect_points(archive_documents, points, count);
    }
    bool descending = false;
    int64_t limit = 0;
    bson_iter_t iter, field;
    if (fields_find(&request->fields, "sort", &iter) && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
        bson_iter_recurse(&iter, &field) && bson_iter_next(&field)) {
        descending = bson_iter_as_double(&field) < 0;
    }
    if (fields_find(&request->fields, "limit", &iter) &&
        (BSON_ITER_HOLDS_NUMBER(&iter) || BSON_ITER_HOLDS_DECIMAL128(&iter))) {
        limit = (int64_t)bson_iter_as_double(&iter);
    }
    qsort(points, count, sizeof *points, descending ? compare_point_descending : compare_point_ascending);
    if (limit > 0 && (size_t)limit < count) {
        count = (size_t)limit;
    }
    bson_t body = BSON_INITIALIZER, cursor, batch;
    BSON_APPEND_DOCUMENT_BEGIN(&body, "cursor", &cursor);
    BSON_APPEND_ARRAY_BEGIN(&cursor, "firstBatch", &batch);
    for (size_t i = 0; i < count; i++) {
        char key[16];
        const char *key_string;
        bson_t document;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        bson_init_static(&document, points[i].data, points[i].length);
        bson_append_document(&batch, key_string, -1, &document);
    }
    bson_append_array_end(&cursor, &batch);
    BSON_APPEND_INT64(&cursor, "id", 0);
    BSON_APPEND_UTF8(&cursor, "ns", request->ns);
    bson_append_document_end(&body, &cursor);
    BSON_APPEND_DOUBLE(&body, "ok", 1.0);
    bson_free(points);
    router_finish_with_document(request, &body, 0);
    bson_destroy(&body);
}

void router_point_read_on_archive_reply(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body, batch;
    if (!take_point_batch(request, outcome->reply, outcome->length, outcome->error, &body, &batch)) {
        return;
    }
    finish_point_read(request, &batch);
}

void router_point_read_send_archive(proxy_request_t *request)
{
    bson_t filter = BSON_INITIALIZER, condition;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &condition);
    BSON_APPEND_ARRAY(&condition, "$in", &request->route.point.missing_ids);
    bson_append_document_end(&filter, &condition);
    bool built = build_point_find(request, &filter, bson_count_keys(&request->route.point.missing_ids), &message, &length,
                                  &error);
    bson_destroy(&filter);
    if (!built) {
        router_finish_with_error(request, &error);
        return;
    }
    router_call_tier(request, PHASE_POINT_READING_ARCHIVE, PROXY_TIER_ARCHIVE, message, length, message);
}

/* The distinct values of a BSON array of ids (5, 5.0 and 5L are one). */
static uint32_t distinct_ids(const bson_t *ids)
{
    bson_iter_t iter, earlier;
    uint32_t count = 0, position = 0;
    bson_iter_init(&iter, ids);
    while (bson_iter_next(&iter)) {
        bool seen = false;
        uint32_t index = 0;
        bson_iter_init(&earlier, ids);
        while (index++ < position && bson_iter_next(&earlier) && !seen) {
            seen = order_compare_values(bson_iter_value(&earlier), bson_iter_value(&iter)) == 0;
        }
        count += !seen;
        position++;
    }
    return count;
}

static void route_point_read_rebuilt(proxy_request_t *request);

void router_point_read_on_fast_reply(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body, batch;
    if (!take_point_batch(request, outcome->reply, outcome->length, outcome->error, &body, &batch)) {
        return;
    }
    /* The client's own find came back with every id: its reply goes back as it is. */
    if (!request->route.point.rebuilt && bson_count_keys(&batch) >= distinct_ids(&request->decision.point_ids)) {
        router_on_tier_reply(request, outcome->reply, outcome->length, NULL);
        return;
    }
    bson_iter_t cursor_id;
    if (!request->route.point.rebuilt && bson_iter_init(&cursor_id, &body) &&
        bson_iter_find_descendant(&cursor_id, "cursor.id", &cursor_id) && bson_iter_as_int64(&cursor_id) != 0) {
        /* Not all in one batch after all (a 16 MB reply): ask again in one batch. */
        route_point_read_rebuilt(request);
        return;
    }
    bson_concat(&request->route.point.fast_documents, &batch);
    size_t found_count = bson_count_keys(&batch);
    point_document_t *found = bson_malloc0((found_count + 1) * sizeof *found);
    found_count = collect_points(&batch, found, 0);
    uint32_t missing = 0;
    bson_iter_t ids, earlier;
    bson_iter_init(&ids, &request->decision.point_ids);
    while (bson_iter_next(&ids)) {
        const bson_value_t *id = bson_iter_value(&ids);
        bool present = false;
        for (size_t i = 0; i < found_count && !present; i++) {
            present = order_compare_values(&found[i].id, id) == 0;
        }
        bson_iter_init(&earlier, &request->route.point.missing_ids);
        while (!present && bson_iter_next(&earlier)) {
            present = order_compare_values(bson_iter_value(&earlier), id) == 0;
        }
        if (!present) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string(missing++, &key_string, key, sizeof key);
            BSON_APPEND_VALUE(&request->route.point.missing_ids, key_string, id);
        }
    }
    bson_free(found);
    if (missing == 0) {
        finish_point_read(request, NULL);
        return;
    }
    request->namespace_state->point_reads_from_archive++;
    router_wait_for_feeder(request, true, PHASE_POINT_READING_ARCHIVE);
}

/* Whether the client's find, sent as it is, returns every id the fast tier holds
 * in its first batch: no limit below the number of ids, and a batch that holds
 * them all (mongod's first batch is 101 documents unless batchSize says). */
static bool point_read_passes_through(proxy_request_t *request)
{
    uint32_t ids = distinct_ids(&request->decision.point_ids);
    bson_iter_t iter;
    if (fields_find(&request->fields, "limit", &iter) && BSON_ITER_HOLDS_NUMBER(&iter) &&
        bson_iter_as_int64(&iter) > 0 && bson_iter_as_int64(&iter) < ids) {
        return false;
    }
    int64_t batch_size = 101;
    if (fields_find(&request->fields, "batchSize", &iter) && BSON_ITER_HOLDS_NUMBER(&iter)) {
        batch_size = bson_iter_as_int64(&iter);
    }
    return batch_size >= ids;
}

void router_point_read_start(proxy_request_t *request)
{
    if (request->decision.is_explain) {
        router_explain_both_start(request);
        return;
    }
    if (projection_hides_id(&request->fields)) {
        router_wait_for_feeder(request, false, PHASE_FORWARDING);
        return;
    }
    request->route_kind = ROUTE_STATE_POINT;
    bson_init(&request->route.point.fast_documents);
    bson_init(&request->route.point.missing_ids);
    if (point_read_passes_through(request)) {
        /* The common case costs no more than a read sent to the fast tier. */
        router_call_tier(request, PHASE_POINT_READING_FAST, PROXY_TIER_FAST, request->message, request->length, NULL);
        return;
    }
    route_point_read_rebuilt(request);
}

/* The fast tier's half as our own find: every id, one batch, no limit. */
static void route_point_read_rebuilt(proxy_request_t *request)
{
    bson_iter_t iter, filter_iter;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    request->route.point.rebuilt = true;
    bson_t filter;
    uint32_t filter_length;
    const uint8_t *data;
    if (!fields_find(&request->fields, "filter", &iter) || !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        router_wait_for_feeder(request, false, PHASE_FORWARDING);
        return;
    }
    filter_iter = iter;
    bson_iter_document(&filter_iter, &filter_length, &data);
    bson_init_static(&filter, data, filter_length);
    if (!build_point_find(request, &filter, request->decision.point_id_count, &message, &length, &error)) {
        router_finish_with_error(request, &error);
        return;
    }
    router_call_tier(request, PHASE_POINT_READING_FAST, PROXY_TIER_FAST, message, length, message);
}
