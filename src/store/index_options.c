/* createIndexes' sparse, partialFilterExpression and hidden options: validation
 * with mongod 6.0's codes and messages, the filter that decides which documents
 * an index holds, and the comparison that tells a repeated spec from a
 * conflicting one. */
#include "store/index_options.h"
#include "query/match.h"
#include "query/value_format.h"

#include <string.h>

bool index_options_flag(const bson_t *spec, const char *name)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, spec, name) && bson_iter_as_bool(&iter);
}

void index_options_format(bson_string_t *out, const bson_t *spec)
{
    bson_value_t value = {.value_type = BSON_TYPE_DOCUMENT};
    value.value.v_doc.data = (uint8_t *)bson_get_data(spec);
    value.value.v_doc.data_len = spec->len;
    value_format_append(out, &value);
}

/* mongod prints the spec it was given with the v it added at the end. */
static void format_given_spec(bson_string_t *out, const bson_t *spec)
{
    bson_t printed = BSON_INITIALIZER;
    bson_iter_t iter;
    bson_concat(&printed, spec);
    if (!bson_iter_init_find(&iter, spec, "v")) {
        BSON_APPEND_INT32(&printed, "v", 2);
    }
    index_options_format(out, &printed);
    bson_destroy(&printed);
}

static void append_value(bson_string_t *out, const bson_iter_t *iter)
{
    value_format_append(out, bson_iter_value((bson_iter_t *)iter));
}

/* Describes, as mongod's MatchExpression::debugString does for the common cases,
 * the operator a partial filter may not hold; false when op is allowed. */
static bool describe_unsupported(const char *path, const bson_iter_t *op, bson_string_t *out)
{
    const char *name = bson_iter_key(op);
    static const char *const allowed[] = {"$eq", "$gt", "$gte", "$lt", "$lte", "$type", "$in"};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        if (strcmp(name, allowed[i]) == 0) {
            return false;
        }
    }
    if (strcmp(name, "$exists") == 0) {
        if (bson_iter_as_bool(op)) {
            return false;
        }
        bson_string_append_printf(out, "$not\n    %s exists\n", path); /* $exists: false is a negation */
    } else if (strcmp(name, "$ne") == 0) {
        bson_string_append_printf(out, "$not\n    %s $eq ", path);
        append_value(out, op);
        bson_string_append_c(out, '\n');
    } else if (strcmp(name, "$nin") == 0) {
        bson_string_append_printf(out, "$not\n    %s $in ", path);
        append_value(out, op);
        bson_string_append_c(out, '\n');
    } else if (strcmp(name, "$not") == 0) {
        bson_string_append_printf(out, "$not\n    %s ", path);
        append_value(out, op);
        bson_string_append_c(out, '\n');
    } else {
        bson_string_append_printf(out, "%s %s ", path, name);
        append_value(out, op);
        bson_string_append_c(out, '\n');
    }
    return true;
}

/* Walks a parsed partial filter; fills *out_code and out with the first thing it
 * may not hold. */
static bool find_unsupported(const bson_t *filter, bson_string_t *out, uint32_t *out_code)
{
    bson_iter_t iter;
    bson_iter_init(&iter, filter);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "$and") == 0 || strcmp(key, "$or") == 0) {
            bson_iter_t clauses;
            bson_iter_recurse(&iter, &clauses);
            while (bson_iter_next(&clauses)) {
                uint32_t length;
                const uint8_t *data;
                bson_t clause;
                bson_iter_document(&clauses, &length, &data);
                bson_init_static(&clause, data, length);
                if (find_unsupported(&clause, out, out_code)) {
                    return true;
                }
            }
        } else if (strcmp(key, "$expr") == 0 || strcmp(key, "$jsonSchema") == 0 || strcmp(key, "$where") == 0 ||
                   strcmp(key, "$text") == 0) {
            /* mongod's parser refuses the special features there before the partial index's own check. */
            bool special = strcmp(key, "$expr") == 0 || strcmp(key, "$jsonSchema") == 0;
            *out_code = special ? TC_ERR_QUERY_FEATURE_NOT_ALLOWED : TC_ERR_BAD_VALUE;
            bson_string_append_printf(out, "%s is not allowed in this context", key);
            return true;
        } else if (key[0] == '$') {
            *out_code = TC_ERR_CANNOT_CREATE_INDEX;
            bson_string_append_printf(out, "Expression not supported in partial index: %s\n", key);
            return true;
        } else if (BSON_ITER_HOLDS_REGEX(&iter)) {
            *out_code = TC_ERR_CANNOT_CREATE_INDEX;
            bson_string_append_printf(out, "Expression not supported in partial index: %s regex ", key);
            append_value(out, &iter);
            bson_string_append_c(out, '\n');
            return true;
        } else if (BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            bson_iter_t ops;
            bson_iter_recurse(&iter, &ops);
            while (bson_iter_next(&ops) && bson_iter_key(&ops)[0] == '$') {
                bson_string_t *described = bson_string_new(NULL);
                if (describe_unsupported(key, &ops, described)) {
                    *out_code = TC_ERR_CANNOT_CREATE_INDEX;
                    bson_string_append_printf(out, "Expression not supported in partial index: %s", described->str);
                    bson_string_free(described, true);
                    return true;
                }
                bson_string_free(described, true);
            }
        }
    }
    return false;
}

static bool specification_error(bson_error_t *error, uint32_t code, const bson_t *spec, const char *reason)
{
    bson_string_t *printed = bson_string_new(NULL);
    format_given_spec(printed, spec);
    tc_error_set(error, code, "Error in specification %s :: caused by :: %s", printed->str, reason);
    bson_string_free(printed, true);
    return false;
}

bool index_options_validate(const bson_t *spec, bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, spec, "partialFilterExpression")) {
        return true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "The field 'partialFilterExpression' must be an object, but got %s",
                            value_type_name(bson_iter_type(&iter)));
    }
    bson_iter_t sparse;
    if (bson_iter_init_find(&sparse, spec, "sparse")) {
        return specification_error(error, TC_ERR_CANNOT_CREATE_INDEX, spec,
                                   "cannot mix \"partialFilterExpression\" and \"sparse\" options");
    }
    uint32_t length;
    const uint8_t *data;
    bson_t filter;
    bson_iter_document(&iter, &length, &data);
    bson_init_static(&filter, data, length);
    bson_error_t parse_error;
    match_expression_t *compiled = match_compile(&filter, &parse_error);
    if (compiled == NULL) {
        return specification_error(error, parse_error.code, spec, parse_error.message);
    }
    match_destroy(compiled);
    bson_string_t *reason = bson_string_new(NULL);
    uint32_t code = 0;
    bool ok = !find_unsupported(&filter, reason, &code);
    if (!ok) {
        specification_error(error, code, spec, reason->str);
    }
    bson_string_free(reason, true);
    return ok;
}

void index_options_condition(const bson_t *spec, const bson_t *key_pattern, bson_t *out)
{
    bson_iter_t iter;
    bson_init(out);
    if (bson_iter_init_find(&iter, spec, "partialFilterExpression") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        uint32_t length;
        const uint8_t *data;
        bson_t filter;
        bson_iter_document(&iter, &length, &data);
        bson_init_static(&filter, data, length);
        bson_concat(out, &filter);
        return;
    }
    if (!index_options_flag(spec, "sparse")) {
        return;
    }
    /* A sparse index leaves out a document only when every key field is missing. */
    bson_t clauses;
    uint32_t position = 0;
    BSON_APPEND_ARRAY_BEGIN(out, "$or", &clauses);
    bson_iter_init(&iter, key_pattern);
    while (bson_iter_next(&iter)) {
        char index_key[16];
        const char *index_string;
        bson_uint32_to_string(position++, &index_string, index_key, sizeof index_key);
        bson_t clause, exists;
        bson_append_document_begin(&clauses, index_string, -1, &clause);
        bson_append_document_begin(&clause, bson_iter_key(&iter), -1, &exists);
        BSON_APPEND_BOOL(&exists, "$exists", true);
        bson_append_document_end(&clause, &exists);
        bson_append_document_end(&clauses, &clause);
    }
    bson_append_array_end(out, &clauses);
}

static bool same_document_field(const bson_t *left, const bson_t *right, const char *name)
{
    bson_iter_t left_iter, right_iter;
    bool left_found = bson_iter_init_find(&left_iter, left, name);
    bool right_found = bson_iter_init_find(&right_iter, right, name);
    if (left_found != right_found) {
        return false;
    }
    if (!left_found) {
        return true;
    }
    const bson_value_t *left_value = bson_iter_value(&left_iter);
    const bson_value_t *right_value = bson_iter_value(&right_iter);
    return left_value->value_type == right_value->value_type &&
           (left_value->value_type != BSON_TYPE_DOCUMENT ||
            (left_value->value.v_doc.data_len == right_value->value.v_doc.data_len &&
             memcmp(left_value->value.v_doc.data, right_value->value.v_doc.data,
                    left_value->value.v_doc.data_len) == 0));
}

index_options_comparison_t index_options_compare(const bson_t *existing, const bson_t *requested)
{
    if (!same_document_field(existing, requested, "key") ||
        !same_document_field(existing, requested, "partialFilterExpression") ||
        !same_document_field(existing, requested, "collation")) {
        return INDEX_OPTIONS_DIFFERENT;
    }
    static const char *const options[] = {"unique", "sparse", "hidden"};
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
        if (index_options_flag(existing, options[i]) != index_options_flag(requested, options[i])) {
            return INDEX_OPTIONS_EQUIVALENT;
        }
    }
    return INDEX_OPTIONS_IDENTICAL;
}

/* The "collation" document of document, compiled; *out_collation NULL when
 * absent or simple. */
static bool parse_collation_field(const bson_t *document, collation_t **out_collation, bool *out_present,
                                  bson_error_t *error)
{
    bson_iter_t iter;
    *out_collation = NULL;
    *out_present = bson_iter_init_find(&iter, document, "collation");
    if (!*out_present) {
        return true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field 'collation' is the wrong type '%s', expected type 'object'",
                            value_type_name(bson_iter_type(&iter)));
    }
    uint32_t length;
    const uint8_t *data;
    bson_t spec;
    bson_iter_document(&iter, &length, &data);
    bson_init_static(&spec, data, length);
    return collation_parse(&spec, out_collation, error);
}

bool index_options_append_collation(const bson_t *spec, const collation_t *default_collation, bson_t *out_spec,
                                    bson_error_t *error)
{
    collation_t *collation = NULL;
    bool present = false;
    if (!parse_collation_field(spec, &collation, &present, error)) {
        return false;
    }
    const collation_t *chosen = present ? collation : default_collation;
    if (chosen != NULL) {
        BSON_APPEND_DOCUMENT(out_spec, "collation", collation_spec(chosen));
    }
    collation_release(collation);
    return true;
}

bool index_options_read_collation(const bson_t *document, const collation_t **out_collation, bson_error_t *error)
{
    collation_t *collation = NULL;
    bool present = false;
    bool ok = parse_collation_field(document, &collation, &present, error);
    *out_collation = collation;
    return ok;
}

bool index_options_check_collation(const bson_value_t *spec, bson_error_t *error)
{
    bson_t document;
    const collation_t *collation = NULL;
    bson_init_static(&document, spec->value.v_doc.data, spec->value.v_doc.data_len);
    bool ok = index_options_read_collation(&document, &collation, error);
    collation_release(collation);
    return ok;
}
