/* The collation of a command: its own `collation` field, else its collection's
 * default, compiled once per command (collation.h) and handed to the handler in
 * the expression context. */
#include "store/command_collation.h"

#include "query/value_format.h"

#include <string.h>

/* MongoDB 6.0's commands with a top-level collation field; update and delete
 * carry theirs per statement, and take the collection's default otherwise. */
static bool takes_collation(const char *name, bool *out_per_statement)
{
    static const char *const whole_command[] = {"find", "count", "distinct", "aggregate", "findAndModify",
                                                "findandmodify"};
    *out_per_statement = strcmp(name, "update") == 0 || strcmp(name, "delete") == 0;
    if (*out_per_statement) {
        return true;
    }
    for (size_t i = 0; i < sizeof whole_command / sizeof whole_command[0]; i++) {
        if (strcmp(name, whole_command[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* Compiles the collation document iter points at; field names it in errors
 * ("find.collation", "update.updates.0.collation"). */
static bool parse_at(const bson_iter_t *iter, const char *field, collation_t **out_collation, bson_error_t *error)
{
    if (!BSON_ITER_HOLDS_DOCUMENT(iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '%s' is the wrong type '%s', expected type 'object'",
                            field, value_type_name(bson_iter_type(iter)));
    }
    uint32_t length;
    const uint8_t *data;
    bson_t spec;
    bson_iter_document(iter, &length, &data);
    bson_init_static(&spec, data, length);
    return collation_parse(&spec, out_collation, error);
}

static const collation_t *collection_default(const command_context_t *context)
{
    char *ns = NULL;
    bson_error_t ignored;
    const collation_t *collation = NULL;
    if (!command_namespace(context, &ns, &ignored)) {
        return NULL; /* the handler refuses the namespace itself, with its own words */
    }
    storage_t *storage = context->store->storage;
    storage_lock_shared(storage);
    collection_t *collection = storage_find_collection(storage, ns);
    if (collection != NULL) {
        collation = collation_retain(collection->default_collation);
    }
    storage_unlock(storage);
    bson_free(ns);
    return collation;
}

bool command_collation_resolve(const command_context_t *context, expression_context_t *expression_context,
                               const collation_t **out_collation, bson_error_t *error)
{
    bool per_statement;
    bson_iter_t iter;
    *out_collation = NULL;
    bool has_field = bson_iter_init_find(&iter, context->command, "collation");
    bool takes = takes_collation(context->name, &per_statement);
    if (has_field && (per_statement || strcmp(context->name, "insert") == 0)) {
        /* mongod's strict parsers: a write's collation belongs in its statements. */
        return tc_error_set(error, TC_ERR_UNRECOGNIZED_COMMAND_FIELD, "BSON field '%s.collation' is an unknown field.",
                            context->name);
    }
    if (!takes) {
        return true;
    }
    if (!per_statement && has_field) {
        char *field = bson_strdup_printf("%s.collation", context->name);
        collation_t *collation = NULL;
        bool ok = parse_at(&iter, field, &collation, error);
        bson_free(field);
        if (!ok) {
            return false;
        }
        *out_collation = collation;
    } else {
        *out_collation = collection_default(context);
    }
    expression_context->collation = *out_collation;
    return true;
}

bool command_statement_collation_begin(command_context_t *context, const bson_iter_t *statement,
                                       const char *array_name, uint32_t index, statement_collation_t *out,
                                       bson_error_t *error)
{
    bson_iter_t iter;
    memset(out, 0, sizeof *out);
    out->command_context = context->expression_context;
    if (!bson_iter_recurse(statement, &iter) || !bson_iter_find(&iter, "collation")) {
        return true;
    }
    char *field = bson_strdup_printf("%s.%s.%u.collation", context->name, array_name, index);
    bool ok = parse_at(&iter, field, &out->collation, error);
    bson_free(field);
    if (!ok) {
        return false;
    }
    out->statement_context = *context->expression_context;
    out->statement_context.collation = out->collation;
    context->expression_context = &out->statement_context;
    return true;
}

void command_statement_collation_end(command_context_t *context, statement_collation_t *saved)
{
    context->expression_context = saved->command_context;
    collation_release(saved->collation);
    saved->collation = NULL;
}
