/* $out and $merge, the stages that end an aggregate by writing its results,
 * as mongod 6.0 runs them. The aggregate collects its results first (under the
 * shared catalog lock, in one read transaction), so a pipeline may read the
 * collection it writes; then:
 *
 *   $out   writes them into a temporary collection of the target's database
 *          (tmp.agg_out.<random>, with the target's options and indexes),
 *          then drops the target and renames the temporary one over it, all
 *          under the exclusive catalog lock: nobody sees a half-written
 *          target, and a failure (a duplicate _id) leaves the target as it was;
 *   $merge writes each result as the insert or update statement mongod's
 *          merge strategies amount to, through the write commands' own
 *          handlers (oplog, retries, duplicate keys), so its errors are theirs.
 */
#include "store/commands.h"
#include "store/oplog.h"
#include "store/validation.h"
#include "query/value_format.h"
#include "common/log.h"
#include "store/transactions.h"

#include <string.h>

#define OUT_INSERT_BATCH 1000

typedef enum output_kind { OUTPUT_OUT, OUTPUT_MERGE } output_kind_t;

typedef enum when_matched {
    WHEN_MATCHED_REPLACE,
    WHEN_MATCHED_KEEP_EXISTING,
    WHEN_MATCHED_MERGE,
    WHEN_MATCHED_FAIL,
    WHEN_MATCHED_PIPELINE,
} when_matched_t;

typedef enum when_not_matched { WHEN_NOT_MATCHED_INSERT, WHEN_NOT_MATCHED_DISCARD, WHEN_NOT_MATCHED_FAIL } when_not_matched_t;

struct aggregate_output {
    output_kind_t kind;
    char *database;
    char *collection;
    char *ns;
    /* $merge only */
    char **on;           /* field paths, NULL-terminated: {"_id"} by default */
    size_t on_count;
    when_matched_t when_matched;
    when_not_matched_t when_not_matched;
    bson_t pipeline;     /* whenMatched's pipeline */
    bson_t let;          /* {name: expression}; empty: {new: "$$ROOT"} */
    bool has_let;
};

static const char *const when_matched_names[] = {"replace", "keepExisting", "merge", "fail", NULL};
static const char *const when_not_matched_names[] = {"insert", "discard", "fail", NULL};

void aggregate_output_destroy(aggregate_output_t *output)
{
    if (output == NULL) {
        return;
    }
    bson_free(output->database);
    bson_free(output->collection);
    bson_free(output->ns);
    bson_strfreev(output->on);
    bson_destroy(&output->pipeline);
    bson_destroy(&output->let);
    bson_free(output);
}

const char *aggregate_output_stage_name(const aggregate_output_t *output)
{
    return output->kind == OUTPUT_OUT ? "$out" : "$merge";
}

/* --- parsing -------------------------------------------------------------------- */

static bool set_target(aggregate_output_t *output, const char *database, const char *collection, bson_error_t *error)
{
    if (collection[0] == '\0' || database[0] == '\0') {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "Invalid %s target namespace: '%s.%s'",
                            aggregate_output_stage_name(output), database, collection);
    }
    if (strncmp(collection, "system.", 7) == 0) {
        return tc_error_set(error, 17385, "Can't %s to special collection: %s",
                            output->kind == OUTPUT_OUT ? "$out" : "$merge", collection);
    }
    output->database = bson_strdup(database);
    output->collection = bson_strdup(collection);
    output->ns = bson_strdup_printf("%s.%s", database, collection);
    return true;
}

/* {db, coll} of $out or of $merge's into; db defaults to the command's. */
static bool parse_target_document(aggregate_output_t *output, const char *field, bson_iter_t *iter,
                                  const char *command_database, bson_error_t *error)
{
    bson_iter_t part;
    const char *database = command_database, *collection = NULL;
    bson_iter_recurse(iter, &part);
    while (bson_iter_next(&part)) {
        const char *key = bson_iter_key(&part);
        if ((strcmp(key, "db") != 0 && strcmp(key, "coll") != 0) || !BSON_ITER_HOLDS_UTF8(&part)) {
            return tc_error_set(error, output->kind == OUTPUT_OUT ? 16994 : TC_ERR_FAILED_TO_PARSE,
                                "If an object is passed to %s it must have exactly 2 fields: 'db' and 'coll'",
                                field);
        }
        if (strcmp(key, "db") == 0) {
            database = bson_iter_utf8(&part, NULL);
        } else {
            collection = bson_iter_utf8(&part, NULL);
        }
    }
    if (collection == NULL) {
        return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD, "BSON field '%s.coll' is missing but a required field",
                            field);
    }
    return set_target(output, database, collection, error);
}

static bool parse_out(aggregate_output_t *output, bson_iter_t *spec, const char *database, bson_error_t *error)
{
    if (BSON_ITER_HOLDS_UTF8(spec)) {
        return set_target(output, database, bson_iter_utf8(spec, NULL), error);
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(spec)) {
        return tc_error_set(error, 16990, "$out only supports a string or object argument, not %s",
                            value_type_name(bson_iter_type(spec)));
    }
    return parse_target_document(output, "$out", spec, database, error);
}

static bool parse_enumeration(bson_iter_t *iter, const char *const *names, int *out, bson_error_t *error)
{
    if (BSON_ITER_HOLDS_UTF8(iter)) {
        for (int i = 0; names[i] != NULL; i++) {
            if (strcmp(names[i], bson_iter_utf8(iter, NULL)) == 0) {
                *out = i;
                return true;
            }
        }
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Enumeration value '%s' for field '$merge.%s' is not a valid value.",
                            bson_iter_utf8(iter, NULL), bson_iter_key(iter));
    }
    return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '$merge.%s' is the wrong type '%s', expected type 'string'",
                        bson_iter_key(iter), value_type_name(bson_iter_type(iter)));
}

static bool parse_on(aggregate_output_t *output, bson_iter_t *iter, bson_error_t *error)
{
    bson_iter_t item;
    if (BSON_ITER_HOLDS_UTF8(iter)) {
        output->on = bson_malloc0(2 * sizeof(char *));
        output->on[0] = bson_strdup(bson_iter_utf8(iter, NULL));
        output->on_count = 1;
        return true;
    }
    if (!BSON_ITER_HOLDS_ARRAY(iter)) {
        return tc_error_set(error, 51186, "$merge 'on' field must be either a string or an array of strings, but found %s",
                            value_type_name(bson_iter_type(iter)));
    }
    bson_iter_recurse(iter, &item);
    output->on = bson_malloc0(sizeof(char *));
    while (bson_iter_next(&item)) {
        if (!BSON_ITER_HOLDS_UTF8(&item)) {
            return tc_error_set(error, 51134, "$merge 'on' array elements must be strings, but found %s",
                                value_type_name(bson_iter_type(&item)));
        }
        output->on = bson_realloc(output->on, (output->on_count + 2) * sizeof(char *));
        output->on[output->on_count++] = bson_strdup(bson_iter_utf8(&item, NULL));
        output->on[output->on_count] = NULL;
    }
    if (output->on_count == 0) {
        return tc_error_set(error, 51187, "If explicitly specifying $merge 'on', must include at least one field");
    }
    return true;
}

static void copy_value_document(bson_iter_t *iter, bson_t *out)
{
    const bson_value_t *value = bson_iter_value(iter);
    bson_t view;
    bson_init_static(&view, value->value.v_doc.data, value->value.v_doc.data_len);
    bson_destroy(out);
    bson_copy_to(&view, out);
}

static bool parse_merge_field(aggregate_output_t *output, bson_iter_t *field, const char *database, bson_error_t *error)
{
    const char *key = bson_iter_key(field);
    int choice;
    if (strcmp(key, "into") == 0) {
        if (BSON_ITER_HOLDS_UTF8(field)) {
            return set_target(output, database, bson_iter_utf8(field, NULL), error);
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(field)) {
            return tc_error_set(error, 51178, "$merge 'into' field must be either a string or an object, but found %s",
                                value_type_name(bson_iter_type(field)));
        }
        return parse_target_document(output, "$merge.into", field, database, error);
    }
    if (strcmp(key, "on") == 0) {
        return parse_on(output, field, error);
    }
    if (strcmp(key, "let") == 0) {
        if (!BSON_ITER_HOLDS_DOCUMENT(field)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '$merge.let' is the wrong type '%s', "
                                "expected type 'object'", value_type_name(bson_iter_type(field)));
        }
        copy_value_document(field, &output->let);
        output->has_let = true;
        return true;
    }
    if (strcmp(key, "whenMatched") == 0) {
        if (BSON_ITER_HOLDS_ARRAY(field)) {
            copy_value_document(field, &output->pipeline);
            output->when_matched = WHEN_MATCHED_PIPELINE;
            return true;
        }
        if (!parse_enumeration(field, when_matched_names, &choice, error)) {
            return false;
        }
        output->when_matched = (when_matched_t)choice;
        return true;
    }
    if (strcmp(key, "whenNotMatched") == 0) {
        if (!parse_enumeration(field, when_not_matched_names, &choice, error)) {
            return false;
        }
        output->when_not_matched = (when_not_matched_t)choice;
        return true;
    }
    return tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD, "BSON field '$merge.%s' is an unknown field.", key);
}

/* mongod's supported pairs: fail and keepExisting only with insert. */
static bool check_modes(const aggregate_output_t *output, bson_error_t *error)
{
    bool supported = output->when_not_matched == WHEN_NOT_MATCHED_INSERT ||
                     (output->when_matched != WHEN_MATCHED_FAIL && output->when_matched != WHEN_MATCHED_KEEP_EXISTING);
    if (!supported) {
        return tc_error_set(error, 51181, "Combination of $merge modes 'whenMatched: %s' and 'whenNotMatched: %s' is "
                            "not supported", when_matched_names[output->when_matched],
                            when_not_matched_names[output->when_not_matched]);
    }
    if (output->has_let && output->when_matched != WHEN_MATCHED_PIPELINE) {
        return tc_error_set(error, 51199, "Cannot use 'let' variables with 'whenMatched: %s' mode",
                            when_matched_names[output->when_matched]);
    }
    return true;
}

static bool parse_merge(aggregate_output_t *output, bson_iter_t *spec, const char *database, bson_error_t *error)
{
    output->when_matched = WHEN_MATCHED_MERGE;
    output->when_not_matched = WHEN_NOT_MATCHED_INSERT;
    if (BSON_ITER_HOLDS_UTF8(spec)) {
        TC_CHECK(set_target(output, database, bson_iter_utf8(spec, NULL), error));
    } else if (!BSON_ITER_HOLDS_DOCUMENT(spec)) {
        return tc_error_set(error, 51182, "$merge only supports a string or object argument, not %s",
                            value_type_name(bson_iter_type(spec)));
    } else {
        bson_iter_t field;
        bson_iter_recurse(spec, &field);
        while (bson_iter_next(&field)) {
            TC_CHECK(parse_merge_field(output, &field, database, error));
        }
        if (output->ns == NULL) {
            return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD,
                                "BSON field '$merge.into' is missing but a required field");
        }
    }
    if (output->on == NULL) {
        output->on = bson_malloc0(2 * sizeof(char *));
        output->on[0] = bson_strdup("_id");
        output->on_count = 1;
    }
    return check_modes(output, error);
done:
    return false;
}

bool aggregate_output_parse(const command_context_t *context, const bson_t *stages, bson_t *out_stages,
                            aggregate_output_t **out_output, bson_error_t *error)
{
    bson_iter_t iter, stage;
    uint32_t count = bson_count_keys(stages), position = 0;
    aggregate_output_t *output = NULL;
    *out_output = NULL;
    bson_init(out_stages);
    bson_iter_init(&iter, stages);
    while (bson_iter_next(&iter)) {
        position++;
        const char *name = BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_iter_recurse(&iter, &stage) &&
                                   bson_iter_next(&stage) ? bson_iter_key(&stage) : "";
        bool is_out = strcmp(name, "$out") == 0, is_merge = strcmp(name, "$merge") == 0;
        if (!is_out && !is_merge) {
            bson_append_iter(out_stages, bson_iter_key(&iter), -1, &iter);
            continue;
        }
        if (position != count) {
            return tc_error_set(error, 40601, "%s can only be the final stage in the pipeline", name);
        }
        if (context->transaction != NULL) {
            return tc_error_set(error, TC_ERR_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                                "%s cannot be used in a transaction", name);
        }
        output = bson_malloc0(sizeof *output);
        output->kind = is_out ? OUTPUT_OUT : OUTPUT_MERGE;
        bson_init(&output->pipeline);
        bson_init(&output->let);
        bool ok = is_out ? parse_out(output, &stage, context->database, error)
                         : parse_merge(output, &stage, context->database, error);
        if (!ok) {
            aggregate_output_destroy(output);
            return false;
        }
    }
    *out_output = output;
    return true;
}

/* --- $out ------------------------------------------------------------------------ */

static bool insert_into(command_context_t *context, collection_t *collection, bson_t **documents, size_t count,
                        bson_error_t *error)
{
    for (size_t first = 0; first < count; first += OUT_INSERT_BATCH) {
        if (!storage_begin(context->session, error)) {
            return false;
        }
        bool ok = true;
        for (size_t i = first; ok && i < count && i < first + OUT_INSERT_BATCH; i++) {
            bson_t prepared;
            /* The temporary collection has the target's options: its validator checks what $out writes. */
            ok = command_prepare_insert_document(documents[i], &prepared, error) &&
                 validation_check_write(context, collection, NULL, &prepared, error) &&
                 storage_insert_record(context->session, collection, &prepared, NULL, error) &&
                 oplog_log_insert(context->session, collection, &prepared, NULL, error);
            bson_destroy(&prepared);
        }
        if (!ok) {
            storage_rollback(context->session);
            return false;
        }
        if (!storage_commit(context->session, false, error)) {
            return false;
        }
    }
    return true;
}

static bool write_out(command_context_t *context, const aggregate_output_t *output, bson_t **documents, size_t count,
                      bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    collection_t *temporary = NULL;
    bson_oid_t oid;
    char oid_text[25];
    bool ok = false;
    bson_oid_init(&oid, NULL);
    bson_oid_to_string(&oid, oid_text);
    char *temporary_ns = bson_strdup_printf("%s.tmp.agg_out.%s", output->database, oid_text);
    transaction_lock_ddl(context, output->ns, NULL);
    TC_CHECK(views_refuse(storage, output->ns, error));
    collection_t *target = storage_find_collection(storage, output->ns);
    TC_CHECK(storage_create_collection(context->session, temporary_ns, target != NULL ? &target->options : NULL,
                                       &temporary, error));
    for (size_t i = 0; target != NULL && i < target->index_count; i++) {
        bool created;
        if (!target->indexes[i]->is_id) {
            TC_CHECK(storage_create_index(context->session, temporary, &target->indexes[i]->spec, &created, error));
        }
    }
    TC_CHECK(insert_into(context, temporary, documents, count, error));
    if (target != NULL) {
        TC_CHECK(storage_drop_collection(context->session, output->ns, error));
    }
    TC_CHECK(storage_rename_collection(context->session, temporary_ns, output->ns, error));
    temporary = NULL;
    ok = true;
done:
    if (temporary != NULL) {
        bson_error_t undo_error;
        if (!storage_drop_collection(context->session, temporary_ns, &undo_error)) {
            TC_LOG(TC_LOG_WARNING, "COMMAND", context->connection_id, "$out to %s failed and could not drop %s: %s",
                   output->ns, temporary_ns, undo_error.message);
        }
    }
    transaction_unlock_ddl(context, output->ns, NULL);
    bson_free(temporary_ns);
    return ok;
}

/* --- $merge ------------------------------------------------------------------------ */

/* mongod's requirement on `on`: a unique index whose fields are exactly them
 * (in any order), not partial; only _id may go without a collection yet.
 * Call with the lock held. */
static bool check_on_index(storage_t *storage, const aggregate_output_t *output, bson_error_t *error)
{
    collection_t *collection = storage_find_collection(storage, output->ns);
    bool on_id = output->on_count == 1 && strcmp(output->on[0], "_id") == 0;
    if (collection == NULL && on_id) {
        return true;
    }
    for (size_t i = 0; collection != NULL && i < collection->index_count; i++) {
        const index_descriptor_t *index = collection->indexes[i];
        if (!index->unique || index->partial || bson_count_keys(&index->key_pattern) != output->on_count) {
            continue;
        }
        bool all_found = true;
        for (size_t f = 0; f < output->on_count && all_found; f++) {
            all_found = bson_has_field(&index->key_pattern, output->on[f]);
        }
        if (all_found) {
            return true;
        }
    }
    return tc_error_set(error, 51183, "Cannot find index to verify that join fields will be unique");
}

/* The filter {on1: {$eq: v1}, ...} finding the result's match in the target;
 * a result without _id gets one when _id is what it is merged on, as on mongod.
 * Error 51132 for a missing, null, undefined or array value. */
static bool build_match_filter(const aggregate_output_t *output, bson_t *document, bson_t *filter, bson_error_t *error)
{
    for (size_t f = 0; f < output->on_count; f++) {
        bson_iter_t iter;
        bool found = bson_iter_init(&iter, document) && bson_iter_find_descendant(&iter, output->on[f], &iter);
        if (!found && strcmp(output->on[f], "_id") == 0) {
            bson_t with_id = BSON_INITIALIZER;
            bson_oid_t oid;
            bson_oid_init(&oid, NULL);
            BSON_APPEND_OID(&with_id, "_id", &oid);
            bson_concat(&with_id, document);
            bson_reinit(document);
            bson_concat(document, &with_id);
            bson_destroy(&with_id);
            found = bson_iter_init_find(&iter, document, "_id");
        }
        bson_type_t type = found ? bson_iter_type(&iter) : BSON_TYPE_EOD;
        if (!found || type == BSON_TYPE_NULL || type == BSON_TYPE_UNDEFINED || type == BSON_TYPE_ARRAY) {
            return tc_error_set(error, 51132, "$merge write error: 'on' field cannot be missing, null, undefined or "
                                "an array");
        }
        bson_t condition;
        bson_append_document_begin(filter, output->on[f], -1, &condition);
        bson_append_iter(&condition, "$eq", 3, &iter);
        bson_append_document_end(filter, &condition);
    }
    return true;
}

/* Runs a write command (insert or update) built here through its handler, and
 * turns its first writeError into the aggregate's error. *out_n: its n. */
static bool run_write(command_context_t *context, const aggregate_output_t *output, const char *name,
                      const bson_t *command, const expression_context_t *expression_context, int64_t *out_n,
                      bson_error_t *error)
{
    command_context_t inner = *context;
    bson_t reply = BSON_INITIALIZER, inner_command = BSON_INITIALIZER, concern;
    bson_iter_t iter;
    bson_concat(&inner_command, command);
    /* The aggregate's bypassDocumentValidation covers the writes of its $merge;
     * its write concern is waited for once, after them all (aggregate_output_write). */
    if (bson_iter_init_find(&iter, context->command, "bypassDocumentValidation") && bson_iter_as_bool(&iter)) {
        BSON_APPEND_BOOL(&inner_command, "bypassDocumentValidation", true);
    }
    BSON_APPEND_DOCUMENT_BEGIN(&inner_command, "writeConcern", &concern);
    BSON_APPEND_INT32(&concern, "w", 1);
    bson_append_document_end(&inner_command, &concern);
    inner.command = &inner_command;
    inner.name = name;
    inner.database = output->database;
    inner.expression_context = expression_context;
    bool ok = false;
    for (const command_definition_t *definition = write_commands; definition->name != NULL; definition++) {
        if (strcmp(definition->name, name) == 0) {
            ok = definition->handler(&inner, &reply, error);
        }
    }
    if (ok && bson_iter_init(&iter, &reply) && bson_iter_find_descendant(&iter, "writeErrors.0", &iter)) {
        bson_iter_t field;
        int32_t code = TC_ERR_INTERNAL;
        const char *message = "";
        bson_iter_recurse(&iter, &field);
        while (bson_iter_next(&field)) {
            if (strcmp(bson_iter_key(&field), "code") == 0) {
                code = bson_iter_int32(&field);
            } else if (strcmp(bson_iter_key(&field), "errmsg") == 0) {
                message = bson_iter_utf8(&field, NULL);
            }
        }
        ok = tc_error_set(error, code, "%s", message);
    }
    *out_n = ok && bson_iter_init_find(&iter, &reply, "n") ? bson_iter_as_int64(&iter) : 0;
    bson_destroy(&reply);
    bson_destroy(&inner_command);
    return ok;
}

static bool insert_result(command_context_t *context, const aggregate_output_t *output, const bson_t *document,
                          bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, documents;
    int64_t n;
    BSON_APPEND_UTF8(&command, "insert", output->collection);
    BSON_APPEND_ARRAY_BEGIN(&command, "documents", &documents);
    BSON_APPEND_DOCUMENT(&documents, "0", document);
    bson_append_array_end(&command, &documents);
    bool ok = run_write(context, output, "insert", &command, context->expression_context, &n, error);
    bson_destroy(&command);
    return ok;
}

/* whenMatched's variables: $merge's let evaluated against the result, or
 * {new: <the result>} by default. */
static bool evaluate_variables(const command_context_t *context, const aggregate_output_t *output,
                               const bson_t *document, bson_t *out_variables, bson_error_t *error)
{
    bson_iter_t iter;
    bson_init(out_variables);
    if (!output->has_let) {
        BSON_APPEND_DOCUMENT(out_variables, "new", document);
        return true;
    }
    bson_iter_init(&iter, &output->let);
    while (bson_iter_next(&iter)) {
        bson_value_t value;
        expression_t *expression = expression_compile(bson_iter_value(&iter), error);
        bool ok = expression != NULL &&
                  expression_evaluate(expression, document, context->expression_context, &value, error);
        expression_destroy(expression);
        if (!ok) {
            return false;
        }
        if (value.value_type != BSON_TYPE_EOD) {
            bson_append_value(out_variables, bson_iter_key(&iter), -1, &value);
        }
        bson_value_destroy(&value);
    }
    return true;
}

/* The update statement's u and upsert for whenMatched (not fail). */
static void build_update(const aggregate_output_t *output, const bson_t *document, bson_t *statement)
{
    bool upsert = output->when_not_matched == WHEN_NOT_MATCHED_INSERT && output->when_matched != WHEN_MATCHED_PIPELINE;
    bson_t update;
    switch (output->when_matched) {
    case WHEN_MATCHED_REPLACE:
        BSON_APPEND_DOCUMENT(statement, "u", document);
        break;
    case WHEN_MATCHED_PIPELINE:
        BSON_APPEND_ARRAY(statement, "u", &output->pipeline);
        break;
    default:
        BSON_APPEND_DOCUMENT_BEGIN(statement, "u", &update);
        BSON_APPEND_DOCUMENT(&update, output->when_matched == WHEN_MATCHED_MERGE ? "$set" : "$setOnInsert", document);
        bson_append_document_end(statement, &update);
        break;
    }
    BSON_APPEND_BOOL(statement, "upsert", upsert);
}

static bool merge_one(command_context_t *context, const aggregate_output_t *output, bson_t *document,
                      bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, command = BSON_INITIALIZER, variables = BSON_INITIALIZER;
    bson_t updates, statement;
    int64_t n = 0;
    bool ok = false;
    TC_CHECK(build_match_filter(output, document, &filter, error));
    if (output->when_matched == WHEN_MATCHED_FAIL) {
        ok = insert_result(context, output, document, error); /* a match is its DuplicateKey */
        goto done;
    }
    expression_context_t expression_context;
    expression_context_init(&expression_context);
    if (context->expression_context != NULL) {
        expression_context.now_milliseconds = context->expression_context->now_milliseconds;
    }
    if (output->when_matched == WHEN_MATCHED_PIPELINE) {
        bson_destroy(&variables);
        TC_CHECK(evaluate_variables(context, output, document, &variables, error));
        expression_context.variables = &variables;
    }
    BSON_APPEND_UTF8(&command, "update", output->collection);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &statement);
    BSON_APPEND_DOCUMENT(&statement, "q", &filter);
    build_update(output, document, &statement);
    bson_append_document_end(&updates, &statement);
    bson_append_array_end(&command, &updates);
    TC_CHECK(run_write(context, output, "update", &command, &expression_context, &n, error));
    if (n == 0 && output->when_not_matched == WHEN_NOT_MATCHED_FAIL) {
        tc_error_set(error, 13113, "$merge could not find a matching document in the target collection for at "
                     "least one document in the source collection");
        goto done;
    }
    if (n == 0 && output->when_matched == WHEN_MATCHED_PIPELINE &&
        output->when_not_matched == WHEN_NOT_MATCHED_INSERT) {
        TC_CHECK(insert_result(context, output, document, error)); /* the result itself, as mongod inserts it */
    }
    ok = true;
done:
    bson_destroy(&filter);
    bson_destroy(&command);
    bson_destroy(&variables);
    return ok;
}

static bool write_merge(command_context_t *context, const aggregate_output_t *output, bson_t **documents,
                        size_t count, bson_error_t *error)
{
    storage_t *storage = context->store->storage;
    storage_lock_shared(storage);
    bool ok = views_refuse(storage, output->ns, error) && check_on_index(storage, output, error);
    storage_unlock(storage);
    for (size_t i = 0; ok && i < count; i++) {
        ok = merge_one(context, output, documents[i], error);
    }
    return ok;
}

bool aggregate_output_write(command_context_t *context, const aggregate_output_t *output, bson_t **documents,
                            size_t count, bson_error_t *error)
{
    bool written = output->kind == OUTPUT_OUT ? write_out(context, output, documents, count, error)
                                              : write_merge(context, output, documents, count, error);
    /* The aggregate's write concern covers what was written, even when an error
     * stopped $merge midway (its earlier writes stay), as mongod waits for it. */
    if (command_wants_durable_write(context)) {
        bson_error_t sync_error;
        if (!command_sync_journal(context, context->session, &sync_error) && written) {
            *error = sync_error;
            written = false;
        }
    }
    return written;
}
