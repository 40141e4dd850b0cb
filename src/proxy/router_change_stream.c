/* Change streams on a tiered namespace: opened on the fast tier, whose history
 * holds every application write in order (every write runs there first), minus
 * the workers' own writes, which the batches lose here before the client sees
 * them (I9): the warmer's copies, the proxy's fault-in copies and the evictor's
 * deletes, as thermocline.workerWrites marks them (tier/worker_writes.h, the
 * feeder's rule too).
 *
 *   FORWARDING (the aggregate or getMore on the fast tier)
 *     ─▶ no insert or delete in the batch ─────────────────────────────▶ FINISHED
 *     ─▶ STREAM_READING_MARKS (their marks, one find) ─┬─ all settled ─▶ FINISHED
 *                 ▲                                    └─ a mark pending
 *                 └──── STREAM_WAITING_FOR_MARKS (a short pause on the loop)
 *   with fullDocument: "updateLookup", an update whose document the fast tier no
 *   longer held (null: evicted since) ─▶ WAITING_FOR_FEEDER (its deletes) ─▶
 *   STREAM_LOOKING_UP (the archive holds that document's last version, I2) ─▶ FINISHED
 *
 * Stages after $changeStream from the first that may reshape an event on
 * ($project...) run here, on what is left (router_change_stream_open splits them).
 * The reply keeps the tier's postBatchResumeToken and cursor; only the worker
 * events leave its batch. Resume tokens are the fast tier's own, so a client
 * resumes through any proxy of the configuration, and after a restart. */
#include "proxy/router_private.h"

#include "common/bson_view.h"
#include "common/timestamp.h"
#include "query/order.h"
#include "query/pipeline.h"
#include "tier/tier.h"
#include "tier/worker_writes.h"
#include "wire/wire.h"

#include <string.h>

/* How often a batch waiting for a pending mark reads the marks again. */
#define STREAM_MARK_POLL_MS 10
/* A pending copy or a committed eviction is decided after
 * WORKER_WRITES_PENDING_WAIT_MS; a batch still waiting this long (marks that cannot
 * be read) fails its getMore, resumably. */
#define STREAM_MARK_WAIT_LIMIT_MS 45000

/* The batch of a cursor reply: cursor.firstBatch or cursor.nextBatch. */
static bool find_batch(const bson_t *body, bson_t *out_batch, const char **out_key)
{
    bson_iter_t cursor, field;
    if (!bson_iter_init_find(&cursor, body, "cursor") || !bson_iter_recurse(&cursor, &field)) {
        return false;
    }
    while (bson_iter_next(&field)) {
        const char *key = bson_iter_key(&field);
        if ((strcmp(key, "firstBatch") == 0 || strcmp(key, "nextBatch") == 0) && bson_view_of(&field, out_batch)) {
            *out_key = key;
            return true;
        }
    }
    return false;
}

/* The tier's reply with only the application's events in its batch. */
static void append_filtered_body(const bson_t *body, const bson_t *kept, bson_t *out)
{
    bson_iter_t iter, field;
    bson_iter_init(&iter, body);
    while (bson_iter_next(&iter)) {
        if (strcmp(bson_iter_key(&iter), "cursor") != 0 || !bson_iter_recurse(&iter, &field)) {
            bson_append_iter(out, NULL, 0, &iter);
            continue;
        }
        bson_t cursor;
        BSON_APPEND_DOCUMENT_BEGIN(out, "cursor", &cursor);
        while (bson_iter_next(&field)) {
            const char *key = bson_iter_key(&field);
            if (strcmp(key, "firstBatch") == 0 || strcmp(key, "nextBatch") == 0) {
                BSON_APPEND_ARRAY(&cursor, key, kept);
            } else {
                bson_append_iter(&cursor, NULL, 0, &field);
            }
        }
        bson_append_document_end(out, &cursor);
    }
}

/* One event a worker may have written: an insert or a delete of a tiered
 * namespace, with its _id and time. */
typedef struct stream_event {
    bool is_delete;
    uint64_t time;
    char ns[PLAN_NAMESPACE_SIZE];
    bson_value_t id; /* borrows the event */
    bson_t full_document;
    bool has_full_document;
} stream_event_t;

static bool read_event(const bson_t *event, stream_event_t *out)
{
    bson_iter_t iter, field;
    const char *operation = NULL, *database = NULL, *collection = NULL;
    if (bson_iter_init_find(&iter, event, "operationType") && BSON_ITER_HOLDS_UTF8(&iter)) {
        operation = bson_iter_utf8(&iter, NULL);
    }
    if (operation == NULL || (strcmp(operation, "insert") != 0 && strcmp(operation, "delete") != 0)) {
        return false;
    }
    out->is_delete = operation[0] == 'd';
    out->time = timestamp_find(event, "clusterTime");
    if (!bson_iter_init(&iter, event) || !bson_iter_find_descendant(&iter, "documentKey._id", &field)) {
        return false;
    }
    out->id = *bson_iter_value(&field);
    if (bson_iter_init_find(&iter, event, "ns") && bson_iter_recurse(&iter, &field)) {
        while (bson_iter_next(&field)) {
            if (strcmp(bson_iter_key(&field), "db") == 0 && BSON_ITER_HOLDS_UTF8(&field)) {
                database = bson_iter_utf8(&field, NULL);
            } else if (strcmp(bson_iter_key(&field), "coll") == 0 && BSON_ITER_HOLDS_UTF8(&field)) {
                collection = bson_iter_utf8(&field, NULL);
            }
        }
    }
    if (database == NULL || collection == NULL) {
        return false;
    }
    snprintf(out->ns, sizeof out->ns, "%s.%s", database, collection);
    out->has_full_document = bson_iter_init_find(&iter, event, "fullDocument") &&
                             bson_view_of(&iter, &out->full_document);
    return true;
}

/* The ops of the marks an event may have: an eviction for a delete; a warmer's
 * or a fault-in's copy for an insert. */
static size_t mark_ops(const stream_event_t *event, const char **out_ops)
{
    if (event->is_delete) {
        out_ops[0] = "evict";
        return 1;
    }
    out_ops[0] = "warm";
    out_ops[1] = "fault";
    return 2;
}

/* Appends the mark keys of the batch's events to keys; the count of events. */
static uint32_t append_mark_keys(proxy_request_t *request, const bson_t *batch, bson_t *keys)
{
    bson_iter_t iter;
    uint32_t key_count = 0, event_count = 0;
    bson_iter_init(&iter, batch);
    while (bson_iter_next(&iter)) {
        bson_t event;
        stream_event_t read;
        const char *ops[2];
        if (!bson_view_of(&iter, &event) || !read_event(&event, &read) ||
            proxy_find_namespace(request->proxy, read.ns) == NULL) {
            continue;
        }
        event_count++;
        for (size_t op = 0; op < mark_ops(&read, ops); op++) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string(key_count++, &key_string, key, sizeof key);
            worker_writes_mark_key(keys, key_string, read.ns, &read.id, ops[op]);
        }
    }
    return event_count;
}

static void read_marks(proxy_request_t *request)
{
    bson_t *body = &request->route.stream.body;
    bson_t batch, find = BSON_INITIALIZER, filter, condition, keys;
    const char *batch_key;
    find_batch(body, &batch, &batch_key);
    BSON_APPEND_UTF8(&find, "find", TIER_MARKS_COLLECTION);
    BSON_APPEND_DOCUMENT_BEGIN(&find, "filter", &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &condition);
    BSON_APPEND_ARRAY_BEGIN(&condition, "$in", &keys);
    uint32_t events = append_mark_keys(request, &batch, &keys);
    bson_append_array_end(&condition, &keys);
    bson_append_document_end(&filter, &condition);
    bson_append_document_end(&find, &filter);
    BSON_APPEND_INT64(&find, "batchSize", 2 * (int64_t)events + 1);
    BSON_APPEND_BOOL(&find, "singleBatch", true);
    BSON_APPEND_UTF8(&find, "$db", TIER_DATABASE);
    router_call_tier_command(request, PHASE_STREAM_READING_MARKS, PROXY_TIER_FAST, &find);
}

/* An update event updateLookup found no document for, in the fast tier: its _id. */
static bool lookup_missed(const proxy_request_t *request, const bson_t *event, bson_value_t *out_id)
{
    bson_iter_t iter;
    if (!request->stream_update_lookup || !bson_iter_init_find(&iter, event, "operationType") ||
        !BSON_ITER_HOLDS_UTF8(&iter) || strcmp(bson_iter_utf8(&iter, NULL), "update") != 0 ||
        !bson_iter_init_find(&iter, event, "fullDocument") || !BSON_ITER_HOLDS_NULL(&iter) ||
        !bson_iter_init(&iter, event) || !bson_iter_find_descendant(&iter, "documentKey._id", &iter)) {
        return false;
    }
    *out_id = *bson_iter_value(&iter);
    return true;
}

/* Appends to ids (a BSON array) the _id of each such update of events; their count. */
static uint32_t append_missed_lookups(const proxy_request_t *request, const bson_t *events, bson_t *ids)
{
    bson_iter_t iter;
    uint32_t count = 0;
    bson_iter_init(&iter, events);
    while (bson_iter_next(&iter)) {
        bson_t event;
        bson_value_t id;
        if (bson_view_of(&iter, &event) && lookup_missed(request, &event, &id)) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string(count++, &key_string, key, sizeof key);
            if (ids != NULL) {
                BSON_APPEND_VALUE(ids, key_string, &id);
            }
        }
    }
    return count;
}

static bool apply_stages(proxy_request_t *request, const bson_t *kept, bson_t *out, bson_error_t *error);

/* The reply to the client: the tier's, its batch replaced with kept (through the
 * client's stages, when the proxy applies them). */
static void finish_with_kept(proxy_request_t *request)
{
    bson_t filtered = BSON_INITIALIZER, transformed = BSON_INITIALIZER;
    uint8_t *encoded;
    size_t length;
    bson_error_t error;
    if (request->stream_stages != NULL) {
        if (!apply_stages(request, &request->route.stream.kept, &transformed, &error)) {
            bson_destroy(&transformed);
            bson_destroy(&filtered);
            router_finish_with_error(request, &error);
            return;
        }
        bson_reinit(&request->route.stream.kept);
        bson_concat(&request->route.stream.kept, &transformed);
    }
    bson_destroy(&transformed);
    append_filtered_body(&request->route.stream.body, &request->route.stream.kept, &filtered);
    bool built = wire_op_msg_build(0, 0, 0, &filtered, NULL, 0, &encoded, &length, &error);
    bson_destroy(&filtered);
    if (!built) {
        router_finish_with_error(request, &error);
        return;
    }
    router_finish_cursor_reply(request, encoded, length);
}

/* The application's events are known: their missed lookups, if any, go to the
 * archive once it shows the fast tier's deletes (a document a client deleted
 * since is null there too, as on MongoDB). */
static void finish_or_look_up(proxy_request_t *request)
{
    if (append_missed_lookups(request, &request->route.stream.kept, NULL) == 0) {
        finish_with_kept(request);
        return;
    }
    router_wait_for_feeder(request, true, PHASE_STREAM_LOOKING_UP);
}

bool router_change_stream_takes_reply(proxy_request_t *request, const uint8_t *reply, size_t length)
{
    bson_t body, batch, keys = BSON_INITIALIZER;
    bson_error_t error;
    const char *batch_key;
    if (request->tier != PROXY_TIER_FAST || wire_message_opcode(reply) != WIRE_OP_MSG ||
        !wire_op_msg_peek_body(reply, length, &body, &error) || !router_reply_is_ok(&body) ||
        !find_batch(&body, &batch, &batch_key)) {
        bson_destroy(&keys);
        return false;
    }
    uint32_t events = append_mark_keys(request, &batch, &keys);
    bson_destroy(&keys);
    if (events == 0 && append_missed_lookups(request, &batch, NULL) == 0 && request->stream_stages == NULL) {
        return false; /* only clients write updates and replaces */
    }
    request->route_kind = ROUTE_STATE_STREAM;
    bson_copy_to(&body, &request->route.stream.body);
    bson_init(&request->route.stream.kept);
    request->route.stream.started_ms = (int64_t)uv_now(request->proxy->loop);
    if (events == 0) {
        bson_concat(&request->route.stream.kept, &batch);
        finish_or_look_up(request);
        return true;
    }
    read_marks(request);
    return true;
}

/* The mark of key in the find's batch of marks, as a view; false when none. */
static bool find_mark(const bson_t *marks, const bson_t *key, bson_t *out_mark)
{
    bson_iter_t iter, id;
    bson_iter_init(&iter, marks);
    while (bson_iter_next(&iter)) {
        bson_t mark, mark_id;
        if (bson_view_of(&iter, &mark) && bson_iter_init_find(&id, &mark, "_id") && bson_view_of(&id, &mark_id) &&
            bson_equal(&mark_id, key)) {
            *out_mark = mark;
            return true;
        }
    }
    return false;
}

/* What the marks say of one event: the worker's when one of its marks says so. */
static worker_writes_verdict_t classify(const bson_t *marks, const stream_event_t *read, int64_t waited_ms)
{
    const char *ops[2];
    worker_writes_verdict_t verdict = WORKER_WRITES_APPLICATION;
    worker_writes_event_t event = {
        .is_delete = read->is_delete,
        .time = read->time,
        .full_document = read->has_full_document ? &read->full_document : NULL,
        .waited_ms = waited_ms,
    };
    for (size_t op = 0; op < mark_ops(read, ops); op++) {
        bson_t holder = BSON_INITIALIZER, key, mark;
        worker_writes_mark_key(&holder, "k", read->ns, &read->id, ops[op]);
        bson_iter_t iter;
        bool found = bson_iter_init_find(&iter, &holder, "k") && bson_view_of(&iter, &key) &&
                     find_mark(marks, &key, &mark);
        worker_writes_verdict_t one = worker_writes_classify(found ? &mark : NULL, &event, NULL);
        bson_destroy(&holder);
        if (one == WORKER_WRITES_WORKER) {
            return WORKER_WRITES_WORKER;
        }
        if (one == WORKER_WRITES_PENDING) {
            verdict = WORKER_WRITES_PENDING;
        }
    }
    return verdict;
}

static void fail_marks_unsettled(proxy_request_t *request, int64_t waited_ms)
{
    bson_error_t error;
    bson_t reply = BSON_INITIALIZER, labels;
    tc_error_set(&error, TC_ERR_EXCEEDED_TIME_LIMIT,
                 "change stream: a worker's write in this batch has had no recorded outcome in thermocline.%s for "
                 "%lld ms (a stalled evictor or warmer); the stream resumes from its last event",
                 TIER_MARKS_COLLECTION, (long long)waited_ms);
    tc_error_append_reply(&error, &reply);
    /* Drivers resume a stream after an error with this label, from the last token they hold. */
    BSON_APPEND_ARRAY_BEGIN(&reply, "errorLabels", &labels);
    BSON_APPEND_UTF8(&labels, "0", "ResumableChangeStreamError");
    bson_append_array_end(&reply, &labels);
    router_finish_with_document(request, &reply, 0);
    bson_destroy(&reply);
}

void router_change_stream_on_marks(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t reply_body, marks;
    bson_iter_t iter;
    if (!router_take_ok_reply(request, outcome->reply, outcome->length, outcome->error, &reply_body)) {
        return;
    }
    if (!bson_iter_init(&iter, &reply_body) || !bson_iter_find_descendant(&iter, "cursor.firstBatch", &iter) ||
        !bson_view_of(&iter, &marks)) {
        bson_error_t error;
        tc_error_set(&error, TC_ERR_OPERATION_FAILED, "change stream: unexpected reply reading thermocline.%s",
                     TIER_MARKS_COLLECTION);
        router_finish_with_error(request, &error);
        return;
    }
    const bson_t *body = &request->route.stream.body;
    int64_t waited_ms = (int64_t)uv_now(request->proxy->loop) - request->route.stream.started_ms;
    bson_t batch, kept = BSON_INITIALIZER;
    const char *batch_key;
    uint32_t kept_count = 0;
    bool pending = false;
    find_batch(body, &batch, &batch_key);
    bson_iter_init(&iter, &batch);
    while (!pending && bson_iter_next(&iter)) {
        bson_t event;
        stream_event_t read;
        if (bson_view_of(&iter, &event) && read_event(&event, &read) &&
            proxy_find_namespace(request->proxy, read.ns) != NULL) {
            worker_writes_verdict_t verdict = classify(&marks, &read, waited_ms);
            pending = verdict == WORKER_WRITES_PENDING;
            if (verdict != WORKER_WRITES_APPLICATION) {
                continue;
            }
        }
        char key[16];
        const char *key_string;
        bson_uint32_to_string(kept_count++, &key_string, key, sizeof key);
        bson_append_iter(&kept, key_string, -1, &iter);
    }
    if (pending) {
        bson_destroy(&kept);
        if (waited_ms > STREAM_MARK_WAIT_LIMIT_MS) {
            fail_marks_unsettled(request, waited_ms);
            return;
        }
        router_wait_briefly(request, PHASE_STREAM_WAITING_FOR_MARKS, STREAM_MARK_POLL_MS);
        return;
    }
    bson_reinit(&request->route.stream.kept);
    bson_concat(&request->route.stream.kept, &kept);
    bson_destroy(&kept);
    finish_or_look_up(request);
}

void router_change_stream_after_wait(proxy_request_t *request)
{
    read_marks(request);
}

/* The stages MongoDB allows after $changeStream (each maps an event to at most one). */
static bool allowed_in_change_stream(const char *stage)
{
    static const char *const allowed[] = {"$match", "$project", "$addFields", "$set", "$unset",
                                          "$replaceRoot", "$replaceWith", "$redact", NULL};
    for (const char *const *candidate = allowed; *candidate != NULL; candidate++) {
        if (strcmp(*candidate, stage) == 0) {
            return true;
        }
    }
    return false;
}

/* Splits the pipeline: to_tier gets $changeStream and the $match stages right
 * after it (they keep events whole), *out_rest (NULL: none) the stages from the
 * first other one on, which the proxy applies once the workers' events are gone:
 * a $project may drop what tells them apart. False when a stage is not one a
 * change stream allows (the tier then refuses the client's own pipeline). */
static bool split_stages(const bson_iter_t *pipeline, bson_t *to_tier, bson_t **out_rest)
{
    bson_iter_t stage, body;
    uint32_t tier_count = 0, rest_count = 0;
    *out_rest = NULL;
    bson_iter_recurse(pipeline, &stage);
    while (bson_iter_next(&stage)) {
        char key[16];
        const char *key_string;
        if (!BSON_ITER_HOLDS_DOCUMENT(&stage) || !bson_iter_recurse(&stage, &body) || !bson_iter_next(&body) ||
            (tier_count > 0 && !allowed_in_change_stream(bson_iter_key(&body)))) {
            bson_destroy(*out_rest);
            *out_rest = NULL;
            return false;
        }
        if (*out_rest == NULL && (tier_count == 0 || strcmp(bson_iter_key(&body), "$match") == 0)) {
            bson_uint32_to_string(tier_count++, &key_string, key, sizeof key);
            bson_append_iter(to_tier, key_string, -1, &stage);
            continue;
        }
        if (*out_rest == NULL) {
            *out_rest = bson_new();
        }
        bson_uint32_to_string(rest_count++, &key_string, key, sizeof key);
        bson_append_iter(*out_rest, key_string, -1, &stage);
    }
    return true;
}

void router_change_stream_open(proxy_request_t *request)
{
    bson_iter_t pipeline, stage, body, option, field;
    bson_t to_tier = BSON_INITIALIZER;
    bson_error_t error;
    request->change_stream = true;
    if (!fields_find(&request->fields, "pipeline", &pipeline) || !bson_iter_recurse(&pipeline, &stage) ||
        !bson_iter_next(&stage) || !split_stages(&pipeline, &to_tier, &request->stream_stages)) {
        bson_destroy(&to_tier);
        router_forward(request, PROXY_TIER_FAST); /* the tier answers as MongoDB does */
        return;
    }
    if (bson_iter_recurse(&stage, &body) && bson_iter_next(&body) && bson_iter_recurse(&body, &option) &&
        bson_iter_find(&option, "fullDocument") && BSON_ITER_HOLDS_UTF8(&option)) {
        request->stream_update_lookup = strcmp(bson_iter_utf8(&option, NULL), "updateLookup") == 0;
    }
    if (request->stream_stages == NULL) {
        bson_destroy(&to_tier);
        router_forward(request, PROXY_TIER_FAST);
        return;
    }
    pipeline_t *compiled = pipeline_compile(request->stream_stages, NULL, &error);
    if (compiled == NULL) {
        bson_destroy(&to_tier);
        router_finish_with_error(request, &error); /* mongod's parse errors, as the tier would give */
        return;
    }
    pipeline_destroy(compiled);
    /* The client's command, its pipeline cut to what the tier runs. */
    bson_t command = BSON_INITIALIZER;
    bson_iter_init(&field, &request->command);
    while (bson_iter_next(&field)) {
        if (strcmp(bson_iter_key(&field), "pipeline") == 0) {
            BSON_APPEND_ARRAY(&command, "pipeline", &to_tier);
        } else {
            bson_append_iter(&command, NULL, 0, &field);
        }
    }
    bson_destroy(&to_tier);
    router_call_tier_command(request, PHASE_FORWARDING, PROXY_TIER_FAST, &command);
}

/* The client's stages over the kept events, into out (a BSON array): an event
 * they drop is gone; one whose _id (its resume token) they change is
 * ChangeStreamFatalError (280), as on MongoDB. */
static bool apply_stages(proxy_request_t *request, const bson_t *kept, bson_t *out, bson_error_t *error)
{
    pipeline_t *compiled = pipeline_compile(request->stream_stages, NULL, error);
    bson_iter_t iter, token, result_token;
    uint32_t count = 0;
    bool ok = compiled != NULL;
    bson_iter_init(&iter, kept);
    while (ok && bson_iter_next(&iter)) {
        bson_t event, result;
        bool produced = false;
        if (!bson_view_of(&iter, &event)) {
            continue;
        }
        if (!pipeline_transform_one(compiled, &event, &result, &produced, error)) {
            ok = false;
            break;
        }
        if (!produced) {
            continue;
        }
        bson_t token_view, result_view;
        if (!bson_iter_init_find(&token, &event, "_id") || !bson_iter_init_find(&result_token, &result, "_id") ||
            !bson_view_of(&token, &token_view) || !bson_view_of(&result_token, &result_view) ||
            !BSON_ITER_HOLDS_DOCUMENT(&result_token) || !bson_equal(&token_view, &result_view)) {
            bson_destroy(&result);
            ok = tc_error_set(error, TC_ERR_CHANGE_STREAM_FATAL_ERROR,
                              "Encountered an event whose _id field, which contains the resume token, was modified "
                              "by the pipeline. Modifying the _id field of an event makes it impossible to resume "
                              "the stream from that point. Only transformations that retain the unmodified _id "
                              "field are allowed.");
            break;
        }
        char key[16];
        const char *key_string;
        bson_uint32_to_string(count++, &key_string, key, sizeof key);
        BSON_APPEND_DOCUMENT(out, key_string, &result);
        bson_destroy(&result);
    }
    pipeline_destroy(compiled);
    return ok;
}

void router_change_stream_look_up(proxy_request_t *request)
{
    const config_namespace_t *names = request->namespace_state->config;
    bson_t find = BSON_INITIALIZER, filter, condition, ids;
    BSON_APPEND_UTF8(&find, "find", names->collection);
    BSON_APPEND_DOCUMENT_BEGIN(&find, "filter", &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &condition);
    BSON_APPEND_ARRAY_BEGIN(&condition, "$in", &ids);
    uint32_t count = append_missed_lookups(request, &request->route.stream.kept, &ids);
    bson_append_array_end(&condition, &ids);
    bson_append_document_end(&filter, &condition);
    bson_append_document_end(&find, &filter);
    BSON_APPEND_INT64(&find, "batchSize", (int64_t)count + 1);
    BSON_APPEND_BOOL(&find, "singleBatch", true);
    BSON_APPEND_UTF8(&find, "$db", names->database);
    router_call_tier_command(request, PHASE_STREAM_LOOKING_UP, PROXY_TIER_ARCHIVE, &find);
}

/* The archive's document with _id id among found, as a view; false when none. */
static bool find_document(const bson_t *found, const bson_value_t *id, bson_t *out_document)
{
    bson_iter_t iter, field;
    bson_iter_init(&iter, found);
    while (bson_iter_next(&iter)) {
        if (bson_view_of(&iter, out_document) && bson_iter_init_find(&field, out_document, "_id") &&
            order_compare_values(bson_iter_value(&field), id) == 0) {
            return true;
        }
    }
    return false;
}

void router_change_stream_on_looked_up(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body, found, filled = BSON_INITIALIZER;
    bson_iter_t iter;
    if (!router_take_ok_reply(request, outcome->reply, outcome->length, outcome->error, &body)) {
        bson_destroy(&filled);
        return;
    }
    if (!bson_iter_init(&iter, &body) || !bson_iter_find_descendant(&iter, "cursor.firstBatch", &iter) ||
        !bson_view_of(&iter, &found)) {
        bson_init(&found);
    }
    uint32_t count = 0;
    bson_iter_init(&iter, &request->route.stream.kept);
    while (bson_iter_next(&iter)) {
        bson_t event, document;
        bson_value_t id;
        char key[16];
        const char *key_string;
        bson_uint32_to_string(count++, &key_string, key, sizeof key);
        if (!bson_view_of(&iter, &event) || !lookup_missed(request, &event, &id) ||
            !find_document(&found, &id, &document)) {
            bson_append_iter(&filled, key_string, -1, &iter);
            continue;
        }
        /* The event as the fast tier wrote it, its null fullDocument now the archive's. */
        bson_t copy;
        bson_iter_t field;
        BSON_APPEND_DOCUMENT_BEGIN(&filled, key_string, &copy);
        bson_iter_init(&field, &event);
        while (bson_iter_next(&field)) {
            if (strcmp(bson_iter_key(&field), "fullDocument") == 0) {
                BSON_APPEND_DOCUMENT(&copy, "fullDocument", &document);
            } else {
                bson_append_iter(&copy, NULL, 0, &field);
            }
        }
        bson_append_document_end(&filled, &copy);
    }
    bson_reinit(&request->route.stream.kept);
    bson_concat(&request->route.stream.kept, &filled);
    bson_destroy(&filled);
    finish_with_kept(request);
}

/* A tiered namespace of database (NULL: of any database), or NULL. */
static const char *tiered_namespace_in(const proxy_t *proxy, const char *database)
{
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        const config_namespace_t *names = proxy->namespaces[i].config;
        if (database == NULL || strcmp(names->database, database) == 0) {
            return names->ns;
        }
    }
    return NULL;
}

bool router_change_stream_refuse_whole(proxy_request_t *request)
{
    bson_iter_t target, pipeline, stage, body, option, database;
    if (strcmp(request->command_name, "aggregate") != 0 || !fields_find(&request->fields, "aggregate", &target) ||
        BSON_ITER_HOLDS_UTF8(&target) || !fields_find(&request->fields, "pipeline", &pipeline) ||
        !bson_iter_recurse(&pipeline, &stage) || !bson_iter_next(&stage) || !bson_iter_recurse(&stage, &body) ||
        !bson_iter_next(&body) || strcmp(bson_iter_key(&body), "$changeStream") != 0 ||
        !fields_find(&request->fields, "$db", &database) || !BSON_ITER_HOLDS_UTF8(&database)) {
        return false;
    }
    const char *name = bson_iter_utf8(&database, NULL);
    bool cluster = bson_iter_recurse(&body, &option) && bson_iter_find(&option, "allChangesForCluster") &&
                   bson_iter_as_bool(&option);
    const char *tiered = tiered_namespace_in(request->proxy, cluster ? NULL : name);
    if (tiered == NULL) {
        return false; /* nothing tiered in it: the archive holds all of its history */
    }
    /* Its tiered namespaces' history is the fast tier's and the others' the
     * archive's: one stream would have to merge two clusters' histories and
     * tokens. Refused, rather than showing the archive's coalesced, lagging replay. */
    bson_error_t error;
    tc_error_set(&error, TC_ERR_ILLEGAL_OPERATION,
                 "a change stream on %s through thermocline is not supported: it holds tiered namespaces (%s), whose "
                 "changes only the fast tier's history shows in order; watch each collection (collection.watch()) "
                 "instead",
                 cluster ? "the whole cluster" : name, tiered);
    router_finish_with_error(request, &error);
    return true;
}
