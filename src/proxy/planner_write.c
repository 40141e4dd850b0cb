/* A write's plan: every write runs on the fast tier; this decides what it must
 * first fault in from the archive and which new _id values the archive must not
 * already hold (I7). */
#include "proxy/planner_private.h"

#include "query/value_format.h"

#include <stdio.h>
#include <string.h>

static bool wrong_type(bson_error_t *error, const char *field, const bson_iter_t *value, const char *expected)
{
    return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '%s' is the wrong type '%s', expected type '%s'",
                        field, value_type_name(bson_iter_type(value)), expected);
}

static bool missing_field(bson_error_t *error, const char *field)
{
    return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD, "BSON field '%s' is missing but a required field", field);
}

/* mongod's safeBool: booleans and numbers; absent and null are false. Decimals count
 * as true, which at worst faults in more than needed. */
static bool read_safe_bool(const bson_t *document, const char *field, const char *label, bool *out, bson_error_t *error)
{
    bson_iter_t iter;
    *out = false;
    if (!bson_iter_init_find(&iter, document, field) || BSON_ITER_HOLDS_NULL(&iter)) {
        return true;
    }
    if (BSON_ITER_HOLDS_DECIMAL128(&iter)) {
        *out = true;
        return true;
    }
    if (!BSON_ITER_HOLDS_BOOL(&iter) && !BSON_ITER_HOLDS_NUMBER(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field '%s' is the wrong type '%s', expected types '[bool, long, int, decimal, "
                            "double]'",
                            label, value_type_name(bson_iter_type(&iter)));
    }
    *out = bson_iter_as_bool(&iter);
    return true;
}

/* One statement of a write: what it matches and what it may insert. */
typedef struct write_statement {
    bson_t filter;
    bool upsert;
    bool has_update;
    bson_iter_t update;
    bool has_collation;
    bson_t collation;
    int32_t number; /* its place in `updates` (0 for findAndModify) */
} write_statement_t;

static bool document_field(const bson_t *document, const char *field, const char *label, bool required,
                           bool *out_present, bson_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    *out_present = false;
    if (!bson_iter_init_find(&iter, document, field)) {
        return required ? missing_field(error, label) : true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return wrong_type(error, label, &iter, "object");
    }
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(&iter, &length, &data);
    *out_present = true;
    return bson_init_static(out, data, length);
}

static bool update_field(const bson_t *document, const char *field, const char *label, bool required,
                         write_statement_t *statement, bson_error_t *error)
{
    if (!bson_iter_init_find(&statement->update, document, field)) {
        return required ? missing_field(error, label) : true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&statement->update) && !BSON_ITER_HOLDS_ARRAY(&statement->update)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Update argument must be either an object or an array");
    }
    statement->has_update = true;
    return true;
}

static void append_fault_in_filter(plan_decision_t *out, const write_statement_t *statement)
{
    char index[16];
    const char *key;
    size_t key_length = bson_uint32_to_string(out->fault_in_filter_count, &key, index, sizeof index);
    bson_t entry;
    bson_append_document_begin(&out->fault_in_filters, key, (int)key_length, &entry);
    BSON_APPEND_DOCUMENT(&entry, "filter", &statement->filter);
    if (statement->has_collation) {
        BSON_APPEND_DOCUMENT(&entry, "collation", &statement->collation);
    }
    bson_append_document_end(&out->fault_in_filters, &entry);
    out->fault_in_filter_count++;
}

static bool upsert_refused(const planner_context_t *context, bson_error_t *error, const char *why)
{
    return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED,
                        "upsert on tiered namespace %s.%s: thermocline cannot tell which _id it may insert (%s), so it "
                        "cannot check _id uniqueness against the archive; put the _id in the query or set it with "
                        "$set or $setOnInsert",
                        context->database, context->collection, why);
}

/* What one update, delete or findAndModify statement must fault in (brief:
 * single-document writes by _id fault in that _id unless the filter proves the
 * document inside the horizon; others fault in what their filter matches). */
static bool plan_write_statement(const planner_context_t *context, const write_statement_t *statement,
                                 plan_decision_t *out, bson_error_t *error)
{
    planner_bound_t bound = {0};
    bool inside = false;
    if (planner_collect_bound(&statement->filter, context->policy->time_field, &bound) && bound.found) {
        if (!out->has_lower_bound) {
            planner_record_bound(out, &bound);
        }
        inside = planner_bound_inside_horizon(context, &bound);
    }

    bson_t pinned = BSON_INITIALIZER;
    uint32_t pinned_count = 0;
    bool ok = true;
    if (planner_filter_pinned_ids(&statement->filter, &pinned, &pinned_count)) {
        /* An upsert inside the horizon still needs the ids: the archive may hold that
         * _id outside the window, and the insert must then fail as a duplicate (I7). */
        if (!inside || statement->upsert) {
            bson_iter_t id;
            bson_iter_init(&id, &pinned);
            while (bson_iter_next(&id)) {
                planner_append_value(&out->fault_in_ids, &out->fault_in_id_count, &id);
            }
        }
        /* Under a collation "abc" also matches "ABC": copy what the filter matches too. */
        if (statement->has_collation && !inside) {
            append_fault_in_filter(out, statement);
        }
    } else {
        if (!inside) {
            append_fault_in_filter(out, statement);
        }
        if (statement->upsert && !out->is_explain) { /* explain inserts nothing */
            if (planner_filter_has_id_subpath(&statement->filter)) {
                ok = upsert_refused(context, error, "the query names a sub-path of _id");
            } else if (statement->has_update &&
                       planner_upsert_inserted_id(&statement->update, &out->unique_id_checks,
                                                  &out->unique_id_check_count) == PLANNER_UPSERT_ID_UNKNOWN) {
                ok = upsert_refused(context, error,
                                    BSON_ITER_HOLDS_ARRAY(&statement->update)
                                        ? "the update is an aggregation pipeline"
                                        : "the update changes _id other than by $set or $setOnInsert");
            }
        }
    }
    bson_destroy(&pinned);
    if (ok && statement->has_update && !out->is_explain &&
        planner_unique_keys_of_update(context->policy, &statement->update, &statement->filter, statement->upsert,
                                      out)) {
        char index[16];
        const char *key;
        size_t key_length = bson_uint32_to_string(out->unique_computed_count++, &key, index, sizeof index);
        bson_append_int32(&out->unique_computed_statements, key, (int)key_length, statement->number);
    }
    return ok;
}

static bool plan_insert(const planner_context_t *context, const bson_t *command, plan_decision_t *out,
                        bson_error_t *error)
{
    bson_iter_t documents;
    bson_iter_t document;
    if (!fields_find(context->fields, "documents", &documents)) {
        return missing_field(error, "insert.documents");
    }
    if (!BSON_ITER_HOLDS_ARRAY(&documents)) {
        return wrong_type(error, "insert.documents", &documents, "array");
    }
    bson_iter_recurse(&documents, &document);
    while (bson_iter_next(&document)) {
        bson_iter_t field;
        if (!BSON_ITER_HOLDS_DOCUMENT(&document)) {
            char label[64];
            snprintf(label, sizeof label, "insert.documents.%s", bson_iter_key(&document));
            return wrong_type(error, label, &document, "object");
        }
        /* Without an _id the server generates an ObjectId: nothing to check. */
        bson_iter_recurse(&document, &field);
        while (bson_iter_next(&field)) {
            if (strcmp(bson_iter_key(&field), "_id") == 0) {
                planner_append_value(&out->unique_id_checks, &out->unique_id_check_count, &field);
            }
        }
        bson_t inserted;
        uint32_t length;
        const uint8_t *data;
        bson_iter_document(&document, &length, &data);
        if (bson_init_static(&inserted, data, length)) {
            planner_unique_keys_of_insert(context->policy, &inserted, out);
        }
    }
    return true;
}

/* update and delete: a statement list under `updates` or `deletes`. */
static bool plan_statements(const planner_context_t *context, const bson_t *command, bool is_update,
                            plan_decision_t *out, bson_error_t *error)
{
    const char *list_name = is_update ? "updates" : "deletes";
    char label[96];
    bson_iter_t list;
    bson_iter_t element;

    snprintf(label, sizeof label, "%s.%s", context->name, list_name);
    if (!fields_find(context->fields, list_name, &list)) {
        return missing_field(error, label);
    }
    if (!BSON_ITER_HOLDS_ARRAY(&list)) {
        return wrong_type(error, label, &list, "array");
    }
    bson_iter_recurse(&list, &element);
    for (int32_t number = 0; bson_iter_next(&element); number++) {
        write_statement_t statement = {.number = number};
        bson_t body;
        bool present;
        uint32_t length;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&element)) {
            snprintf(label, sizeof label, "%s.%s.%s", context->name, list_name, bson_iter_key(&element));
            return wrong_type(error, label, &element, "object");
        }
        bson_iter_document(&element, &length, &data);
        if (!bson_init_static(&body, data, length)) {
            return tc_error_set(error, TC_ERR_INVALID_BSON, "invalid BSON in %s", list_name);
        }
        snprintf(label, sizeof label, "%s.%s.q", context->name, list_name);
        if (!document_field(&body, "q", label, true, &present, &statement.filter, error)) {
            return false;
        }
        snprintf(label, sizeof label, "%s.%s.collation", context->name, list_name);
        if (!document_field(&body, "collation", label, false, &statement.has_collation, &statement.collation, error)) {
            return false;
        }
        if (is_update) {
            snprintf(label, sizeof label, "%s.%s.u", context->name, list_name);
            if (!update_field(&body, "u", label, true, &statement, error)) {
                return false;
            }
            snprintf(label, sizeof label, "%s.%s.upsert", context->name, list_name);
            if (!read_safe_bool(&body, "upsert", label, &statement.upsert, error)) {
                return false;
            }
        }
        if (!plan_write_statement(context, &statement, out, error)) {
            return false;
        }
    }
    return true;
}

static bool plan_find_and_modify(const planner_context_t *context, const bson_t *command, plan_decision_t *out,
                                 bson_error_t *error)
{
    write_statement_t statement = {0};
    bool present;
    bool remove;
    if (!document_field(command, "query", "findAndModify.query", false, &present, &statement.filter, error) ||
        !document_field(command, "collation", "findAndModify.collation", false, &statement.has_collation,
                        &statement.collation, error) ||
        !update_field(command, "update", "findAndModify.update", false, &statement, error) ||
        !read_safe_bool(command, "upsert", "findAndModify.upsert", &statement.upsert, error) ||
        !read_safe_bool(command, "remove", "findAndModify.remove", &remove, error)) {
        return false;
    }
    if (!present) {
        bson_init(&statement.filter); /* no query: the first document of the collection */
    }
    if (remove) {
        statement.upsert = false;
        statement.has_update = false;
    }
    return plan_write_statement(context, &statement, out, error);
}

static void describe_write(plan_decision_t *out)
{
    if (out->is_explain) {
        planner_decide(out, PLAN_ROUTE_FAST, PLAN_REASON_WRITE,
                       "a write runs on the fast tier; explain writes nothing, so nothing is faulted in");
        return;
    }
    planner_decide(out, PLAN_ROUTE_FAST, PLAN_REASON_WRITE, "writes run on the fast tier");
    if (out->fault_in_id_count > 0) {
        planner_reason_append(out, "; fault in %u _id%s from the archive first", out->fault_in_id_count,
                              out->fault_in_id_count == 1 ? "" : "s");
    }
    if (out->fault_in_filter_count > 0) {
        planner_reason_append(out, "; fault in the archive documents matching %u filter%s first (at most faultInLimit)",
                              out->fault_in_filter_count, out->fault_in_filter_count == 1 ? "" : "s");
    }
    if (out->unique_id_check_count > 0) {
        planner_reason_append(out, "; check %u new _id%s against the archive (unique _id)", out->unique_id_check_count,
                              out->unique_id_check_count == 1 ? "" : "s");
    }
    if (out->unique_computed_count > 0) {
        planner_reason_append(out, "; %u statement%s compute a unique key: fault in the keys of what %s in the fast tier",
                              out->unique_computed_count, out->unique_computed_count == 1 ? "" : "s",
                              out->unique_computed_count == 1 ? "it updates" : "they update");
    }
    if (!out->needs_fault_in && out->unique_id_check_count == 0 && out->unique_computed_count == 0) {
        if (out->has_lower_bound) {
            planner_reason_append(out, "; the filter is inside the horizon: nothing to fault in");
        } else {
            planner_reason_append(out, "; nothing to fault in");
        }
    }
}

bool planner_plan_write(const planner_context_t *context, const bson_t *command, plan_decision_t *out,
                        bson_error_t *error)
{
    bool ok;
    out->kind = PLAN_KIND_WRITE;
    if (context->policy == NULL) {
        planner_decide(out, PLAN_ROUTE_ARCHIVE, PLAN_REASON_NO_POLICY, "namespace has no tiering policy");
        return true;
    }
    if (strcmp(context->name, "insert") == 0) {
        ok = plan_insert(context, command, out, error);
    } else if (strcmp(context->name, "update") == 0) {
        ok = plan_statements(context, command, true, out, error);
    } else if (strcmp(context->name, "delete") == 0) {
        ok = plan_statements(context, command, false, out, error);
    } else {
        ok = plan_find_and_modify(context, command, out, error);
    }
    if (!ok) {
        out->route = PLAN_ROUTE_ARCHIVE;
        out->reason = PLAN_REASON_MALFORMED;
        snprintf(out->reason_text, sizeof out->reason_text, "refused: %.300s", error ? error->message : "bad write");
        return false;
    }
    if (out->is_explain) {
        bson_reinit(&out->fault_in_ids);
        bson_reinit(&out->fault_in_filters);
        bson_reinit(&out->unique_id_checks);
        bson_reinit(&out->unique_computed_statements);
        bson_reinit(&out->unique_computed_indexes);
        out->fault_in_id_count = out->fault_in_filter_count = out->unique_id_check_count = 0;
        out->unique_computed_count = 0;
    }
    out->needs_fault_in = out->fault_in_id_count > 0 || out->fault_in_filter_count > 0;
    describe_write(out);
    return true;
}
