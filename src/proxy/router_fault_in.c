/* Fault-in: before a write runs on the fast tier, the archive documents it may
 * touch (the ids it names, the documents its filters match, the ids an insert or
 * upsert may create, the unique keys it sets) are copied there, so the write sees
 * what MongoDB would. A document the fast tier holds is its newest version
 * (writes go there first; the warmer never overwrites a newer one), so the ids are
 * looked for in the fast tier first, and only those it lacks (and the filters)
 * cost the archive a read and a wait for the feeder's deletes.
 * Its steps: pinned (PHASE_WAITING_FOR_PINS while a document is being evicted; in
 * the fast tier too when the evictor may run elsewhere, router_pins.c),
 * PHASE_FAULT_IN_CHECKING_FAST, then (if the archive is needed) the archive's
 * deletes awaited, PHASE_FAULT_IN_FINDING, PHASE_FAULT_IN_INSERTING; then the
 * write forwarded, while its pins are young enough (tier/pins.h), or first the
 * unique keys its updates compute read (router_unique.c), whose filters take
 * the same steps from the find on. */
#include "proxy/router_private.h"

#include "common/bson_view.h"
#include "common/timestamp.h"
#include "query/order.h"
#include "tier/pins.h"
#include "tier/tier.h"
#include "tier/worker_writes.h"
#include "wire/wire.h"

#include <string.h>

/* The ids the write names: all of them, or once the fast tier was asked, those it
 * lacks. Appended to the BSON array ids from *index on. */
static void append_ids_to_fault_in(const proxy_request_t *request, bson_t *ids, uint32_t *index)
{
    const plan_decision_t *decision = &request->decision;
    const bson_t *all[] = {&decision->fault_in_ids, &decision->unique_id_checks};
    const bson_t *missing[] = {&request->route.fault_in.missing_ids};
    bool checked = request->route_kind == ROUTE_STATE_FAULT_IN;
    const bson_t *const *lists = checked ? missing : all;
    size_t list_count = checked ? 1 : 2;
    char key[16];
    const char *key_string;
    bson_iter_t iter;
    for (size_t list = 0; list < list_count; list++) {
        bson_iter_init(&iter, lists[list]);
        while (bson_iter_next(&iter)) {
            bson_uint32_to_string((*index)++, &key_string, key, sizeof key);
            bson_append_iter(ids, key_string, -1, &iter);
        }
    }
}

/* The route's state, from the first step that needs it (the fast tier's check
 * may have been skipped: a write that faults in by filter only). */
static void fault_in_state_init(proxy_request_t *request)
{
    if (request->route_kind == ROUTE_STATE_FAULT_IN) {
        return;
    }
    request->route_kind = ROUTE_STATE_FAULT_IN;
    memset(&request->route.fault_in, 0, sizeof request->route.fault_in);
    bson_init(&request->route.fault_in.missing_ids);
    bson_init(&request->route.fault_in.copied_ids);
}

/* The client's write, to the fast tier: only while its pins in the fast tier (if
 * any) live on long enough for it to run, else an evictor elsewhere may already
 * take its documents. */
static void forward_write(proxy_request_t *request)
{
    if (!router_pins_fresh(request)) {
        bson_error_t error;
        tc_error_set(&error, TC_ERR_EXCEEDED_TIME_LIMIT,
                     "this write's fault-in took over half of its pins' lifetime (%lld ms, from readYourWritesWait, "
                     "failoverWait and leaseTimeout): the write was not sent; retry it",
                     (long long)tier_pin_lifetime_ms(request->proxy->config));
        router_finish_with_error(request, &error);
        return;
    }
    router_forward(request, PROXY_TIER_FAST);
}

void router_append_state_write_options(bson_t *command)
{
    bson_t concern;
    BSON_APPEND_BOOL(command, "ordered", false);
    BSON_APPEND_DOCUMENT_BEGIN(command, "writeConcern", &concern);
    BSON_APPEND_INT32(&concern, "w", 1);
    bson_append_document_end(command, &concern);
    BSON_APPEND_UTF8(command, "$db", TIER_DATABASE);
}

/* Fault marks (tier/worker_writes.h) of the copies: pending before the insert
 * (documents: the copies, whose digests they keep), or done after it (done: the
 * insert's time, to). A change stream through any proxy then leaves the copies
 * out, as it leaves the warmer's; the marks live in the fast tier, so a proxy
 * that crashes between the two leaves a pending mark the feeder cleans later. */
static void mark_copies(proxy_request_t *request, const bson_t *documents, bool done, uint64_t to)
{
    const char *ns = request->namespace_state->config->ns;
    bson_t update = BSON_INITIALIZER, statements;
    bson_iter_t iter, id;
    uint32_t count = 0;
    if (!done) {
        request->route.fault_in.mark_since = request->proxy->cluster_time_values[PROXY_TIER_FAST];
    }
    BSON_APPEND_UTF8(&update, "update", TIER_MARKS_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&update, "updates", &statements);
    bson_iter_init(&iter, done ? &request->route.fault_in.copied_ids : documents);
    while (bson_iter_next(&iter)) {
        bson_t document, statement, query, change, set;
        char key[16];
        const char *key_string;
        const bson_value_t *value = bson_iter_value(&iter);
        if (!done) {
            if (!bson_view_of(&iter, &document) || !bson_iter_init_find(&id, &document, "_id")) {
                continue;
            }
            value = bson_iter_value(&id);
            bson_uint32_to_string(count, &key_string, key, sizeof key);
            BSON_APPEND_VALUE(&request->route.fault_in.copied_ids, key_string, value);
        }
        bson_uint32_to_string(count++, &key_string, key, sizeof key);
        BSON_APPEND_DOCUMENT_BEGIN(&statements, key_string, &statement);
        BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
        worker_writes_mark_key(&query, "_id", ns, value, "fault");
        bson_append_document_end(&statement, &query);
        if (done) {
            worker_writes_append_done_update(&statement, "u", request->route.fault_in.mark_since, to);
        } else {
            BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &change);
            BSON_APPEND_DOCUMENT_BEGIN(&change, "$set", &set);
            BSON_APPEND_UTF8(&set, "state", "pending");
            timestamp_append(&set, "since", request->route.fault_in.mark_since);
            BSON_APPEND_INT64(&set, "copy", worker_writes_digest(&document));
            bson_append_document_end(&change, &set);
            bson_append_document_end(&statement, &change);
        }
        BSON_APPEND_BOOL(&statement, "upsert", true);
        bson_append_document_end(&statements, &statement);
    }
    bson_append_array_end(&update, &statements);
    router_append_state_write_options(&update);
    router_call_tier_command(request, done ? PHASE_FAULT_IN_MARKED : PHASE_FAULT_IN_MARKING, PROXY_TIER_FAST, &update);
}

/* A marks write's reply: false (the request answered) unless it is ok with no write error. */
static bool marks_written(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body;
    bson_iter_t iter;
    if (!router_take_ok_reply(request, outcome->reply, outcome->length, outcome->error, &body)) {
        return false;
    }
    if (bson_iter_init_find(&iter, &body, "writeErrors")) {
        router_relay_reply(request, outcome->reply, outcome->length);
        return false;
    }
    return true;
}

void router_fault_in_on_marking(proxy_request_t *request, const router_outcome_t *outcome)
{
    if (!marks_written(request, outcome)) {
        return;
    }
    uint8_t *insert = request->route.fault_in.insert;
    request->route.fault_in.insert = NULL; /* the call owns it now */
    router_call_tier(request, PHASE_FAULT_IN_INSERTING, PROXY_TIER_FAST, insert, request->route.fault_in.insert_length,
                     insert);
}

void router_fault_in_on_inserted(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body;
    bson_error_t parse_error;
    if (outcome->error != NULL) {
        request->proxy->requests_failed++; /* a tier failed, as in every other route */
        router_finish_with_error(request, outcome->error);
        return;
    }
    /* Duplicate keys are expected: the fast tier already had a newer version. Its
     * reply's operationTime is at or after the copies' own times. */
    uint64_t to = request->proxy->cluster_time_values[PROXY_TIER_FAST];
    if (wire_op_msg_peek_body(outcome->reply, outcome->length, &body, &parse_error)) {
        uint64_t time = timestamp_find(&body, "operationTime");
        to = time > to ? time : to;
    }
    mark_copies(request, NULL, true, to);
}

void router_fault_in_on_marked(proxy_request_t *request, const router_outcome_t *outcome)
{
    if (!marks_written(request, outcome)) {
        return;
    }
    router_fault_in_done(request);
}

void router_fault_in_done(proxy_request_t *request)
{
    if (router_unique_pending(request)) {
        router_unique_start(request);
        return;
    }
    forward_write(request);
}

void router_fault_in_on_found(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body;
    bson_iter_t iter, cursor, batch;
    bson_error_t parse_error;
    if (outcome->error != NULL) {
        request->proxy->requests_failed++; /* a tier failed, as in every other route */
        router_finish_with_error(request, outcome->error);
        return;
    }
    if (!wire_op_msg_peek_body(outcome->reply, outcome->length, &body, &parse_error) || !bson_iter_init_find(&iter, &body, "cursor") ||
        !bson_iter_recurse(&iter, &cursor) || !bson_iter_find(&cursor, "firstBatch") ||
        !bson_iter_recurse(&cursor, &batch)) {
        tc_error_set(&parse_error, TC_ERR_OPERATION_FAILED,
                     "cannot copy the documents this write touches from the archive: unexpected reply");
        router_finish_with_error(request, &parse_error);
        return;
    }
    bson_t documents = BSON_INITIALIZER;
    uint32_t count = 0;
    while (bson_iter_next(&batch)) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string(count++, &key_string, key, sizeof key);
        bson_append_iter(&documents, key_string, -1, &batch);
    }
    if ((int64_t)count > request->proxy->config->fault_in_limit) {
        bson_destroy(&documents);
        tc_error_set(&parse_error, TC_ERR_OPERATION_FAILED,
                     "this write may touch more than %lld documents held only by the archive (faultInLimit): "
                     "narrow it, or raise faultInLimit in the proxy's config",
                     (long long)request->proxy->config->fault_in_limit);
        router_finish_with_error(request, &parse_error);
        return;
    }
    if (count == 0) {
        bson_destroy(&documents);
        router_fault_in_done(request);
        return;
    }
    if (request->namespace_state != NULL) {
        request->namespace_state->fault_ins += count;
    }
    const config_namespace_t *names = request->namespace_state->config;
    bson_t insert = BSON_INITIALIZER;
    uint8_t *encoded;
    size_t encoded_length;
    BSON_APPEND_UTF8(&insert, "insert", names->collection);
    BSON_APPEND_ARRAY(&insert, "documents", &documents);
    BSON_APPEND_BOOL(&insert, "ordered", false);
    bson_t documents_copy;
    bson_copy_to(&documents, &documents_copy);
    /* Archive documents, which the archive accepted: the fast tier's copy of its
     * validator must not refuse them (the client's write itself is validated). */
    BSON_APPEND_BOOL(&insert, "bypassDocumentValidation", true);
    BSON_APPEND_UTF8(&insert, "$db", names->database);
    bool built = wire_op_msg_build(0, 0, 0, &insert, NULL, 0, &encoded, &encoded_length, &parse_error);
    bson_destroy(&insert);
    bson_destroy(&documents);
    if (!built) {
        bson_destroy(&documents_copy);
        router_finish_with_error(request, &parse_error);
        return;
    }
    fault_in_state_init(request);
    bson_reinit(&request->route.fault_in.copied_ids); /* the first pass's, when unique keys are the second */
    request->route.fault_in.insert = encoded;
    request->route.fault_in.insert_length = encoded_length;
    mark_copies(request, &documents_copy, false, 0);
    bson_destroy(&documents_copy);
}

/* The filters' collation (a collated unique index's, a write statement's) on the
 * fault-in find, when every filter has the same one: the id clause, an equality,
 * then also matches case variants of string ids, a superset a fault-in may copy
 * (archive documents, copied faithfully). Filters without one, or under two
 * different ones, keep the binary find. */
static void append_fault_in_collation(const bson_t *filters, bson_t *find)
{
    bson_iter_t iter, item;
    const uint8_t *chosen = NULL;
    uint32_t chosen_length = 0;
    bson_iter_init(&iter, filters);
    while (bson_iter_next(&iter)) {
        uint32_t length = 0;
        const uint8_t *data = NULL;
        if (BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_iter_recurse(&iter, &item) && bson_iter_find(&item, "collation") &&
            BSON_ITER_HOLDS_DOCUMENT(&item)) {
            bson_iter_document(&item, &length, &data);
        }
        if (data == NULL || (chosen != NULL && (length != chosen_length || memcmp(data, chosen, length) != 0))) {
            return;
        }
        chosen = data;
        chosen_length = length;
    }
    if (chosen != NULL) {
        bson_t collation;
        bson_init_static(&collation, chosen, chosen_length);
        BSON_APPEND_DOCUMENT(find, "collation", &collation);
    }
}

/* Asks the archive for every document the write may touch: the ids named, and
 * the documents the filters match, at most faultInLimit of them. */
void router_fault_in_find(proxy_request_t *request)
{
    plan_decision_t *decision = &request->decision;
    const config_namespace_t *names = request->namespace_state->config;
    bson_t find = BSON_INITIALIZER, filter, clauses;
    uint32_t clause = 0;
    char key[16];
    const char *key_string;

    /* The clauses: {_id: {$in: ids}} and each filter. One clause is sent alone:
     * {$or: [...]} of one would cost the archive a collection scan where the
     * clause alone uses an index. */
    bson_init(&clauses);
    const bson_t *computed = router_unique_filters(request); /* the second pass: the computed keys alone */
    const bson_t *fault_in_filters = computed != NULL ? computed : &decision->fault_in_filters;
    uint32_t id_count = decision->fault_in_id_count + decision->unique_id_check_count;
    if (computed != NULL) {
        id_count = 0;
    } else if (request->route_kind == ROUTE_STATE_FAULT_IN) {
        id_count = request->route.fault_in.missing_count;
    }
    if (id_count > 0) {
        bson_t id_clause, id_condition, ids;
        uint32_t index = 0;
        bson_uint32_to_string(clause++, &key_string, key, sizeof key);
        bson_append_document_begin(&clauses, key_string, -1, &id_clause);
        BSON_APPEND_DOCUMENT_BEGIN(&id_clause, "_id", &id_condition);
        BSON_APPEND_ARRAY_BEGIN(&id_condition, "$in", &ids);
        append_ids_to_fault_in(request, &ids, &index);
        bson_append_array_end(&id_condition, &ids);
        bson_append_document_end(&id_clause, &id_condition);
        bson_append_document_end(&clauses, &id_clause);
    }
    bson_iter_t filters;
    bson_iter_init(&filters, fault_in_filters);
    while (bson_iter_next(&filters)) {
        bson_iter_t item;
        if (BSON_ITER_HOLDS_DOCUMENT(&filters) && bson_iter_recurse(&filters, &item) &&
            bson_iter_find(&item, "filter") && BSON_ITER_HOLDS_DOCUMENT(&item)) {
            bson_uint32_to_string(clause++, &key_string, key, sizeof key);
            bson_append_iter(&clauses, key_string, -1, &item);
        }
    }
    BSON_APPEND_UTF8(&find, "find", names->collection);
    bson_iter_t only;
    if (clause == 1 && bson_iter_init(&only, &clauses) && bson_iter_next(&only)) {
        bson_append_iter(&find, "filter", 6, &only);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(&find, "filter", &filter);
        BSON_APPEND_ARRAY(&filter, "$or", &clauses);
        bson_append_document_end(&find, &filter);
    }
    bson_destroy(&clauses);
    append_fault_in_collation(fault_in_filters, &find);
    /* One more than the limit: a cursor left open means the write touches too many. */
    BSON_APPEND_INT64(&find, "batchSize", request->proxy->config->fault_in_limit + 1);
    BSON_APPEND_UTF8(&find, "$db", names->database);
    router_call_tier_command(request, PHASE_FAULT_IN_FINDING, PROXY_TIER_ARCHIVE, &find);
}

/* What the archive must give: the archive must show the deletes acknowledged
 * before the write first, or a copy of a document deleted since would bring it
 * back (I6). */
static void fault_in_from_archive(proxy_request_t *request)
{
    router_wait_for_feeder(request, true, PHASE_FAULT_IN_FINDING);
}

void router_fault_in_pinned(proxy_request_t *request)
{
    if (router_pins_needed(request)) {
        router_pins_write(request);
        return;
    }
    router_fault_in_check_fast(request);
}

/* Once the documents are pinned: the ids the write names, looked for in the fast
 * tier (their _id index only). */
void router_fault_in_check_fast(proxy_request_t *request)
{
    const plan_decision_t *decision = &request->decision;
    uint32_t id_count = decision->fault_in_id_count + decision->unique_id_check_count;
    if (id_count == 0 && decision->fault_in_filter_count == 0) {
        router_fault_in_done(request); /* only the keys its updates compute */
        return;
    }
    if (id_count == 0) {
        fault_in_from_archive(request); /* filters only: what they match may be anywhere */
        return;
    }
    bson_t find = BSON_INITIALIZER, filter, condition, ids, projection;
    uint32_t index = 0;
    BSON_APPEND_UTF8(&find, "find", request->namespace_state->config->collection);
    BSON_APPEND_DOCUMENT_BEGIN(&find, "filter", &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &condition);
    BSON_APPEND_ARRAY_BEGIN(&condition, "$in", &ids);
    append_ids_to_fault_in(request, &ids, &index);
    bson_append_array_end(&condition, &ids);
    bson_append_document_end(&filter, &condition);
    bson_append_document_end(&find, &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&find, "projection", &projection);
    BSON_APPEND_INT32(&projection, "_id", 1);
    bson_append_document_end(&find, &projection);
    BSON_APPEND_INT64(&find, "batchSize", (int64_t)id_count + 1);
    BSON_APPEND_BOOL(&find, "singleBatch", true);
    BSON_APPEND_UTF8(&find, "$db", request->namespace_state->config->database);
    router_call_tier_command(request, PHASE_FAULT_IN_CHECKING_FAST, PROXY_TIER_FAST, &find);
}

/* Whether id is in the BSON array held (5, 5.0 and 5L are one id). */
static bool id_held(const bson_t *held, const bson_value_t *id)
{
    bson_iter_t iter, field;
    bson_iter_init(&iter, held);
    while (bson_iter_next(&iter)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_iter_recurse(&iter, &field) && bson_iter_find(&field, "_id") &&
            order_compare_values(bson_iter_value(&field), id) == 0) {
            return true;
        }
    }
    return false;
}

void router_fault_in_on_fast_checked(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body, batch;
    bson_iter_t iter;
    bson_error_t parse_error;
    uint32_t length;
    const uint8_t *data;
    if (outcome->error != NULL) {
        request->proxy->requests_failed++; /* a tier failed, as in every other route */
        router_finish_with_error(request, outcome->error);
        return;
    }
    if (!wire_op_msg_peek_body(outcome->reply, outcome->length, &body, &parse_error) ||
        !router_reply_is_ok(&body) || !bson_iter_init(&iter, &body) ||
        !bson_iter_find_descendant(&iter, "cursor.firstBatch", &iter) || !BSON_ITER_HOLDS_ARRAY(&iter)) {
        router_relay_reply(request, outcome->reply, outcome->length); /* the fast tier's error, as it is */
        return;
    }
    bson_iter_array(&iter, &length, &data);
    bson_init_static(&batch, data, length);
    fault_in_state_init(request);
    const bson_t *lists[] = {&request->decision.fault_in_ids, &request->decision.unique_id_checks};
    for (size_t list = 0; list < 2; list++) {
        bson_iter_init(&iter, lists[list]);
        while (bson_iter_next(&iter)) {
            if (!id_held(&batch, bson_iter_value(&iter))) {
                char key[16];
                const char *key_string;
                size_t key_length =
                    bson_uint32_to_string(request->route.fault_in.missing_count++, &key_string, key, sizeof key);
                bson_append_iter(&request->route.fault_in.missing_ids, key_string, (int)key_length, &iter);
            }
        }
    }
    if (request->route.fault_in.missing_count == 0 && request->decision.fault_in_filter_count == 0) {
        /* The fast tier holds every document the write names: nothing from the archive. */
        router_fault_in_done(request);
        return;
    }
    fault_in_from_archive(request);
}

/* The documents stay in the fast tier until the write has run (no eviction in
 * between): pinned first, or once the eviction under way has ended. */
void router_fault_in_start(proxy_request_t *request)
{
    if (!router_pin_fault_in(request)) {
        router_wait_for_pins(request);
        return;
    }
    router_fault_in_pinned(request);
}
