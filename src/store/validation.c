/* Document validation: create's and collMod's options and the check before a
 * write. The validator is compiled for each checked document rather than kept
 * in collection_t: a matcher serves one thread at a time, and a collection
 * without a validator (the common case) pays nothing. */
#include "store/validation.h"

#include "common/log.h"
#include "query/validator.h"
#include "query/value_format.h"

#include <string.h>

static bool check_enumeration(const char *command_name, bson_iter_t *iter, const char *const *names,
                              bson_error_t *error)
{
    if (!BSON_ITER_HOLDS_UTF8(iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field '%s.%s' is the wrong type '%s', expected type 'string'", command_name,
                            bson_iter_key(iter), value_type_name(bson_iter_type(iter)));
    }
    for (; *names != NULL; names++) {
        if (strcmp(*names, bson_iter_utf8(iter, NULL)) == 0) {
            return true;
        }
    }
    return tc_error_set(error, TC_ERR_BAD_VALUE, "Enumeration value '%s' for field '%s.%s' is not a valid value.",
                        bson_iter_utf8(iter, NULL), command_name, bson_iter_key(iter));
}

bool validation_check_option(const char *command_name, bson_iter_t *iter, bson_error_t *error)
{
    static const char *const levels[] = {"off", "strict", "moderate", NULL};
    static const char *const actions[] = {"error", "warn", NULL};
    const char *field = bson_iter_key(iter);
    if (strcmp(field, "validationLevel") == 0) {
        return check_enumeration(command_name, iter, levels, error);
    }
    if (strcmp(field, "validationAction") == 0) {
        return check_enumeration(command_name, iter, actions, error);
    }
    if (strcmp(field, "validator") != 0) {
        return true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field '%s.validator' is the wrong type '%s', expected type 'object'", command_name,
                            value_type_name(bson_iter_type(iter)));
    }
    bson_t filter;
    const bson_value_t *value = bson_iter_value(iter);
    bson_init_static(&filter, value->value.v_doc.data, value->value.v_doc.data_len);
    validator_t *validator = validator_compile(&filter, NULL, error);
    validator_destroy(validator);
    return validator != NULL;
}

/* The option's string, or fallback when the collection has none. */
static const char *option_string(const collection_t *collection, const char *field, const char *fallback)
{
    bson_iter_t iter;
    if (bson_iter_init_find(&iter, &collection->options, field) && BSON_ITER_HOLDS_UTF8(&iter)) {
        return bson_iter_utf8(&iter, NULL);
    }
    return fallback;
}

static bool bypasses_validation(const command_context_t *context)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, context->command, "bypassDocumentValidation") && bson_iter_as_bool(&iter);
}

/* errInfo: {failingDocumentId, details}. */
static void build_error_info(const bson_t *document, const bson_t *details, bson_t *out)
{
    bson_iter_t id;
    if (bson_iter_init_find(&id, document, "_id")) {
        bson_append_iter(out, "failingDocumentId", -1, &id);
    }
    BSON_APPEND_DOCUMENT(out, "details", details);
}

bool validation_check_write(command_context_t *context, const collection_t *collection, const bson_t *before,
                            const bson_t *after, bson_error_t *error)
{
    bson_iter_t iter;
    bson_t filter, details, error_info = BSON_INITIALIZER;
    bool valid = true, has_details = false, ok = false;
    validator_t *validator = NULL;

    if (!bson_iter_init_find(&iter, &collection->options, "validator") || !BSON_ITER_HOLDS_DOCUMENT(&iter) ||
        bson_iter_value(&iter)->value.v_doc.data_len <= 5 ||
        strcmp(option_string(collection, "validationLevel", "strict"), "off") == 0 || bypasses_validation(context)) {
        return true;
    }
    const bson_value_t *value = bson_iter_value(&iter);
    bson_init_static(&filter, value->value.v_doc.data, value->value.v_doc.data_len);
    /* The validator compares strings under the collection's default collation, as mongod's does. */
    expression_context_t expression_context;
    expression_context_init(&expression_context);
    if (context->expression_context != NULL) {
        expression_context.now_milliseconds = context->expression_context->now_milliseconds;
    }
    expression_context.collation = collection->default_collation;
    validator = validator_compile(&filter, &expression_context, error);
    TC_CHECK(validator != NULL);
    if (before != NULL && strcmp(option_string(collection, "validationLevel", "strict"), "moderate") == 0) {
        /* moderate: an update of a document that was already invalid is not checked. */
        bool was_valid;
        TC_CHECK(validator_check(validator, before, &was_valid, NULL, error));
        if (!was_valid) {
            ok = true;
            goto done;
        }
    }
    TC_CHECK(validator_check(validator, after, &valid, &details, error));
    has_details = !valid;
    if (valid) {
        ok = true;
        goto done;
    }
    build_error_info(after, &details, &error_info);
    if (strcmp(option_string(collection, "validationAction", "error"), "warn") == 0) {
        TC_LOG_ATTRS(TC_LOG_WARNING, "STORAGE", context->connection_id, "Document would fail validation",
                     TC_ATTR_STR("namespace", collection->ns), TC_ATTR_DOC("document", after),
                     TC_ATTR_DOC("errInfo", &error_info));
        ok = true;
    } else {
        if (context->error_info != NULL) {
            bson_reinit(context->error_info);
            bson_concat(context->error_info, &error_info);
        }
        tc_error_set(error, TC_ERR_DOCUMENT_VALIDATION_FAILURE, "Document failed validation");
    }
done:
    bson_destroy(&error_info);
    if (has_details) {
        bson_destroy(&details);
    }
    validator_destroy(validator);
    return ok;
}

void validation_append_error_info(const command_context_t *context, const bson_error_t *error, bson_t *out)
{
    if (error->domain == TC_ERROR_DOMAIN && error->code == TC_ERR_DOCUMENT_VALIDATION_FAILURE &&
        context->error_info != NULL && !bson_empty(context->error_info)) {
        BSON_APPEND_DOCUMENT(out, "errInfo", context->error_info);
    }
}
