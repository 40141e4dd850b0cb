/* Unique keys a write computes (issue 13): an update whose new unique key value
 * the planner cannot name ($inc, $rename, $unset, $push and the other array
 * operators, a path through an array, a pipeline: plan_decision_t's
 * unique_computed_statements) is checked at write time. Once the documents the
 * write may touch are in the fast tier (its fault-in ran or was not needed), the
 * documents each such statement's filter matches are read there
 * (PHASE_UNIQUE_READING_FAST; a multi: false statement may take any of them, so
 * all), the update is applied to each here with the store's engine (query/update.h;
 * an upsert that matches nothing: to its seed), and the unique keys of the results
 * (plan_unique_keys_of_document) become fault-in filters: the archive documents
 * holding them are copied in by router_fault_in.c's steps (after the feeder's
 * deletes), and the fast tier's own unique index then refuses a duplicate with
 * MongoDB's E11000 before anything is written. The fault-in's pins (the whole
 * namespace: router_wait.c) hold across the read and the write.
 *
 * Best effort by nature: a statement the engine cannot apply to a document (the
 * tier refuses the write as well), or a document another write changes between the
 * read and the write, leaves that key to the feeder's refusal path (README: limits). */
#include "proxy/router_private.h"

#include "common/bson_view.h"
#include "query/match.h"
#include "query/update.h"
#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

/* One statement being read: what applying it needs. */
typedef struct unique_statement {
    int32_t number;           /* its place in `updates` (0: findAndModify) */
    bson_t filter;            /* copied: its query */
    bool upsert;
    update_spec_t *update;
    match_expression_t *matcher; /* only for a positional '$': the element the query matched */
    collation_t *collation;   /* its collation, for that matcher (NULL: binary) */
    bson_t let_values;
    expression_context_t context;
    bool matched; /* the fast tier returned a document for it */
} unique_statement_t;

struct router_unique {
    bson_t filters; /* the computed keys' fault-in filters ({filter, collation}), each once */
    uint32_t filter_count;
    uint32_t next;        /* the next of decision.unique_computed_statements to read */
    int64_t read;         /* documents read so far: faultInLimit bounds them */
    int64_t cursor_id;    /* the current statement's cursor on the fast tier, 0: none */
    bool reading;         /* statement holds the statement being read */
    bool done;            /* every statement read: the fault-in finds the filters */
    unique_statement_t statement;
};

static void statement_clear(struct router_unique *unique)
{
    if (!unique->reading) {
        return;
    }
    unique_statement_t *statement = &unique->statement;
    bson_destroy(&statement->filter);
    update_destroy(statement->update);
    match_destroy(statement->matcher);
    collation_release(statement->collation);
    bson_destroy(&statement->let_values);
    memset(statement, 0, sizeof *statement);
    unique->reading = false;
}

void router_unique_destroy(struct router_unique *unique)
{
    if (unique == NULL) {
        return;
    }
    statement_clear(unique);
    bson_destroy(&unique->filters);
    bson_free(unique);
}

bool router_unique_pending(const proxy_request_t *request)
{
    const plan_decision_t *decision = &request->decision;
    /* In a transaction only its first command may: the fault-in's copies must be in
     * place before its snapshot (router_transaction.c refuses fault-ins after). */
    return request->has_decision && decision->unique_computed_count > 0 && request->unique == NULL &&
           !decision->is_explain && request->namespace_state != NULL &&
           (!decision->in_transaction || bson_has_field(&request->command, "startTransaction"));
}

const bson_t *router_unique_filters(const proxy_request_t *request)
{
    return request->unique != NULL && request->unique->done ? &request->unique->filters : NULL;
}

/* The command's part that describes statement `number`: an update's element of
 * `updates`, or the findAndModify command itself. */
static bool statement_body(const proxy_request_t *request, int32_t number, bson_t *out_body)
{
    bson_iter_t list, element;
    char key[16];
    if (!fields_find(&request->fields, "updates", &list)) {
        /* findAndModify: the command itself, borrowed */
        return bson_init_static(out_body, bson_get_data(&request->command), request->command.len);
    }
    snprintf(key, sizeof key, "%d", (int)number);
    return BSON_ITER_HOLDS_ARRAY(&list) && bson_iter_recurse(&list, &element) && bson_iter_find(&element, key) &&
           bson_view_of(&element, out_body) && BSON_ITER_HOLDS_DOCUMENT(&element);
}

/* The statement's document field (q, arrayFilters...) as a view, false when absent. */
static bool body_document(const bson_t *body, const char *name, bson_t *out)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, body, name) && bson_view_of(&iter, out);
}

/* Prepares statement `number` for reading: false when it cannot be applied here
 * (a malformed one: the tier refuses the write itself). */
static bool statement_prepare(proxy_request_t *request, int32_t number, unique_statement_t *out)
{
    bool is_update = fields_find(&request->fields, "updates", &(bson_iter_t){0});
    bson_t body, filter, array_filters, collation;
    bson_iter_t iter;
    bson_error_t error;
    bson_init(&out->filter);
    bson_init(&out->let_values);
    expression_context_init(&out->context);
    out->number = number;
    if (!statement_body(request, number, &body)) {
        return false;
    }
    if (body_document(&body, is_update ? "q" : "query", &filter)) {
        bson_destroy(&out->filter);
        bson_copy_to(&filter, &out->filter);
    }
    out->upsert = bson_iter_init_find(&iter, &body, "upsert") && bson_iter_as_bool(&iter);
    if (fields_find(&request->fields, "let", &iter) &&
        !expression_evaluate_let(bson_iter_value(&iter), &out->context, &out->let_values, &error)) {
        return false;
    }
    bool has_array_filters = body_document(&body, "arrayFilters", &array_filters);
    if (!bson_iter_init_find(&iter, &body, is_update ? "u" : "update")) {
        return false;
    }
    out->update = update_compile_with_context(bson_iter_value(&iter), has_array_filters ? &array_filters : NULL,
                                              &out->context, &error);
    if (out->update == NULL) {
        return false;
    }
    if (update_uses_positional(out->update)) {
        if (body_document(&body, "collation", &collation) && !collation_parse(&collation, &out->collation, &error)) {
            return false;
        }
        out->context.collation = out->collation;
        out->matcher = match_compile_with_context(&out->filter, &out->context, &error);
    }
    return true;
}

/* The unique keys of statement's result on document (NULL: the upsert's seed). */
static void add_keys_of_result(proxy_request_t *request, const bson_t *document)
{
    struct router_unique *unique = request->unique;
    unique_statement_t *statement = &unique->statement;
    bson_t result = BSON_INITIALIZER, seed;
    bson_error_t error;
    bool applied;
    if (document == NULL) {
        applied = update_build_upsert_seed(statement->update, &statement->filter, &seed, &error) &&
                  update_apply(statement->update, &seed, true, &result, NULL, NULL, &error);
        bson_destroy(&seed);
    } else {
        match_details_t details = {0};
        if (statement->matcher != NULL) {
            match_document_with_details(statement->matcher, document, &details);
        }
        update_apply_options_t options = {.matched_array_index = details.has_array_index ? details.array_index : NULL};
        applied = update_apply_with_options(statement->update, document, &options, &result, NULL, NULL, &error);
    }
    if (applied) {
        plan_unique_keys_of_document(&request->decision.unique_computed_indexes, &result, document, &unique->filters,
                                     &unique->filter_count);
    }
    bson_destroy(&result);
}

/* The fast tier's find of the current statement's documents: one more than the
 * documents faultInLimit still allows, so a full answer closes the cursor. */
static void send_find(proxy_request_t *request)
{
    struct router_unique *unique = request->unique;
    const config_namespace_t *names = request->namespace_state->config;
    int64_t room = request->proxy->config->fault_in_limit - unique->read + 1;
    bson_t find = BSON_INITIALIZER, body, collation;
    bson_iter_t iter;
    BSON_APPEND_UTF8(&find, "find", names->collection);
    BSON_APPEND_DOCUMENT(&find, "filter", &unique->statement.filter);
    if (statement_body(request, unique->statement.number, &body) && body_document(&body, "collation", &collation)) {
        BSON_APPEND_DOCUMENT(&find, "collation", &collation);
    }
    if (fields_find(&request->fields, "let", &iter)) {
        bson_append_iter(&find, "let", 3, &iter);
    }
    BSON_APPEND_INT64(&find, "limit", room);
    BSON_APPEND_INT64(&find, "batchSize", room);
    BSON_APPEND_UTF8(&find, "$db", names->database);
    router_call_tier_command(request, PHASE_UNIQUE_READING_FAST, PROXY_TIER_FAST, &find);
}

static void send_get_more(proxy_request_t *request)
{
    struct router_unique *unique = request->unique;
    const config_namespace_t *names = request->namespace_state->config;
    bson_t get_more = BSON_INITIALIZER;
    BSON_APPEND_INT64(&get_more, "getMore", unique->cursor_id);
    BSON_APPEND_UTF8(&get_more, "collection", names->collection);
    BSON_APPEND_INT64(&get_more, "batchSize", request->proxy->config->fault_in_limit - unique->read + 1);
    BSON_APPEND_UTF8(&get_more, "$db", names->database);
    router_call_tier_command(request, PHASE_UNIQUE_READING_FAST, PROXY_TIER_FAST, &get_more);
}

/* Reads the next statement, or once all are read, faults the keys in. */
static void read_next_statement(proxy_request_t *request)
{
    struct router_unique *unique = request->unique;
    bson_iter_t iter;
    statement_clear(unique);
    while (unique->next < request->decision.unique_computed_count) {
        char key[16];
        int32_t number = -1;
        snprintf(key, sizeof key, "%u", unique->next);
        if (bson_iter_init_find(&iter, &request->decision.unique_computed_statements, key)) {
            number = bson_iter_int32(&iter);
        }
        unique->next++;
        unique->reading = true;
        if (statement_prepare(request, number, &unique->statement)) {
            unique->cursor_id = 0;
            send_find(request);
            return;
        }
        statement_clear(unique);
    }
    if (unique->filter_count == 0) {
        router_forward(request, PROXY_TIER_FAST);
        return;
    }
    unique->done = true;
    /* As every fault-in: the archive must show the deletes acknowledged before. */
    router_wait_for_feeder(request, true, PHASE_FAULT_IN_FINDING);
}

void router_unique_start(proxy_request_t *request)
{
    request->unique = bson_malloc0(sizeof *request->unique);
    bson_init(&request->unique->filters);
    read_next_statement(request);
}

void router_unique_on_read(proxy_request_t *request, const router_outcome_t *outcome)
{
    struct router_unique *unique = request->unique;
    bson_t body, batch, document;
    bson_iter_t iter, cursor;
    bson_error_t error;
    if (outcome->error != NULL) {
        request->proxy->requests_failed++; /* a tier failed, as in every other route */
        router_finish_with_error(request, outcome->error);
        return;
    }
    if (!wire_op_msg_peek_body(outcome->reply, outcome->length, &body, &error) || !router_reply_is_ok(&body) ||
        !bson_iter_init_find(&iter, &body, "cursor") || !bson_iter_recurse(&iter, &cursor)) {
        read_next_statement(request); /* the tier refuses its filter: it refuses the write the same way */
        return;
    }
    unique->cursor_id = 0;
    while (bson_iter_next(&cursor)) {
        const char *key = bson_iter_key(&cursor);
        if (strcmp(key, "id") == 0) {
            unique->cursor_id = bson_iter_as_int64(&cursor);
        } else if ((strcmp(key, "firstBatch") == 0 || strcmp(key, "nextBatch") == 0) && bson_view_of(&cursor, &batch)) {
            bson_iter_t element;
            bson_iter_init(&element, &batch);
            while (bson_iter_next(&element) && bson_view_of(&element, &document)) {
                unique->read++;
                unique->statement.matched = true;
                add_keys_of_result(request, &document);
            }
        }
    }
    if (unique->read > request->proxy->config->fault_in_limit) {
        tc_error_set(&error, TC_ERR_OPERATION_FAILED,
                     "this write changes a unique key in more than %lld documents, whose new keys must be checked "
                     "against the archive first (faultInLimit): narrow it, or raise faultInLimit in the proxy's config",
                     (long long)request->proxy->config->fault_in_limit);
        router_finish_with_error(request, &error);
        return;
    }
    if (unique->cursor_id != 0) {
        send_get_more(request); /* a batch cut at 16 MB */
        return;
    }
    if (!unique->statement.matched && unique->statement.upsert) {
        add_keys_of_result(request, NULL);
    }
    read_next_statement(request);
}
