/* $jsonSchema compiled: one node per schema object, its keywords read in the
 * order of mongod's JSON Schema parser (the keywords listed first, then
 * metadata, types, the string and number keywords, the array ones, the object
 * ones, the logical ones), each refused with mongod's code and message. */
#include "query/json_schema_private.h"

#include "common/bson_view.h"
#include "query/order.h"
#include "query/value_format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* mongod's JSON Schema keywords (encrypt and encryptMetadata are refused below). */
static const char *const KEYWORDS[] = {
    "additionalItems", "additionalProperties", "allOf", "anyOf", "bsonType", "dependencies", "description",
    "encrypt", "encryptMetadata", "enum", "exclusiveMaximum", "exclusiveMinimum", "items", "maxItems",
    "maxLength", "maxProperties", "maximum", "minItems", "minLength", "minProperties", "minimum", "multipleOf",
    "not", "oneOf", "pattern", "patternProperties", "properties", "required", "title", "type", "uniqueItems"};
#define KEYWORD_COUNT (sizeof KEYWORDS / sizeof KEYWORDS[0])

/* What mongod names but does not implement. */
static const char *const UNSUPPORTED_KEYWORDS[] = {"$ref", "$schema", "default", "definitions", "format", "id"};

static const char *const LIMIT_KEYWORDS[JSON_SCHEMA_LIMIT_COUNT] = {
    "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"};

/* The keywords one schema object holds, each once (so a lookup by name finds it). */
typedef struct keyword_map {
    const bson_t *spec;
    bool present[KEYWORD_COUNT];
} keyword_map_t;

static json_schema_t *compile_node(const uint8_t *spec, uint32_t spec_length, bool at_root, bson_error_t *error);

static bool keyword_get(const keyword_map_t *map, const char *keyword, bson_iter_t *out)
{
    return bson_iter_init_find(out, map->spec, keyword);
}

static bool is_listed(const char *const *names, size_t count, const char *name)
{
    for (size_t i = 0; i < count; i++) {
        if (strcmp(names[i], name) == 0) {
            return true;
        }
    }
    return false;
}

static bool collect_keywords(const bson_t *spec, keyword_map_t *map, bson_error_t *error)
{
    bson_iter_t iter;
    memset(map, 0, sizeof *map);
    map->spec = spec;
    bson_iter_init(&iter, spec);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        size_t index = 0;
        while (index < KEYWORD_COUNT && strcmp(KEYWORDS[index], key) != 0) {
            index++;
        }
        if (index == KEYWORD_COUNT) {
            size_t count = sizeof UNSUPPORTED_KEYWORDS / sizeof UNSUPPORTED_KEYWORDS[0];
            if (is_listed(UNSUPPORTED_KEYWORDS, count, key)) {
                return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                                    "$jsonSchema keyword '%s' is not currently supported", key);
            }
            return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Unknown $jsonSchema keyword: %s", key);
        }
        if (map->present[index]) {
            return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "Duplicate $jsonSchema keyword: %s", key);
        }
        map->present[index] = true;
    }
    return true;
}

/* mongod's name of a BSON type in its parse errors ("found an element of type string"). */
static const char *type_of(const bson_iter_t *iter)
{
    return value_type_name(bson_iter_type(iter));
}

int json_schema_compare_names(const void *left, const void *right)
{
    return strcmp(*(const char *const *)left, *(const char *const *)right);
}

void json_schema_view(const uint8_t *data, uint32_t length, bson_t *out)
{
    if (!bson_init_static(out, data, length)) {
        bson_init(out);
    }
}

/* A subschema: applies to another value (a property's, an item's) unless
 * same_value (allOf, anyOf, oneOf, not, a dependency: the same value). */
static json_schema_t *compile_child(const json_schema_t *parent, const bson_iter_t *iter, bool same_value,
                                    bson_error_t *error)
{
    bson_t view;
    bson_view_of(iter, &view);
    return compile_node(bson_get_data(&view), view.len, same_value && parent->at_root, error);
}

/* --- types ------------------------------------------------------------------------ */

json_schema_types_t json_schema_type_bit(bson_type_t type)
{
    switch (type) {
    case BSON_TYPE_MINKEY: return 1u << 30;
    case BSON_TYPE_MAXKEY: return 1u << 31;
    default: return 1u << ((unsigned)type & 0x1f);
    }
}

static const json_schema_types_t NUMBER_TYPES = (1u << BSON_TYPE_INT32) | (1u << BSON_TYPE_INT64) |
                                                (1u << BSON_TYPE_DOUBLE) | (1u << BSON_TYPE_DECIMAL128);

/* One alias: bsonType takes $type's names, type JSON Schema's six. */
static bool read_type_alias(const char *keyword, const char *name, json_schema_types_t *types, bson_error_t *error)
{
    static const struct {
        const char *name;
        bson_type_t type;
    } json_types[] = {{"array", BSON_TYPE_ARRAY}, {"boolean", BSON_TYPE_BOOL}, {"null", BSON_TYPE_NULL},
                      {"object", BSON_TYPE_DOCUMENT}, {"string", BSON_TYPE_UTF8}};
    if (strcmp(name, "integer") == 0) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "$jsonSchema type 'integer' is not currently supported.");
    }
    if (strcmp(name, "number") == 0) {
        *types |= NUMBER_TYPES;
        return true;
    }
    bson_type_t type = BSON_TYPE_EOD;
    bool known = false;
    if (strcmp(keyword, "type") == 0) {
        for (size_t i = 0; i < sizeof json_types / sizeof json_types[0] && !known; i++) {
            known = strcmp(json_types[i].name, name) == 0;
            type = json_types[i].type;
        }
    } else {
        known = value_type_from_name(name, &type);
    }
    if (!known) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Unknown type name alias: %s", name);
    }
    *types |= json_schema_type_bit(type);
    return true;
}

/* The first error mongod's loop over a list of names meets, in array order: an
 * element that is not a string (TypeMismatch, type_format with its type's
 * name), or one equal to an earlier one (FailedToParse, duplicate_format with
 * the name). forbidden (may be NULL) is a name refused at once. */
static bool check_name_list(const bson_t *names, const char *type_format, const char *duplicate_format,
                            const char *forbidden, bson_error_t *error)
{
    bson_iter_t name;
    int64_t index = 0, first_duplicate = json_schema_first_duplicate(names);
    bson_iter_init(&name, names);
    for (; bson_iter_next(&name); index++) {
        if (!BSON_ITER_HOLDS_UTF8(&name)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH, type_format, type_of(&name));
        }
        if (forbidden != NULL && strcmp(bson_iter_utf8(&name, NULL), forbidden) == 0) {
            return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "$jsonSchema type '%s' is not currently supported.",
                                forbidden);
        }
        if (index == first_duplicate) {
            return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, duplicate_format, bson_iter_utf8(&name, NULL));
        }
    }
    return true;
}

static bool compile_types(json_schema_t *schema, const bson_iter_t *element, bson_error_t *error)
{
    const char *keyword = bson_iter_key(element);
    schema->type_keyword = strcmp(keyword, "type") == 0 ? "type" : "bsonType";
    if (BSON_ITER_HOLDS_UTF8(element)) {
        schema->single_type = true;
        return read_type_alias(keyword, bson_iter_utf8(element, NULL), &schema->types, error);
    }
    if (!BSON_ITER_HOLDS_ARRAY(element)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "$jsonSchema keyword '%s' must be either a string or an array of strings", keyword);
    }
    bson_t names;
    bson_iter_t name;
    uint32_t count = 0;
    bson_view_of(element, &names);
    char type_format[128], duplicate_format[128];
    snprintf(type_format, sizeof type_format, "$jsonSchema keyword '%s' array elements must be strings%%.0s",
             keyword);
    snprintf(duplicate_format, sizeof duplicate_format, "$jsonSchema keyword '%s' has duplicate value: %%s", keyword);
    if (!check_name_list(&names, type_format, duplicate_format, "integer", error)) {
        return false;
    }
    /* mongod resolves the names in sorted order: the smallest unknown one is reported. */
    const char *unknown = NULL;
    bson_iter_init(&name, &names);
    for (; bson_iter_next(&name); count++) {
        const char *alias = bson_iter_utf8(&name, NULL);
        bson_error_t ignored;
        bool known = read_type_alias(keyword, alias, &schema->types, &ignored);
        if (!known && (unknown == NULL || strcmp(alias, unknown) < 0)) {
            unknown = alias;
        }
    }
    if (unknown != NULL) {
        return read_type_alias(keyword, unknown, &schema->types, error);
    }
    schema->single_type = count == 1;
    if (schema->types == 0) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "$jsonSchema keyword '%s' must name at least one type",
                            keyword);
    }
    return true;
}

static bool compile_metadata_and_types(json_schema_t *schema, const keyword_map_t *map, bson_error_t *error)
{
    static const char *const metadata[] = {"description", "title"};
    bson_iter_t element, other;
    for (size_t i = 0; i < 2; i++) {
        if (keyword_get(map, metadata[i], &element) && !BSON_ITER_HOLDS_UTF8(&element)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword '%s' must be of type string",
                                metadata[i]);
        }
    }
    bool has_type = keyword_get(map, "type", &element);
    if (has_type && keyword_get(map, "bsonType", &other)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'");
    }
    if (has_type || keyword_get(map, "bsonType", &element)) {
        return compile_types(schema, &element, error);
    }
    return true;
}

/* --- strings and numbers ---------------------------------------------------------- */

/* {v: {$regex: pattern}}, to match {v: text}: the matcher's errors (an embedded
 * NUL, an invalid expression). */
static bool compile_regex(const char *pattern, uint32_t length, match_expression_t **out, bson_error_t *error)
{
    bson_t filter = BSON_INITIALIZER, condition;
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "v", &condition);
    bson_append_utf8(&condition, "$regex", 6, pattern, (int)length);
    bson_append_document_end(&filter, &condition);
    *out = match_compile(&filter, error);
    bson_destroy(&filter);
    return *out != NULL;
}

static bool compile_limit(json_schema_t *schema, const keyword_map_t *map, json_schema_limit_t limit,
                          bson_error_t *error)
{
    bson_iter_t element;
    char reason[400];
    if (!keyword_get(map, LIMIT_KEYWORDS[limit], &element)) {
        return true;
    }
    if (!match_parse_integer(LIMIT_KEYWORDS[limit], bson_iter_value(&element), true, &schema->limits[limit], reason,
                             sizeof reason)) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "%s", reason);
    }
    schema->limits_present |= 1u << limit;
    return true;
}

/* maximum or minimum, with its exclusive flag, which needs it. */
static bool compile_bound(const keyword_map_t *map, const char *keyword, const char *exclusive_keyword,
                          bool *out_present, bson_value_t *out_bound, bool *out_exclusive, bson_error_t *error)
{
    bson_iter_t element, exclusive;
    bool has_exclusive = keyword_get(map, exclusive_keyword, &exclusive);
    if (!keyword_get(map, keyword, &element)) {
        if (has_exclusive) {
            return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                                "$jsonSchema keyword '%s' must be a present if %s is present", keyword,
                                exclusive_keyword);
        }
        return true;
    }
    if (has_exclusive && !BSON_ITER_HOLDS_BOOL(&exclusive)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword '%s' must be a boolean",
                            exclusive_keyword);
    }
    if (!order_is_number(bson_iter_type(&element))) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword '%s' must be a number", keyword);
    }
    *out_present = true;
    *out_bound = *bson_iter_value(&element);
    *out_exclusive = has_exclusive && bson_iter_bool(&exclusive);
    return true;
}

static bool is_infinite(const bson_value_t *value)
{
    char text[BSON_DECIMAL128_STRING];
    if (value->value_type == BSON_TYPE_DOUBLE) {
        return isinf(value->value.v_double);
    }
    if (value->value_type != BSON_TYPE_DECIMAL128) {
        return false;
    }
    bson_decimal128_to_string(&value->value.v_decimal128, text);
    return strstr(text, "Inf") != NULL;
}

/* multipleOf: positive; mongod's remainder also refuses NaN and infinity where
 * the keyword applies (not at the root, where it means nothing). */
static bool compile_multiple_of(json_schema_t *schema, const bson_iter_t *element, bson_error_t *error)
{
    const bson_value_t *value = bson_iter_value((bson_iter_t *)element);
    bson_value_t zero = {.value_type = BSON_TYPE_INT32};
    if (!order_is_number(value->value_type)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword 'multipleOf' must be a number");
    }
    bool nan = match_value_is_nan(value);
    if (!nan && order_compare_values(value, &zero) <= 0) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "$jsonSchema keyword 'multipleOf' must have a positive value");
    }
    if (schema->at_root) {
        return true;
    }
    if (nan || is_infinite(value)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "divisor cannot be %s", nan ? "NaN" : "infinite");
    }
    schema->has_multiple_of = true;
    schema->multiple_of = *value;
    return true;
}

static bool compile_scalar_keywords(json_schema_t *schema, const keyword_map_t *map, bson_error_t *error)
{
    bson_iter_t element;
    if (keyword_get(map, "pattern", &element)) {
        if (!BSON_ITER_HOLDS_UTF8(&element)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword 'pattern' must be a string");
        }
        uint32_t length;
        const char *pattern = bson_iter_utf8(&element, &length);
        if (!schema->at_root && !compile_regex(pattern, length, &schema->pattern, error)) {
            return false;
        }
    }
    if (!compile_limit(schema, map, JSON_SCHEMA_MAX_LENGTH, error) ||
        !compile_limit(schema, map, JSON_SCHEMA_MIN_LENGTH, error)) {
        return false;
    }
    if (keyword_get(map, "multipleOf", &element) && !compile_multiple_of(schema, &element, error)) {
        return false;
    }
    return compile_bound(map, "maximum", "exclusiveMaximum", &schema->has_maximum, &schema->maximum,
                         &schema->exclusive_maximum, error) &&
           compile_bound(map, "minimum", "exclusiveMinimum", &schema->has_minimum, &schema->minimum,
                         &schema->exclusive_minimum, error);
}

/* --- arrays ----------------------------------------------------------------------- */

static bool compile_items(json_schema_t *schema, const bson_iter_t *element, bson_error_t *error)
{
    if (BSON_ITER_HOLDS_DOCUMENT(element)) {
        schema->items = compile_child(schema, element, false, error);
        return schema->items != NULL;
    }
    if (!BSON_ITER_HOLDS_ARRAY(element)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "$jsonSchema keyword 'items' must be an array or an object, not %s", type_of(element));
    }
    bson_iter_t subschemas;
    bson_iter_recurse(element, &subschemas);
    schema->items_is_list = true;
    while (bson_iter_next(&subschemas)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&subschemas)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "$jsonSchema keyword 'items' requires that each element of the array is an object, "
                                "but found a %s", type_of(&subschemas));
        }
        json_schema_t *child = compile_child(schema, &subschemas, false, error);
        if (child == NULL) {
            return false;
        }
        json_schema_list_t *list = &schema->item_list;
        list->items = bson_realloc(list->items, (list->count + 1) * sizeof *list->items);
        list->items[list->count++] = child;
    }
    return true;
}

static bool compile_array_keywords(json_schema_t *schema, const keyword_map_t *map, bson_error_t *error)
{
    bson_iter_t element;
    if (!compile_limit(schema, map, JSON_SCHEMA_MIN_ITEMS, error) ||
        !compile_limit(schema, map, JSON_SCHEMA_MAX_ITEMS, error)) {
        return false;
    }
    if (keyword_get(map, "uniqueItems", &element)) {
        if (!BSON_ITER_HOLDS_BOOL(&element)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword 'uniqueItems' must be a boolean");
        }
        schema->unique_items = bson_iter_bool(&element);
    }
    if (keyword_get(map, "items", &element) && !compile_items(schema, &element, error)) {
        return false;
    }
    if (!keyword_get(map, "additionalItems", &element)) {
        return true;
    }
    if (BSON_ITER_HOLDS_BOOL(&element)) {
        schema->additional_items_allowed = bson_iter_bool(&element);
    } else if (BSON_ITER_HOLDS_DOCUMENT(&element)) {
        schema->additional_items = compile_child(schema, &element, false, error);
        if (schema->additional_items == NULL) {
            return false;
        }
    } else {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "$jsonSchema keyword 'additionalItems' must be either an object or a boolean, but got a "
                            "%s", type_of(&element));
    }
    /* additionalItems means something only after items' list. */
    schema->has_additional_items = schema->items_is_list;
    return true;
}

/* --- objects ---------------------------------------------------------------------- */

static bool compile_required(json_schema_t *schema, const bson_iter_t *element, bson_error_t *error)
{
    bson_t names;
    bson_iter_t name;
    if (!BSON_ITER_HOLDS_ARRAY(element)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "$jsonSchema keyword 'required' must be an array, but found an element of type %s",
                            type_of(element));
    }
    bson_view_of(element, &names);
    if (!check_name_list(&names,
                         "$jsonSchema keyword 'required' must be an array of strings, but found an element of type: %s",
                         "$jsonSchema keyword 'required' array cannot contain duplicate values%.0s", NULL, error)) {
        return false;
    }
    bson_iter_init(&name, &names);
    while (bson_iter_next(&name)) {
        schema->required = bson_realloc(schema->required, (schema->required_count + 1) * sizeof(char *));
        schema->required[schema->required_count++] = bson_strdup(bson_iter_utf8(&name, NULL));
    }
    if (schema->required_count == 0) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "$jsonSchema keyword 'required' cannot be an empty array");
    }
    qsort(schema->required, schema->required_count, sizeof(char *), json_schema_compare_names);
    return true;
}

static bool compile_properties(json_schema_t *schema, const bson_iter_t *element, bson_error_t *error)
{
    bson_iter_t properties;
    if (!BSON_ITER_HOLDS_DOCUMENT(element)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword 'properties' must be an object");
    }
    bson_iter_recurse(element, &properties);
    while (bson_iter_next(&properties)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&properties)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "Nested schema for $jsonSchema property '%s' must be an object",
                                bson_iter_key(&properties));
        }
        json_schema_t *child = compile_child(schema, &properties, false, error);
        if (child == NULL) {
            return false;
        }
        schema->property_names = bson_realloc(schema->property_names, (schema->property_count + 1) * sizeof(char *));
        schema->properties = bson_realloc(schema->properties, (schema->property_count + 1) * sizeof(json_schema_t *));
        schema->property_names[schema->property_count] = bson_strdup(bson_iter_key(&properties));
        schema->properties[schema->property_count++] = child;
    }
    return true;
}

static bool compile_pattern_properties(json_schema_t *schema, const bson_iter_t *element, bson_error_t *error)
{
    bson_iter_t patterns;
    if (!BSON_ITER_HOLDS_DOCUMENT(element)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword 'patternProperties' must be an object");
    }
    bson_iter_recurse(element, &patterns);
    while (bson_iter_next(&patterns)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&patterns)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "$jsonSchema keyword 'patternProperties' has property '%s' which is not an object",
                                bson_iter_key(&patterns));
        }
        json_schema_pattern_property_t entry = {.pattern = bson_iter_key(&patterns)};
        entry.schema = compile_child(schema, &patterns, false, error);
        if (entry.schema == NULL) {
            return false;
        }
        schema->pattern_properties = bson_realloc(schema->pattern_properties,
                                                  (schema->pattern_property_count + 1) * sizeof entry);
        schema->pattern_properties[schema->pattern_property_count++] = entry;
    }
    return true;
}

/* mongod compiles patternProperties' expressions once every subschema and
 * additionalProperties are parsed, with an error of its own. */
static bool compile_property_patterns(json_schema_t *schema, bson_error_t *error)
{
    for (size_t i = 0; i < schema->pattern_property_count; i++) {
        json_schema_pattern_property_t *entry = &schema->pattern_properties[i];
        bson_error_t regex_error;
        if (!compile_regex(entry->pattern, (uint32_t)strlen(entry->pattern), &entry->matcher, &regex_error)) {
            const char *reason = strstr(regex_error.message, ": ");
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Invalid regular expression: %s",
                                reason != NULL ? reason + 2 : regex_error.message);
        }
    }
    return true;
}

static bool compile_additional_properties(json_schema_t *schema, const bson_iter_t *element, bson_error_t *error)
{
    schema->has_additional_properties = true;
    if (BSON_ITER_HOLDS_BOOL(element)) {
        schema->additional_properties_allowed = bson_iter_bool(element);
        return true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(element)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "$jsonSchema keyword 'additionalProperties' must be an object or a boolean");
    }
    schema->additional_properties = compile_child(schema, element, false, error);
    return schema->additional_properties != NULL;
}

static bool compile_property_dependency(json_schema_dependency_t *dependency, const bson_iter_t *element,
                                        bson_error_t *error)
{
    bson_t names;
    char type_format[256], duplicate_format[256];
    bson_view_of(element, &names);
    dependency->names = bson_get_data(&names);
    dependency->names_length = names.len;
    if (bson_count_keys(&names) == 0) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "property '%s' in $jsonSchema keyword 'dependencies' cannot be an empty array",
                            dependency->property);
    }
    snprintf(type_format, sizeof type_format,
             "array '%s' in $jsonSchema keyword 'dependencies' can only contain strings, but found element of "
             "type: %%s", dependency->property);
    snprintf(duplicate_format, sizeof duplicate_format,
             "array '%s' in $jsonSchema keyword 'dependencies' contains duplicate element: %%s", dependency->property);
    return check_name_list(&names, type_format, duplicate_format, NULL, error);
}

static bool compile_dependencies(json_schema_t *schema, const bson_iter_t *element, bson_error_t *error)
{
    bson_iter_t entries;
    if (!BSON_ITER_HOLDS_DOCUMENT(element)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword 'dependencies' must be an object");
    }
    bson_iter_recurse(element, &entries);
    while (bson_iter_next(&entries)) {
        const char *property = bson_iter_key(&entries);
        bool annotation = strcmp(property, "title") == 0 || strcmp(property, "description") == 0;
        if (annotation && BSON_ITER_HOLDS_UTF8(&entries)) {
            continue; /* mongod allows the schema annotations there */
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&entries) && !BSON_ITER_HOLDS_ARRAY(&entries)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "property '%s' in $jsonSchema keyword 'dependencies' must be either an object or an "
                                "array", property);
        }
        json_schema_dependency_t dependency = {.property = property};
        if (BSON_ITER_HOLDS_DOCUMENT(&entries)) {
            dependency.schema = compile_child(schema, &entries, true, error);
            if (dependency.schema == NULL) {
                return false;
            }
        } else if (!compile_property_dependency(&dependency, &entries, error)) {
            return false;
        }
        schema->dependencies = bson_realloc(schema->dependencies,
                                            (schema->dependency_count + 1) * sizeof dependency);
        schema->dependencies[schema->dependency_count++] = dependency;
    }
    return true;
}

static bool compile_object_keywords(json_schema_t *schema, const keyword_map_t *map, bson_error_t *error)
{
    bson_iter_t element;
    if (keyword_get(map, "required", &element) && !compile_required(schema, &element, error)) {
        return false;
    }
    if (keyword_get(map, "properties", &element) && !compile_properties(schema, &element, error)) {
        return false;
    }
    if (keyword_get(map, "patternProperties", &element) && !compile_pattern_properties(schema, &element, error)) {
        return false;
    }
    if (keyword_get(map, "additionalProperties", &element) &&
        !compile_additional_properties(schema, &element, error)) {
        return false;
    }
    if (!compile_property_patterns(schema, error)) {
        return false;
    }
    if (!compile_limit(schema, map, JSON_SCHEMA_MIN_PROPERTIES, error) ||
        !compile_limit(schema, map, JSON_SCHEMA_MAX_PROPERTIES, error)) {
        return false;
    }
    return !keyword_get(map, "dependencies", &element) || compile_dependencies(schema, &element, error);
}

/* --- logic ------------------------------------------------------------------------ */

static bool compile_list(const json_schema_t *schema, json_schema_list_t *list, const bson_iter_t *element,
                         bson_error_t *error)
{
    const char *keyword = bson_iter_key(element);
    bson_iter_t subschemas;
    if (!BSON_ITER_HOLDS_ARRAY(element)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "$jsonSchema keyword '%s' must be an array", keyword);
    }
    bson_iter_recurse(element, &subschemas);
    while (bson_iter_next(&subschemas)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&subschemas)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "$jsonSchema keyword '%s' must be an array of objects, but found an element of type "
                                "%s", keyword, type_of(&subschemas));
        }
        json_schema_t *child = compile_child(schema, &subschemas, true, error);
        if (child == NULL) {
            return false;
        }
        list->items = bson_realloc(list->items, (list->count + 1) * sizeof *list->items);
        list->items[list->count++] = child;
    }
    if (list->count == 0) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "$jsonSchema keyword '%s' must be a non-empty array", keyword);
    }
    return true;
}

static bool compile_enum(json_schema_t *schema, const bson_iter_t *element, bson_error_t *error)
{
    bson_t values;
    if (!BSON_ITER_HOLDS_ARRAY(element)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "$jsonSchema keyword 'enum' must be an array, but found an element of type %s",
                            type_of(element));
    }
    bson_view_of(element, &values);
    schema->enum_values = bson_get_data(&values);
    schema->enum_length = values.len;
    if (bson_count_keys(&values) == 0) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "$jsonSchema keyword 'enum' cannot be an empty array");
    }
    if (json_schema_first_duplicate(&values) >= 0) {
        return tc_error_set(error, TC_ERR_FAILED_TO_PARSE,
                            "$jsonSchema keyword 'enum' array cannot contain duplicate values.");
    }
    return true;
}

static bool compile_logical_keywords(json_schema_t *schema, const keyword_map_t *map, bson_error_t *error)
{
    bson_iter_t element;
    if ((keyword_get(map, "allOf", &element) && !compile_list(schema, &schema->all_of, &element, error)) ||
        (keyword_get(map, "anyOf", &element) && !compile_list(schema, &schema->any_of, &element, error)) ||
        (keyword_get(map, "oneOf", &element) && !compile_list(schema, &schema->one_of, &element, error))) {
        return false;
    }
    if (keyword_get(map, "not", &element)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&element)) {
            return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                "$jsonSchema keyword 'not' must be an object, but found an element of type %s",
                                type_of(&element));
        }
        schema->not_schema = compile_child(schema, &element, true, error);
        if (schema->not_schema == NULL) {
            return false;
        }
    }
    return !keyword_get(map, "enum", &element) || compile_enum(schema, &element, error);
}

/* --- the node --------------------------------------------------------------------- */

/* What mongod parses between the array and the object keywords, which the
 * store does not implement. */
static bool refuse_encryption(const keyword_map_t *map, bson_error_t *error)
{
    static const char *const keywords[] = {"encrypt", "encryptMetadata"};
    bson_iter_t element;
    for (size_t i = 0; i < 2; i++) {
        if (keyword_get(map, keywords[i], &element)) {
            return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED,
                                "thermocline store does not support the $jsonSchema keyword '%s' (client-side "
                                "field level encryption)", keywords[i]);
        }
    }
    return true;
}

static json_schema_t *compile_node(const uint8_t *spec, uint32_t spec_length, bool at_root, bson_error_t *error)
{
    keyword_map_t map;
    bson_t view;
    json_schema_t *schema = bson_malloc0(sizeof *schema);
    schema->spec = spec;
    schema->spec_length = spec_length;
    schema->at_root = at_root;
    json_schema_view(spec, spec_length, &view);
    if (!collect_keywords(&view, &map, error) || !compile_metadata_and_types(schema, &map, error) ||
        !compile_scalar_keywords(schema, &map, error) || !compile_array_keywords(schema, &map, error) ||
        !refuse_encryption(&map, error) || !compile_object_keywords(schema, &map, error) ||
        !compile_logical_keywords(schema, &map, error)) {
        json_schema_destroy(schema);
        return NULL;
    }
    return schema;
}

json_schema_t *json_schema_compile(const bson_t *spec, bson_error_t *error)
{
    bson_t *copy = bson_copy(spec);
    json_schema_t *schema = compile_node(bson_get_data(copy), copy->len, true, error);
    if (schema == NULL) {
        bson_destroy(copy);
        return NULL;
    }
    schema->owned_spec = copy;
    schema->is_top = true;
    return schema;
}

bool json_schema_find_keyword(const json_schema_t *schema, const char *keyword, bson_iter_t *out)
{
    return bson_iter_init_from_data(out, schema->spec, schema->spec_length) && bson_iter_find(out, keyword);
}

bool json_schema_rejects_every_document(const json_schema_t *schema)
{
    return schema->is_top && schema->types != 0 && (schema->types & json_schema_type_bit(BSON_TYPE_DOCUMENT)) == 0;
}

void json_schema_append_document_annotations(const bson_t *document, bson_t *out)
{
    static const char *const annotations[] = {"title", "description"};
    bson_iter_t element;
    for (size_t i = 0; i < 2; i++) {
        if (bson_iter_init_find(&element, document, annotations[i]) && BSON_ITER_HOLDS_UTF8(&element)) {
            bson_append_iter(out, annotations[i], -1, &element);
        }
    }
}

void json_schema_append_annotations(const json_schema_t *schema, bson_t *out)
{
    bson_t view;
    json_schema_view(schema->spec, schema->spec_length, &view);
    json_schema_append_document_annotations(&view, out);
}

static void destroy_list(json_schema_list_t *list)
{
    for (size_t i = 0; i < list->count; i++) {
        json_schema_destroy(list->items[i]);
    }
    bson_free(list->items);
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
    for (size_t i = 0; i < schema->pattern_property_count; i++) {
        match_destroy(schema->pattern_properties[i].matcher);
        json_schema_destroy(schema->pattern_properties[i].schema);
    }
    bson_free(schema->pattern_properties);
    for (size_t i = 0; i < schema->required_count; i++) {
        bson_free(schema->required[i]);
    }
    bson_free(schema->required);
    for (size_t i = 0; i < schema->dependency_count; i++) {
        json_schema_destroy(schema->dependencies[i].schema);
    }
    bson_free(schema->dependencies);
    destroy_list(&schema->item_list);
    destroy_list(&schema->all_of);
    destroy_list(&schema->any_of);
    destroy_list(&schema->one_of);
    json_schema_destroy(schema->items);
    json_schema_destroy(schema->additional_items);
    json_schema_destroy(schema->additional_properties);
    json_schema_destroy(schema->not_schema);
    match_destroy(schema->pattern);
    if (schema->owned_spec != NULL) {
        bson_destroy(schema->owned_spec);
    }
    bson_free(schema);
}
