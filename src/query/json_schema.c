/* $jsonSchema's subset: a tree of nodes, one per schema object, each keyword
 * checked on the value it applies to as mongod's JSON Schema parser reads it:
 * keywords about objects (required, properties, additionalProperties) pass
 * any other value, as minimum/maximum pass non-numbers and pattern
 * non-strings; a property absent from the object satisfies its schema (only
 * required asks for it). */
#include "query/json_schema.h"

#include "query/match.h"
#include "query/order.h"
#include "query/value_format.h"

#include <string.h>

/* BSON types 0x01..0x13, minKey and maxKey, as bits; "number" sets four. */
typedef uint32_t type_set_t;

struct json_schema {
    bson_t *spec;             /* the schema object, for specifiedAs and the keyword values */
    type_set_t types;         /* 0: no bsonType */
    match_expression_t *pattern; /* {v: {$regex: pattern}}, matched against {v: value} */
    char **property_names;
    json_schema_t **properties;
    size_t property_count;
};

static type_set_t type_bit(bson_type_t type)
{
    switch (type) {
    case BSON_TYPE_MINKEY: return 1u << 30;
    case BSON_TYPE_MAXKEY: return 1u << 31;
    default: return 1u << ((unsigned)type & 0x1f);
    }
}

static bool read_type_name(const char *name, type_set_t *types, bson_error_t *error)
{
    bson_type_t type;
    if (strcmp(name, "number") == 0) {
        *types |= type_bit(BSON_TYPE_INT32) | type_bit(BSON_TYPE_INT64) | type_bit(BSON_TYPE_DOUBLE) |
                  type_bit(BSON_TYPE_DECIMAL128);
        return true;
    }
    if (!value_type_from_name(name, &type)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Unknown type name alias: %s", name);
    }
    *types |= type_bit(type);
    return true;
}

static bool read_types(bson_iter_t *iter, type_set_t *types, bson_error_t *error)
{
    bson_iter_t names;
    if (BSON_ITER_HOLDS_UTF8(iter)) {
        return read_type_name(bson_iter_utf8(iter, NULL), types, error);
    }
    if (!BSON_ITER_HOLDS_ARRAY(iter) || !bson_iter_recurse(iter, &names)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword 'bsonType' must be either a string "
                            "or an array of strings");
    }
    while (bson_iter_next(&names)) {
        if (!BSON_ITER_HOLDS_UTF8(&names)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "$jsonSchema keyword 'bsonType' array elements must be strings");
        }
        if (!read_type_name(bson_iter_utf8(&names, NULL), types, error)) {
            return false;
        }
    }
    return true;
}

static bool require_type(bson_iter_t *iter, bool (*holds)(const bson_iter_t *), const char *expected,
                         bson_error_t *error)
{
    if (!holds(iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword '%s' must be %s", bson_iter_key(iter),
                            expected);
    }
    return true;
}

static bool holds_array(const bson_iter_t *iter) { return BSON_ITER_HOLDS_ARRAY(iter); }
static bool holds_object(const bson_iter_t *iter) { return BSON_ITER_HOLDS_DOCUMENT(iter); }
static bool holds_bool(const bson_iter_t *iter) { return BSON_ITER_HOLDS_BOOL(iter); }
static bool holds_string(const bson_iter_t *iter) { return BSON_ITER_HOLDS_UTF8(iter); }
static bool holds_number(const bson_iter_t *iter) { return order_is_number(bson_iter_type(iter)); }

static bool holds_string_array(const bson_iter_t *iter)
{
    bson_iter_t names;
    if (!BSON_ITER_HOLDS_ARRAY(iter) || !bson_iter_recurse(iter, &names)) {
        return false;
    }
    while (bson_iter_next(&names)) {
        if (!BSON_ITER_HOLDS_UTF8(&names)) {
            return false;
        }
    }
    return true;
}

/* mongod's keywords this subset lacks: refused by name rather than ignored. */
static bool is_unsupported_keyword(const char *keyword)
{
    static const char *const names[] = {"type", "items", "additionalItems", "minItems", "maxItems", "uniqueItems",
                                        "minLength", "maxLength", "multipleOf", "minProperties", "maxProperties",
                                        "patternProperties", "dependencies", "allOf", "anyOf", "oneOf", "not",
                                        "encrypt", "encryptMetadata", NULL};
    for (const char *const *name = names; *name != NULL; name++) {
        if (strcmp(*name, keyword) == 0) {
            return true;
        }
    }
    return false;
}

static bool compile_properties(json_schema_t *schema, bson_iter_t *iter, bson_error_t *error)
{
    bson_iter_t properties;
    bson_iter_recurse(iter, &properties);
    while (bson_iter_next(&properties)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&properties)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "Nested schema for $jsonSchema property '%s' must be an "
                                "object", bson_iter_key(&properties));
        }
        bson_t child_spec;
        const bson_value_t *value = bson_iter_value(&properties);
        bson_init_static(&child_spec, value->value.v_doc.data, value->value.v_doc.data_len);
        json_schema_t *child = json_schema_compile(&child_spec, error);
        if (child == NULL) {
            return false;
        }
        schema->property_names = bson_realloc(schema->property_names, (schema->property_count + 1) * sizeof(char *));
        schema->properties =
            bson_realloc(schema->properties, (schema->property_count + 1) * sizeof(json_schema_t *));
        schema->property_names[schema->property_count] = bson_strdup(bson_iter_key(&properties));
        schema->properties[schema->property_count++] = child;
    }
    return true;
}

static bool compile_pattern(json_schema_t *schema, bson_iter_t *iter, bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, condition;
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "v", &condition);
    BSON_APPEND_UTF8(&condition, "$regex", bson_iter_utf8(iter, NULL));
    bson_append_document_end(&filter, &condition);
    schema->pattern = match_compile(&filter, error);
    bson_destroy(&filter);
    return schema->pattern != NULL;
}

/* One keyword of a schema object: its type checked, what it needs compiled. */
static bool compile_keyword(json_schema_t *schema, bson_iter_t *iter, bson_error_t *error)
{
    const char *keyword = bson_iter_key(iter);
    if (strcmp(keyword, "bsonType") == 0) {
        return read_types(iter, &schema->types, error);
    }
    if (strcmp(keyword, "required") == 0) {
        return require_type(iter, holds_string_array, "an array of strings", error);
    }
    if (strcmp(keyword, "properties") == 0) {
        return require_type(iter, holds_object, "an object", error) && compile_properties(schema, iter, error);
    }
    if (strcmp(keyword, "additionalProperties") == 0) {
        if (BSON_ITER_HOLDS_DOCUMENT(iter)) {
            return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED, "thermocline store does not support a schema "
                                "for $jsonSchema's additionalProperties yet, only true or false");
        }
        return require_type(iter, holds_bool, "a boolean", error);
    }
    if (strcmp(keyword, "enum") == 0) {
        return require_type(iter, holds_array, "an array", error);
    }
    if (strcmp(keyword, "minimum") == 0 || strcmp(keyword, "maximum") == 0) {
        return require_type(iter, holds_number, "a number", error);
    }
    if (strcmp(keyword, "exclusiveMinimum") == 0 || strcmp(keyword, "exclusiveMaximum") == 0) {
        return require_type(iter, holds_bool, "a boolean", error);
    }
    if (strcmp(keyword, "pattern") == 0) {
        return require_type(iter, holds_string, "a string", error) && compile_pattern(schema, iter, error);
    }
    if (strcmp(keyword, "title") == 0 || strcmp(keyword, "description") == 0) {
        return require_type(iter, holds_string, "a string", error);
    }
    if (is_unsupported_keyword(keyword)) {
        return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED,
                            "thermocline store does not support the $jsonSchema keyword '%s' yet (it supports "
                            "bsonType, required, properties, additionalProperties, enum, minimum, maximum, pattern)",
                            keyword);
    }
    return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Unknown $jsonSchema keyword: %s", keyword);
}

json_schema_t *json_schema_compile(const bson_t *spec, bson_error_t *error)
{
    bson_iter_t iter;
    json_schema_t *schema = bson_malloc0(sizeof *schema);
    schema->spec = bson_copy(spec);
    bson_iter_init(&iter, schema->spec);
    while (bson_iter_next(&iter)) {
        if (!compile_keyword(schema, &iter, error)) {
            json_schema_destroy(schema);
            return NULL;
        }
    }
    return schema;
}

void json_schema_destroy(json_schema_t *schema)
{
    if (schema == NULL) {
        return;
    }
    for (size_t i = 0; i < schema->property_count; i++) {
        bson_free(schema->property_names[i]);
        json_schema_destroy(schema->properties[i]);
    }
    bson_free(schema->property_names);
    bson_free(schema->properties);
    match_destroy(schema->pattern);
    bson_destroy(schema->spec);
    bson_free(schema);
}

/* --- checking ------------------------------------------------------------------- */

/* Where a node's failures go: rules is NULL when only the verdict matters. */
typedef struct rule_sink {
    bson_t *rules;
    uint32_t count;
} rule_sink_t;

/* The key of an array's index-th element; buffer holds it when it is not a constant. */
static const char *array_key(uint32_t index, char buffer[16])
{
    const char *key;
    bson_uint32_to_string(index, &key, buffer, 16);
    return key;
}

/* Opens the next rule {operatorName, specifiedAs: {keyword: value}}; false
 * when nobody wants the details. */
static bool rule_begin(rule_sink_t *sink, const bson_iter_t *keyword, bson_t *rule)
{
    if (sink->rules == NULL) {
        sink->count++;
        return false;
    }
    char key[16];
    bson_t specified;
    bson_append_document_begin(sink->rules, array_key(sink->count++, key), -1, rule);
    BSON_APPEND_UTF8(rule, "operatorName", bson_iter_key(keyword));
    BSON_APPEND_DOCUMENT_BEGIN(rule, "specifiedAs", &specified);
    bson_append_iter(&specified, bson_iter_key(keyword), -1, keyword);
    bson_append_document_end(rule, &specified);
    return true;
}

static void rule_end(rule_sink_t *sink, bson_t *rule)
{
    bson_append_document_end(sink->rules, rule);
}

/* A rule about the value itself: reason and consideredValue. */
static void add_value_rule(rule_sink_t *sink, const bson_iter_t *keyword, const char *reason,
                           const bson_value_t *value, bool with_type)
{
    bson_t rule;
    if (rule_begin(sink, keyword, &rule)) {
        BSON_APPEND_UTF8(&rule, "reason", reason);
        BSON_APPEND_VALUE(&rule, "consideredValue", value);
        if (with_type) {
            BSON_APPEND_UTF8(&rule, "consideredType", value_type_name(value->value_type));
        }
        rule_end(sink, &rule);
    }
}

static bool in_enum(const bson_iter_t *keyword, const bson_value_t *value)
{
    bson_iter_t items;
    if (!bson_iter_recurse(keyword, &items)) {
        return false;
    }
    while (bson_iter_next(&items)) {
        if (order_compare_values(bson_iter_value(&items), value) == 0) {
            return true;
        }
    }
    return false;
}

static bool flag(const json_schema_t *schema, const char *keyword)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, schema->spec, keyword) && bson_iter_as_bool(&iter);
}

static bool within_bound(const json_schema_t *schema, const bson_iter_t *keyword, const bson_value_t *value)
{
    bool is_minimum = strcmp(bson_iter_key(keyword), "minimum") == 0;
    int comparison = order_compare_values(value, bson_iter_value((bson_iter_t *)keyword));
    bool exclusive = flag(schema, is_minimum ? "exclusiveMinimum" : "exclusiveMaximum");
    if (is_minimum) {
        return exclusive ? comparison > 0 : comparison >= 0;
    }
    return exclusive ? comparison < 0 : comparison <= 0;
}

static bool matches_pattern(const json_schema_t *schema, const bson_value_t *value)
{
    bson_t wrapped = BSON_INITIALIZER;
    BSON_APPEND_VALUE(&wrapped, "v", value);
    bool matches = match_document(schema->pattern, &wrapped);
    bson_destroy(&wrapped);
    return matches;
}

static void check_value(json_schema_t *schema, const bson_value_t *value, rule_sink_t *sink);

static void check_required(const bson_iter_t *keyword, const bson_t *object, rule_sink_t *sink)
{
    bson_iter_t names;
    bson_t missing = BSON_INITIALIZER;
    uint32_t missing_count = 0;
    bson_iter_recurse(keyword, &names);
    while (bson_iter_next(&names)) {
        if (!bson_has_field(object, bson_iter_utf8(&names, NULL))) {
            char key[16];
            bson_append_utf8(&missing, array_key(missing_count++, key), -1, bson_iter_utf8(&names, NULL), -1);
        }
    }
    bson_t rule;
    if (missing_count > 0 && rule_begin(sink, keyword, &rule)) {
        BSON_APPEND_ARRAY(&rule, "missingProperties", &missing);
        rule_end(sink, &rule);
    }
    bson_destroy(&missing);
}

static void check_properties(json_schema_t *schema, const bson_iter_t *keyword, const bson_t *object,
                             rule_sink_t *sink)
{
    bson_t failed = BSON_INITIALIZER, entry, details;
    uint32_t failed_count = 0;
    for (size_t i = 0; i < schema->property_count; i++) {
        bson_iter_t field;
        if (!bson_iter_init_find(&field, object, schema->property_names[i])) {
            continue;
        }
        bson_t child_rules = BSON_INITIALIZER;
        rule_sink_t child = {.rules = sink->rules != NULL ? &child_rules : NULL};
        check_value(schema->properties[i], bson_iter_value(&field), &child);
        if (child.count > 0) {
            char key[16];
            bson_append_document_begin(&failed, array_key(failed_count++, key), -1, &entry);
            BSON_APPEND_UTF8(&entry, "propertyName", schema->property_names[i]);
            BSON_APPEND_ARRAY_BEGIN(&entry, "details", &details);
            bson_concat(&details, &child_rules);
            bson_append_array_end(&entry, &details);
            bson_append_document_end(&failed, &entry);
        }
        bson_destroy(&child_rules);
    }
    bson_t rule;
    if (failed_count > 0) {
        /* properties' own entry has no specifiedAs in mongod's errInfo: built by hand. */
        if (sink->rules == NULL) {
            sink->count++;
        } else {
            char key[16];
            bson_append_document_begin(sink->rules, array_key(sink->count++, key), -1, &rule);
            BSON_APPEND_UTF8(&rule, "operatorName", bson_iter_key(keyword));
            BSON_APPEND_ARRAY(&rule, "propertiesNotSatisfied", &failed);
            bson_append_document_end(sink->rules, &rule);
        }
    }
    bson_destroy(&failed);
}

static void check_additional(const json_schema_t *schema, const bson_iter_t *keyword, const bson_t *object,
                             rule_sink_t *sink)
{
    bson_iter_t field;
    bson_t extra = BSON_INITIALIZER;
    uint32_t extra_count = 0;
    if (bson_iter_as_bool(keyword)) {
        return;
    }
    bson_iter_init(&field, object);
    while (bson_iter_next(&field)) {
        bool listed = false;
        for (size_t i = 0; i < schema->property_count && !listed; i++) {
            listed = strcmp(schema->property_names[i], bson_iter_key(&field)) == 0;
        }
        if (!listed) {
            char key[16];
            bson_append_utf8(&extra, array_key(extra_count++, key), -1, bson_iter_key(&field), -1);
        }
    }
    bson_t rule;
    if (extra_count > 0 && rule_begin(sink, keyword, &rule)) {
        BSON_APPEND_ARRAY(&rule, "additionalProperties", &extra);
        rule_end(sink, &rule);
    }
    bson_destroy(&extra);
}

/* Every keyword of schema on value, in the order written; each failure adds a rule. */
static void check_value(json_schema_t *schema, const bson_value_t *value, rule_sink_t *sink)
{
    bson_iter_t keyword;
    bson_t object;
    bool is_object = value->value_type == BSON_TYPE_DOCUMENT &&
                     bson_init_static(&object, value->value.v_doc.data, value->value.v_doc.data_len);
    bool is_number = order_is_number(value->value_type);
    bson_iter_init(&keyword, schema->spec);
    while (bson_iter_next(&keyword)) {
        const char *name = bson_iter_key(&keyword);
        if (strcmp(name, "bsonType") == 0 && (schema->types & type_bit(value->value_type)) == 0) {
            add_value_rule(sink, &keyword, "type did not match", value, true);
        } else if (strcmp(name, "enum") == 0 && !in_enum(&keyword, value)) {
            add_value_rule(sink, &keyword, "value was not found in enum", value, false);
        } else if ((strcmp(name, "minimum") == 0 || strcmp(name, "maximum") == 0) && is_number &&
                   !within_bound(schema, &keyword, value)) {
            add_value_rule(sink, &keyword, "comparison failed", value, false);
        } else if (strcmp(name, "pattern") == 0 && value->value_type == BSON_TYPE_UTF8 &&
                   !matches_pattern(schema, value)) {
            add_value_rule(sink, &keyword, "regular expression did not match", value, false);
        } else if (strcmp(name, "required") == 0 && is_object) {
            check_required(&keyword, &object, sink);
        } else if (strcmp(name, "properties") == 0 && is_object) {
            check_properties(schema, &keyword, &object, sink);
        } else if (strcmp(name, "additionalProperties") == 0 && is_object) {
            check_additional(schema, &keyword, &object, sink);
        }
    }
}

bool json_schema_matches(json_schema_t *schema, const bson_t *document, bson_t *out_rules_not_satisfied)
{
    bson_value_t value = {.value_type = BSON_TYPE_DOCUMENT};
    value.value.v_doc.data = (uint8_t *)bson_get_data(document);
    value.value.v_doc.data_len = document->len;
    rule_sink_t sink = {.rules = out_rules_not_satisfied};
    check_value(schema, &value, &sink);
    return sink.count == 0;
}
