/* A value checked against a compiled $jsonSchema: every keyword applies only
 * to the values of its kind (minLength to strings, items to arrays, required to
 * objects...), a property absent from an object meets its schema, and a
 * failure writes the rule mongod 6.0's doc_validation_error.cpp would, in the
 * order its parser builds them. */
#include "query/json_schema_private.h"

#include "query/aggregation_value.h"
#include "query/order.h"
#include "query/value_format.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where a node's failures go: rules is NULL when only the verdict matters,
 * and then the first failure ends the check. */
typedef struct rule_sink {
    bson_t *rules;
    uint32_t count;
} rule_sink_t;

static void check_value(json_schema_t *schema, const bson_value_t *value, rule_sink_t *sink);

/* The key of an array's index-th element; buffer holds it when it is not a constant. */
static const char *array_key(uint32_t index, char buffer[16])
{
    const char *key;
    bson_uint32_to_string(index, &key, buffer, 16);
    return key;
}

/* Opens the next rule {operatorName: keyword}; false when nobody wants the details. */
static bool rule_open(rule_sink_t *sink, const char *keyword, bson_t *rule)
{
    sink->count++;
    if (sink->rules == NULL) {
        return false;
    }
    char key[16];
    bson_append_document_begin(sink->rules, array_key(sink->count - 1, key), -1, rule);
    BSON_APPEND_UTF8(rule, "operatorName", keyword);
    return true;
}

/* rule_open() then specifiedAs: {keyword: its value}, and flag: true beside it
 * when flag is not NULL (an exclusive bound, as mongod's annotation names it). */
static bool rule_open_specified(rule_sink_t *sink, const json_schema_t *schema, const char *keyword,
                                const char *flag, bson_t *rule)
{
    bson_iter_t element;
    bson_t specified;
    if (!rule_open(sink, keyword, rule)) {
        return false;
    }
    json_schema_find_keyword(schema, keyword, &element);
    BSON_APPEND_DOCUMENT_BEGIN(rule, "specifiedAs", &specified);
    bson_append_iter(&specified, keyword, -1, &element);
    if (flag != NULL) {
        BSON_APPEND_BOOL(&specified, flag, true);
    }
    bson_append_document_end(rule, &specified);
    return true;
}

static void rule_close(rule_sink_t *sink, bson_t *rule)
{
    bson_append_document_end(sink->rules, rule);
}

/* A rule about the value itself: reason and consideredValue (and its type). */
static void add_value_rule(rule_sink_t *sink, const json_schema_t *schema, const char *keyword, const char *flag,
                           const char *reason, const bson_value_t *value, bool with_type)
{
    bson_t rule;
    if (rule_open_specified(sink, schema, keyword, flag, &rule)) {
        BSON_APPEND_UTF8(&rule, "reason", reason);
        BSON_APPEND_VALUE(&rule, "consideredValue", value);
        if (with_type) {
            BSON_APPEND_UTF8(&rule, "consideredType", value_type_name(value->value_type));
        }
        rule_close(sink, &rule);
    }
}

/* Checks value against a subschema, its rules (when the parent wants them)
 * into child_rules, which the caller initialised. */
static bool check_child(json_schema_t *child, const bson_value_t *value, const rule_sink_t *parent,
                        bson_t *child_rules)
{
    rule_sink_t sink = {.rules = parent->rules != NULL ? child_rules : NULL};
    check_value(child, value, &sink);
    return sink.count == 0;
}

/* Whether a keyword checking its parts may stop: nobody wants the rules and
 * one part already failed. */
static bool verdict_known(const rule_sink_t *sink, uint32_t failures)
{
    return sink->rules == NULL && failures > 0;
}

/* Appends {<label>: <label value>, title, description, details: rules} as the
 * position-th entry of array, when the sink wants rules. */
static void append_entry(const rule_sink_t *sink, bson_t *array, uint32_t position, const char *label,
                         const bson_value_t *label_value, const json_schema_t *annotated, const bson_t *rules)
{
    char key[16];
    bson_t entry;
    if (sink->rules == NULL) {
        return;
    }
    bson_append_document_begin(array, array_key(position, key), -1, &entry);
    BSON_APPEND_VALUE(&entry, label, label_value);
    if (annotated != NULL) {
        json_schema_append_annotations(annotated, &entry);
    }
    BSON_APPEND_ARRAY(&entry, "details", rules);
    bson_append_document_end(array, &entry);
}

/* --- strings and numbers ---------------------------------------------------------- */

static bool matches_regex(const match_expression_t *regex, const char *text, size_t length)
{
    bson_t wrapped = BSON_INITIALIZER;
    bson_append_utf8(&wrapped, "v", 1, text, (int)length);
    bool matches = match_document(regex, &wrapped);
    bson_destroy(&wrapped);
    return matches;
}

static bool has_limit(const json_schema_t *schema, json_schema_limit_t limit)
{
    return (schema->limits_present & (1u << limit)) != 0;
}

static void check_string(const json_schema_t *schema, const bson_value_t *value, rule_sink_t *sink)
{
    if (schema->pattern != NULL && !matches_regex(schema->pattern, value->value.v_utf8.str, value->value.v_utf8.len)) {
        add_value_rule(sink, schema, "pattern", NULL, "regular expression did not match", value, false);
    }
    int64_t length = aggregation_value_code_points(value); /* mongod counts code points */
    if (has_limit(schema, JSON_SCHEMA_MAX_LENGTH) && length > schema->limits[JSON_SCHEMA_MAX_LENGTH]) {
        add_value_rule(sink, schema, "maxLength", NULL, "specified string length was not satisfied", value, false);
    }
    if (has_limit(schema, JSON_SCHEMA_MIN_LENGTH) && length < schema->limits[JSON_SCHEMA_MIN_LENGTH]) {
        add_value_rule(sink, schema, "minLength", NULL, "specified string length was not satisfied", value, false);
    }
}

/* A comparison with NaN on either side holds only between two NaNs, inclusively. */
static bool within_bound(const bson_value_t *value, const bson_value_t *bound, bool is_minimum, bool exclusive)
{
    if (match_value_is_nan(value) || match_value_is_nan(bound)) {
        return match_value_is_nan(value) && match_value_is_nan(bound) && !exclusive;
    }
    int comparison = order_compare_values(value, bound);
    if (is_minimum) {
        return exclusive ? comparison > 0 : comparison >= 0;
    }
    return exclusive ? comparison < 0 : comparison <= 0;
}

static void check_number(const json_schema_t *schema, const bson_value_t *value, rule_sink_t *sink)
{
    if (schema->has_multiple_of && !json_schema_is_multiple_of(value, &schema->multiple_of)) {
        add_value_rule(sink, schema, "multipleOf", NULL, "considered value is not a multiple of the specified value",
                       value, false);
    }
    if (schema->has_maximum && !within_bound(value, &schema->maximum, false, schema->exclusive_maximum)) {
        add_value_rule(sink, schema, "maximum", schema->exclusive_maximum ? "exclusiveMaximum" : NULL,
                       "comparison failed", value, false);
    }
    if (schema->has_minimum && !within_bound(value, &schema->minimum, true, schema->exclusive_minimum)) {
        add_value_rule(sink, schema, "minimum", schema->exclusive_minimum ? "exclusiveMinimum" : NULL,
                       "comparison failed", value, false);
    }
}

/* --- arrays ----------------------------------------------------------------------- */

static void check_item_count(const json_schema_t *schema, const bson_value_t *value, uint32_t count,
                             rule_sink_t *sink)
{
    static const json_schema_limit_t limits[] = {JSON_SCHEMA_MIN_ITEMS, JSON_SCHEMA_MAX_ITEMS};
    for (size_t i = 0; i < 2; i++) {
        int64_t limit = schema->limits[limits[i]];
        bool failed = limits[i] == JSON_SCHEMA_MIN_ITEMS ? count < limit : count > limit;
        bson_t rule;
        if (has_limit(schema, limits[i]) && failed &&
            rule_open_specified(sink, schema, limits[i] == JSON_SCHEMA_MIN_ITEMS ? "minItems" : "maxItems", NULL,
                                &rule)) {
            BSON_APPEND_UTF8(&rule, "reason", "array did not match specified length");
            BSON_APPEND_VALUE(&rule, "consideredValue", value);
            BSON_APPEND_INT32(&rule, "numberOfItems", (int32_t)count);
            rule_close(sink, &rule);
        }
    }
}

static void check_unique_items(const json_schema_t *schema, const bson_value_t *value, const bson_t *array,
                               rule_sink_t *sink)
{
    int64_t duplicate = json_schema_first_duplicate(array);
    bson_t rule;
    bson_iter_t item;
    char key[16];
    if (duplicate >= 0 && rule_open_specified(sink, schema, "uniqueItems", NULL, &rule)) {
        BSON_APPEND_UTF8(&rule, "reason", "found a duplicate item");
        BSON_APPEND_VALUE(&rule, "consideredValue", value);
        bson_iter_init_find(&item, array, array_key((uint32_t)duplicate, key));
        BSON_APPEND_VALUE(&rule, "duplicatedValue", bson_iter_value(&item));
        rule_close(sink, &rule);
    }
}

/* items: {schema} or additionalItems: {schema} from index first: the first
 * item that fails it. */
static void check_every_item(json_schema_t *child, const char *keyword, const char *reason, const bson_t *array,
                             uint32_t first, rule_sink_t *sink)
{
    bson_iter_t item;
    uint32_t index = 0;
    bson_iter_init(&item, array);
    for (; bson_iter_next(&item); index++) {
        bson_t child_rules = BSON_INITIALIZER, rule;
        if (index < first || check_child(child, bson_iter_value(&item), sink, &child_rules)) {
            bson_destroy(&child_rules);
            continue;
        }
        if (rule_open(sink, keyword, &rule)) {
            json_schema_append_annotations(child, &rule);
            BSON_APPEND_UTF8(&rule, "reason", reason);
            BSON_APPEND_INT32(&rule, "itemIndex", (int32_t)index);
            BSON_APPEND_ARRAY(&rule, "details", &child_rules);
            rule_close(sink, &rule);
        }
        bson_destroy(&child_rules);
        return;
    }
}

/* items: [schemas]: each item against the schema at its position. */
static void check_item_list(const json_schema_t *schema, const bson_t *array, rule_sink_t *sink)
{
    bson_iter_t item;
    bson_t failed = BSON_INITIALIZER;
    uint32_t failed_count = 0;
    bson_iter_init(&item, array);
    for (uint32_t index = 0; index < schema->item_list.count && bson_iter_next(&item); index++) {
        bson_t child_rules = BSON_INITIALIZER;
        if (!check_child(schema->item_list.items[index], bson_iter_value(&item), sink, &child_rules)) {
            /* mongod's $_internalSchemaMatchArrayIndex writes the index as a long. */
            bson_value_t position = {.value_type = BSON_TYPE_INT64, .value.v_int64 = index};
            append_entry(sink, &failed, failed_count++, "itemIndex", &position, NULL, &child_rules);
        }
        bson_destroy(&child_rules);
        if (verdict_known(sink, failed_count)) {
            break;
        }
    }
    bson_t rule;
    if (failed_count > 0 && rule_open(sink, "items", &rule)) {
        BSON_APPEND_ARRAY(&rule, "details", &failed);
        rule_close(sink, &rule);
    }
    bson_destroy(&failed);
}

static void check_additional_items(const json_schema_t *schema, const bson_t *array, uint32_t count,
                                   rule_sink_t *sink)
{
    uint32_t first = (uint32_t)schema->item_list.count;
    if (schema->additional_items != NULL) {
        check_every_item(schema->additional_items, "additionalItems",
                         "At least one additional item did not match the sub-schema", array, first, sink);
        return;
    }
    bson_t rule, extra;
    if (schema->additional_items_allowed || count <= first ||
        !rule_open_specified(sink, schema, "additionalItems", NULL, &rule)) {
        return;
    }
    BSON_APPEND_UTF8(&rule, "reason", "found additional items");
    BSON_APPEND_ARRAY_BEGIN(&rule, "additionalItems", &extra);
    bson_iter_t item;
    bson_iter_init(&item, array);
    for (uint32_t index = 0, extra_count = 0; bson_iter_next(&item); index++) {
        char key[16];
        if (index >= first) {
            bson_append_value(&extra, array_key(extra_count++, key), -1, bson_iter_value(&item));
        }
    }
    bson_append_array_end(&rule, &extra);
    rule_close(sink, &rule);
}

static void check_array(json_schema_t *schema, const bson_value_t *value, rule_sink_t *sink)
{
    bson_t array;
    aggregation_value_view_document(value, &array);
    uint32_t count = bson_count_keys(&array);
    check_item_count(schema, value, count, sink);
    if (schema->unique_items) {
        check_unique_items(schema, value, &array, sink);
    }
    if (schema->items != NULL) {
        check_every_item(schema->items, "items", "At least one item did not match the sub-schema", &array, 0, sink);
    } else if (schema->items_is_list) {
        check_item_list(schema, &array, sink);
    }
    if (schema->has_additional_items) {
        check_additional_items(schema, &array, count, sink);
    }
}

/* --- logic ------------------------------------------------------------------------ */

/* enum: one of the values; at the root, where only objects can be, an enum
 * of no object is mongod's "always false". */
static void check_enum(const json_schema_t *schema, const bson_value_t *value, rule_sink_t *sink)
{
    bson_t values, rule;
    bson_iter_t item;
    bool has_object = false;
    json_schema_view(schema->enum_values, schema->enum_length, &values);
    bson_iter_init(&item, &values);
    while (bson_iter_next(&item)) {
        if (json_schema_values_equal(bson_iter_value(&item), value)) {
            return;
        }
        has_object = has_object || BSON_ITER_HOLDS_DOCUMENT(&item);
    }
    if (!schema->at_root || has_object) {
        add_value_rule(sink, schema, "enum", NULL, "value was not found in enum", value, false);
    } else if (rule_open_specified(sink, schema, "enum", NULL, &rule)) {
        BSON_APPEND_UTF8(&rule, "reason", "expression always evaluates to false");
        rule_close(sink, &rule);
    }
}

/* Checks value against each subschema of list, stopping once the verdict is
 * known when nobody wants rules (after stop_after_matches matches: anyOf's
 * first, oneOf's second; with 0, allOf's first failure). Fills out_failed with {index, title,
 * description, details} per failing subschema when rules are wanted, and
 * out_matching with the matching indexes. Returns the number that matched. */
static uint32_t check_subschemas(const json_schema_list_t *list, const bson_value_t *value, const rule_sink_t *sink,
                                 uint32_t stop_after_matches, bson_t *out_failed, bson_t *out_matching)
{
    uint32_t matched = 0, failed = 0;
    for (size_t i = 0; i < list->count; i++) {
        bson_t child_rules = BSON_INITIALIZER;
        char key[16];
        bson_value_t index = {.value_type = BSON_TYPE_INT32, .value.v_int32 = (int32_t)i};
        if (check_child(list->items[i], value, sink, &child_rules)) {
            bson_append_int32(out_matching, array_key(matched++, key), -1, (int32_t)i);
        } else {
            append_entry(sink, out_failed, failed++, "index", &index, list->items[i], &child_rules);
        }
        bson_destroy(&child_rules);
        bool settled = stop_after_matches > 0 ? matched >= stop_after_matches : failed > 0;
        if (sink->rules == NULL && settled) {
            break;
        }
    }
    return matched;
}

static void add_schemas_rule(rule_sink_t *sink, const char *keyword, const bson_t *failed)
{
    bson_t rule;
    if (rule_open(sink, keyword, &rule)) {
        BSON_APPEND_ARRAY(&rule, "schemasNotSatisfied", failed);
        rule_close(sink, &rule);
    }
}

static void check_logic(json_schema_t *schema, const bson_value_t *value, rule_sink_t *sink)
{
    bson_t failed = BSON_INITIALIZER, matching = BSON_INITIALIZER, rule;
    const json_schema_list_t *lists[] = {&schema->all_of, &schema->any_of, &schema->one_of};
    static const char *const keywords[] = {"allOf", "anyOf", "oneOf"};
    for (size_t i = 0; i < 3; i++) {
        const json_schema_list_t *list = lists[i];
        if (list->count == 0) {
            continue;
        }
        bson_reinit(&failed);
        bson_reinit(&matching);
        uint32_t matched = check_subschemas(list, value, sink, i == 0 ? 0 : i, &failed, &matching);
        if ((i == 0 && matched < list->count) || (i > 0 && matched == 0)) {
            add_schemas_rule(sink, keywords[i], &failed);
        } else if (i == 2 && matched > 1 && rule_open(sink, "oneOf", &rule)) {
            BSON_APPEND_UTF8(&rule, "reason", "more than one subschema matched");
            BSON_APPEND_ARRAY(&rule, "matchingSchemaIndexes", &matching);
            rule_close(sink, &rule);
        }
    }
    bson_destroy(&failed);
    bson_destroy(&matching);
    if (schema->not_schema != NULL) {
        rule_sink_t verdict = {.rules = NULL};
        check_value(schema->not_schema, value, &verdict);
        if (verdict.count == 0 && rule_open(sink, "not", &rule)) {
            BSON_APPEND_UTF8(&rule, "reason", "child expression matched");
            rule_close(sink, &rule);
        }
    }
    if (schema->enum_values != NULL) {
        check_enum(schema, value, sink);
    }
}

/* --- objects ---------------------------------------------------------------------- */

static void check_properties(json_schema_t *schema, const bson_t *object, rule_sink_t *sink)
{
    bson_t failed = BSON_INITIALIZER, rule;
    uint32_t failed_count = 0;
    for (size_t i = 0; i < schema->property_count; i++) {
        bson_iter_t field;
        bson_t child_rules = BSON_INITIALIZER;
        if (bson_iter_init_find(&field, object, schema->property_names[i]) &&
            !check_child(schema->properties[i], bson_iter_value(&field), sink, &child_rules)) {
            bson_value_t name = {.value_type = BSON_TYPE_UTF8};
            name.value.v_utf8.str = schema->property_names[i];
            name.value.v_utf8.len = (uint32_t)strlen(schema->property_names[i]);
            append_entry(sink, &failed, failed_count++, "propertyName", &name, schema->properties[i], &child_rules);
        }
        bson_destroy(&child_rules);
        if (verdict_known(sink, failed_count)) {
            break;
        }
    }
    /* properties' own entry has no specifiedAs in mongod's errInfo. */
    if (failed_count > 0 && rule_open(sink, "properties", &rule)) {
        BSON_APPEND_ARRAY(&rule, "propertiesNotSatisfied", &failed);
        rule_close(sink, &rule);
    }
    bson_destroy(&failed);
}

static bool name_matches(const json_schema_pattern_property_t *pattern, const char *name)
{
    return matches_regex(pattern->matcher, name, strlen(name));
}

/* Neither named by properties nor matched by a pattern of patternProperties. */
static bool is_additional(const json_schema_t *schema, const char *name)
{
    for (size_t i = 0; i < schema->property_count; i++) {
        if (strcmp(schema->property_names[i], name) == 0) {
            return false;
        }
    }
    for (size_t i = 0; i < schema->pattern_property_count; i++) {
        if (name_matches(&schema->pattern_properties[i], name)) {
            return false;
        }
    }
    return true;
}

static void check_additional_properties(const json_schema_t *schema, const bson_t *object, rule_sink_t *sink)
{
    bson_iter_t field;
    bson_t extra = BSON_INITIALIZER, rule;
    uint32_t extra_count = 0;
    bson_iter_init(&field, object);
    while (bson_iter_next(&field)) {
        if (!is_additional(schema, bson_iter_key(&field))) {
            continue;
        }
        if (schema->additional_properties == NULL) {
            char key[16];
            bson_append_utf8(&extra, array_key(extra_count++, key), -1, bson_iter_key(&field), -1);
            continue;
        }
        bson_t child_rules = BSON_INITIALIZER;
        bool matched = check_child(schema->additional_properties, bson_iter_value(&field), sink, &child_rules);
        if (!matched && rule_open(sink, "additionalProperties", &rule)) {
            json_schema_append_annotations(schema->additional_properties, &rule);
            BSON_APPEND_UTF8(&rule, "reason", "at least one additional property did not match the subschema");
            BSON_APPEND_UTF8(&rule, "failingProperty", bson_iter_key(&field));
            BSON_APPEND_ARRAY(&rule, "details", &child_rules);
            rule_close(sink, &rule);
        }
        bson_destroy(&child_rules);
        if (!matched) {
            break; /* mongod reports the first one */
        }
    }
    if (extra_count > 0 && rule_open_specified(sink, schema, "additionalProperties", NULL, &rule)) {
        BSON_APPEND_ARRAY(&rule, "additionalProperties", &extra);
        rule_close(sink, &rule);
    }
    bson_destroy(&extra);
}

/* Per pattern, the first property whose name it matches and whose value fails its schema. */
static void check_pattern_properties(const json_schema_t *schema, const bson_t *object, rule_sink_t *sink)
{
    bson_t failed = BSON_INITIALIZER, rule;
    uint32_t failed_count = 0;
    for (size_t i = 0; i < schema->pattern_property_count; i++) {
        const json_schema_pattern_property_t *pattern = &schema->pattern_properties[i];
        bson_iter_t field;
        bson_iter_init(&field, object);
        while (bson_iter_next(&field)) {
            bson_t child_rules = BSON_INITIALIZER, entry;
            bool failing = name_matches(pattern, bson_iter_key(&field)) &&
                           !check_child(pattern->schema, bson_iter_value(&field), sink, &child_rules);
            if (failing && sink->rules != NULL) {
                char key[16];
                bson_append_document_begin(&failed, array_key(failed_count, key), -1, &entry);
                BSON_APPEND_UTF8(&entry, "propertyName", bson_iter_key(&field));
                json_schema_append_annotations(pattern->schema, &entry);
                BSON_APPEND_UTF8(&entry, "regexMatched", pattern->pattern);
                BSON_APPEND_ARRAY(&entry, "details", &child_rules);
                bson_append_document_end(&failed, &entry);
            }
            bson_destroy(&child_rules);
            if (failing) {
                failed_count++;
                break;
            }
        }
        if (verdict_known(sink, failed_count)) {
            break;
        }
    }
    if (failed_count > 0 && rule_open(sink, "patternProperties", &rule)) {
        BSON_APPEND_ARRAY(&rule, "details", &failed);
        rule_close(sink, &rule);
    }
    bson_destroy(&failed);
}

static void check_required(const json_schema_t *schema, const bson_t *object, rule_sink_t *sink)
{
    bson_t missing = BSON_INITIALIZER, rule;
    uint32_t missing_count = 0;
    for (size_t i = 0; i < schema->required_count; i++) {
        if (!bson_has_field(object, schema->required[i])) {
            char key[16];
            bson_append_utf8(&missing, array_key(missing_count++, key), -1, schema->required[i], -1);
        }
    }
    if (missing_count > 0 && rule_open_specified(sink, schema, "required", NULL, &rule)) {
        BSON_APPEND_ARRAY(&rule, "missingProperties", &missing);
        rule_close(sink, &rule);
    }
    bson_destroy(&missing);
}

static void check_property_count(const json_schema_t *schema, const bson_t *object, rule_sink_t *sink)
{
    static const json_schema_limit_t limits[] = {JSON_SCHEMA_MIN_PROPERTIES, JSON_SCHEMA_MAX_PROPERTIES};
    uint32_t count = bson_count_keys(object);
    for (size_t i = 0; i < 2; i++) {
        bool is_minimum = limits[i] == JSON_SCHEMA_MIN_PROPERTIES;
        int64_t limit = schema->limits[limits[i]];
        bson_t rule;
        if (has_limit(schema, limits[i]) && (is_minimum ? count < limit : count > limit) &&
            rule_open_specified(sink, schema, is_minimum ? "minProperties" : "maxProperties", NULL, &rule)) {
            BSON_APPEND_UTF8(&rule, "reason", "specified number of properties was not satisfied");
            BSON_APPEND_INT32(&rule, "numberOfProperties", (int32_t)count);
            rule_close(sink, &rule);
        }
    }
}

/* One dependency of an object holding its property: the names it lacks, or
 * the dependency schema's rules. */
static bool check_dependency(const json_schema_dependency_t *dependency, const bson_value_t *value,
                             const bson_t *object, const rule_sink_t *sink, bson_t *entry)
{
    bson_t missing = BSON_INITIALIZER, child_rules = BSON_INITIALIZER;
    bool satisfied;
    BSON_APPEND_UTF8(entry, "conditionalProperty", dependency->property);
    if (dependency->schema != NULL) {
        satisfied = check_child(dependency->schema, value, sink, &child_rules);
        BSON_APPEND_ARRAY(entry, "details", &child_rules);
    } else {
        bson_t names;
        bson_iter_t name;
        uint32_t missing_count = 0;
        json_schema_view(dependency->names, dependency->names_length, &names);
        bson_iter_init(&name, &names);
        while (bson_iter_next(&name)) {
            char key[16];
            if (!bson_has_field(object, bson_iter_utf8(&name, NULL))) {
                bson_append_utf8(&missing, array_key(missing_count++, key), -1, bson_iter_utf8(&name, NULL), -1);
            }
        }
        satisfied = missing_count == 0;
        BSON_APPEND_ARRAY(entry, "missingProperties", &missing);
    }
    bson_destroy(&missing);
    bson_destroy(&child_rules);
    return satisfied;
}

static void check_dependencies(const json_schema_t *schema, const bson_value_t *value, const bson_t *object,
                               rule_sink_t *sink)
{
    bson_t failed = BSON_INITIALIZER, rule;
    uint32_t failed_count = 0;
    for (size_t i = 0; i < schema->dependency_count; i++) {
        const json_schema_dependency_t *dependency = &schema->dependencies[i];
        bson_t entry = BSON_INITIALIZER;
        if (bson_has_field(object, dependency->property) &&
            !check_dependency(dependency, value, object, sink, &entry)) {
            char key[16];
            bson_append_document(&failed, array_key(failed_count++, key), -1, &entry);
        }
        bson_destroy(&entry);
        if (verdict_known(sink, failed_count)) {
            break;
        }
    }
    bson_iter_t keyword;
    if (failed_count > 0 && rule_open(sink, "dependencies", &rule)) {
        /* title and description may stand among the dependencies; mongod repeats them. */
        if (json_schema_find_keyword(schema, "dependencies", &keyword)) {
            bson_t entries;
            const bson_value_t *entries_value = bson_iter_value(&keyword);
            aggregation_value_view_document(entries_value, &entries);
            json_schema_append_document_annotations(&entries, &rule);
        }
        BSON_APPEND_ARRAY(&rule, "failingDependencies", &failed);
        rule_close(sink, &rule);
    }
    bson_destroy(&failed);
}

static void check_object(json_schema_t *schema, const bson_value_t *value, rule_sink_t *sink)
{
    bson_t object;
    aggregation_value_view_document(value, &object);
    check_properties(schema, &object, sink);
    if (schema->has_additional_properties && !schema->additional_properties_allowed) {
        check_additional_properties(schema, &object, sink);
    }
    if (schema->pattern_property_count > 0) {
        check_pattern_properties(schema, &object, sink);
    }
    check_required(schema, &object, sink);
    check_property_count(schema, &object, sink);
    check_dependencies(schema, value, &object, sink);
}

/* --- equality and multiples ------------------------------------------------------- */



bool json_schema_values_equal(const bson_value_t *left, const bson_value_t *right)
{
    bool documents = left->value_type == BSON_TYPE_DOCUMENT && right->value_type == BSON_TYPE_DOCUMENT;
    bool arrays = left->value_type == BSON_TYPE_ARRAY && right->value_type == BSON_TYPE_ARRAY;
    if (!documents && !arrays) {
        return order_compare_values(left, right) == 0;
    }
    bson_t left_view, right_view;
    bson_iter_t left_field, right_field;
    aggregation_value_view_document(left, &left_view);
    aggregation_value_view_document(right, &right_view);
    if (bson_count_keys(&left_view) != bson_count_keys(&right_view)) {
        return false;
    }
    bson_iter_init(&left_field, &left_view);
    bson_iter_init(&right_field, &right_view);
    while (bson_iter_next(&left_field)) {
        /* An array's elements pair in order; an object's fields by name. */
        bool found = arrays ? bson_iter_next(&right_field)
                            : bson_iter_init_find(&right_field, &right_view, bson_iter_key(&left_field));
        if (!found || !json_schema_values_equal(bson_iter_value(&left_field), bson_iter_value(&right_field))) {
            return false;
        }
    }
    return true;
}

/* A finite number as decimal digits times 10^exponent, with neither leading nor
 * trailing zeros (zero: no digits). */
typedef struct decimal_number {
    char digits[64];
    size_t length;
    int64_t exponent;
    bool finite;
} decimal_number_t;

/* From text such as "12.5E-3", "0.001" or "123". */
static void decimal_parse(const char *text, decimal_number_t *out)
{
    memset(out, 0, sizeof *out);
    out->finite = true;
    int64_t fraction_digits = 0;
    bool in_fraction = false;
    const char *cursor = text;
    if (*cursor == '-' || *cursor == '+') {
        cursor++;
    }
    if (!isdigit((unsigned char)*cursor) && *cursor != '.') {
        out->finite = false; /* NaN, Infinity */
        return;
    }
    for (; *cursor != '\0' && *cursor != 'E' && *cursor != 'e'; cursor++) {
        if (*cursor == '.') {
            in_fraction = true;
            continue;
        }
        fraction_digits += in_fraction;
        if ((out->length > 0 || *cursor != '0') && out->length < sizeof out->digits - 1) {
            out->digits[out->length++] = *cursor;
        }
    }
    int64_t written_exponent = (*cursor == 'E' || *cursor == 'e') ? strtoll(cursor + 1, NULL, 10) : 0;
    out->exponent = written_exponent - fraction_digits;
    while (out->length > 0 && out->digits[out->length - 1] == '0') {
        out->length--;
        out->exponent++;
    }
    out->digits[out->length] = '\0';
}

/* As mongod's Decimal128 of the value: doubles to 15 significant digits. */
static void decimal_from_value(const bson_value_t *value, decimal_number_t *out)
{
    char text[BSON_DECIMAL128_STRING + 8];
    switch (value->value_type) {
    case BSON_TYPE_INT32:
        snprintf(text, sizeof text, "%d", value->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        snprintf(text, sizeof text, "%lld", (long long)value->value.v_int64);
        break;
    case BSON_TYPE_DOUBLE:
        snprintf(text, sizeof text, "%.14e", value->value.v_double);
        break;
    default:
        bson_decimal128_to_string(&value->value.v_decimal128, text);
        break;
    }
    decimal_parse(text, out);
}

/* Up to 34 digits: decimal128's whole precision fits below 2^113. */
typedef unsigned __int128 wide_t;

bool json_schema_is_multiple_of(const bson_value_t *value, const bson_value_t *divisor)
{
    decimal_number_t number, step;
    decimal_from_value(value, &number);
    decimal_from_value(divisor, &step);
    if (!number.finite) {
        return false;
    }
    if (number.length == 0) {
        return true; /* zero */
    }
    if (!step.finite || step.length == 0) {
        return false; /* x mod Infinity is x */
    }
    if (number.exponent < step.exponent) {
        return false; /* number has a digit finer than step's last one */
    }
    /* number's digits times 10^(its exponent - step's), modulo step's digits. */
    wide_t modulus = 0, remainder = 0;
    for (size_t i = 0; i < step.length; i++) {
        modulus = modulus * 10 + (wide_t)(step.digits[i] - '0');
    }
    for (size_t i = 0; i < number.length; i++) {
        remainder = (remainder * 10 + (wide_t)(number.digits[i] - '0')) % modulus;
    }
    for (int64_t shift = number.exponent - step.exponent; shift > 0 && remainder != 0; shift--) {
        remainder = remainder * 10 % modulus;
    }
    return remainder == 0;
}

/* A value with every embedded object's fields in sorted order, so that two
 * values equal whatever their field order compare equal. */
static void append_canonical(bson_t *out, const char *key, const bson_value_t *value)
{
    bool is_document = value->value_type == BSON_TYPE_DOCUMENT;
    if (!is_document && value->value_type != BSON_TYPE_ARRAY) {
        bson_append_value(out, key, -1, value);
        return;
    }
    bson_t view, child;
    bson_iter_t field;
    aggregation_value_view_document(value, &view);
    size_t count = bson_count_keys(&view), i = 0;
    const char **names = bson_malloc((count + 1) * sizeof *names);
    bson_iter_init(&field, &view);
    while (bson_iter_next(&field)) {
        names[i++] = bson_iter_key(&field);
    }
    if (is_document) {
        qsort(names, count, sizeof *names, json_schema_compare_names);
        bson_append_document_begin(out, key, -1, &child);
    } else {
        bson_append_array_begin(out, key, -1, &child);
    }
    for (i = 0; i < count; i++) {
        bson_iter_init_find(&field, &view, names[i]);
        append_canonical(&child, names[i], bson_iter_value(&field));
    }
    if (is_document) {
        bson_append_document_end(out, &child);
    } else {
        bson_append_array_end(out, &child);
    }
    bson_free(names);
}

typedef struct ranked_value {
    bson_value_t value; /* points into the canonical copy */
    uint32_t position;
} ranked_value_t;

static int compare_ranked(const void *left, const void *right)
{
    const ranked_value_t *a = left, *b = right;
    int order = order_compare_values(&a->value, &b->value);
    return order != 0 ? order : (a->position > b->position) - (a->position < b->position);
}

int64_t json_schema_first_duplicate(const bson_t *array)
{
    bson_t canonical = BSON_INITIALIZER;
    bson_iter_t item;
    uint32_t count = 0;
    bson_iter_init(&item, array);
    while (bson_iter_next(&item)) {
        char key[16];
        append_canonical(&canonical, array_key(count++, key), bson_iter_value(&item));
    }
    ranked_value_t *ranked = bson_malloc((count + 1) * sizeof *ranked);
    bson_iter_init(&item, &canonical);
    for (uint32_t i = 0; bson_iter_next(&item); i++) {
        ranked[i] = (ranked_value_t){.value = *bson_iter_value(&item), .position = i};
    }
    qsort(ranked, count, sizeof *ranked, compare_ranked);
    /* Within a run of equal values the later positions repeat an earlier one. */
    int64_t first = -1;
    for (uint32_t i = 1; i < count; i++) {
        if (order_compare_values(&ranked[i - 1].value, &ranked[i].value) == 0 &&
            (first < 0 || ranked[i].position < first)) {
            first = ranked[i].position;
        }
    }
    bson_free(ranked);
    bson_destroy(&canonical);
    return first;
}

/* --- the node --------------------------------------------------------------------- */

/* Every keyword of schema on value, in the order mongod's parser lists them.
 * With one type named, a value of another type fails on the type alone: the
 * keywords of its kind are not asked (mongod compiles them away). */
static void check_value(json_schema_t *schema, const bson_value_t *value, rule_sink_t *sink)
{
    bool type_matches = schema->type_keyword == NULL || (schema->types & json_schema_type_bit(value->value_type)) != 0;
    if (type_matches || !schema->single_type) {
        switch (value->value_type) {
        case BSON_TYPE_UTF8:
            check_string(schema, value, sink);
            break;
        case BSON_TYPE_INT32:
        case BSON_TYPE_INT64:
        case BSON_TYPE_DOUBLE:
        case BSON_TYPE_DECIMAL128:
            check_number(schema, value, sink);
            break;
        case BSON_TYPE_ARRAY:
            check_array(schema, value, sink);
            break;
        case BSON_TYPE_DOCUMENT:
            check_object(schema, value, sink);
            break;
        default:
            break;
        }
    }
    if (sink->rules == NULL && sink->count > 0) {
        return;
    }
    check_logic(schema, value, sink);
    if (!type_matches) {
        add_value_rule(sink, schema, schema->type_keyword, NULL, "type did not match", value, true);
    }
}

bool json_schema_matches(json_schema_t *schema, const bson_t *document, bson_t *out_rules_not_satisfied)
{
    if (json_schema_rejects_every_document(schema)) {
        return false;
    }
    bson_value_t value = {.value_type = BSON_TYPE_DOCUMENT};
    value.value.v_doc.data = (uint8_t *)bson_get_data(document);
    value.value.v_doc.data_len = document->len;
    rule_sink_t sink = {.rules = out_rules_not_satisfied};
    check_value(schema, &value, &sink);
    return sink.count == 0;
}
