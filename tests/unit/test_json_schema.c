/* Unit tests for query/json_schema.h: each keyword's verdict on the values of
 * its kind, the schemaRulesNotSatisfied entries mongod 6.0 writes (in its
 * parser's order, with its field names and reasons), and the schemas mongod's
 * parser refuses, with its codes and messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include <stdio.h>
#include <string.h>

#include "query/json_schema.h"

/* Checks document against schema: expected_rules NULL means it is valid,
 * else the JSON of the array schemaRulesNotSatisfied must equal. */
static void expect_rules(const char *schema_json, const char *document_json, const char *expected_rules)
{
    bson_t *spec = support_json(schema_json);
    bson_t *document = support_json(document_json);
    bson_error_t error;
    json_schema_t *schema = json_schema_compile(spec, &error);
    if (schema == NULL) {
        fail_msg("%s: %s", schema_json, error.message);
    }
    bson_t rules = BSON_INITIALIZER;
    bool valid = json_schema_matches(schema, document, &rules);
    /* The verdict without details agrees with the one with them. */
    assert_int_equal(valid, json_schema_matches(schema, document, NULL));
    if (expected_rules == NULL && !valid) {
        char *got = bson_as_relaxed_extended_json(&rules, NULL);
        fail_msg("%s refused %s: %s", schema_json, document_json, got);
        bson_free(got);
    }
    if (expected_rules != NULL) {
        if (valid) {
            fail_msg("%s accepted %s", schema_json, document_json);
        }
        bson_t *wrapped_expected = support_json(expected_rules);
        bson_t wrapped_got = BSON_INITIALIZER;
        BSON_APPEND_ARRAY(&wrapped_got, "rules", &rules);
        char *got = bson_as_relaxed_extended_json(&wrapped_got, NULL);
        char *want = bson_as_relaxed_extended_json(wrapped_expected, NULL);
        assert_string_equal(got, want);
        bson_free(got);
        bson_free(want);
        bson_destroy(&wrapped_got);
        bson_destroy(wrapped_expected);
    }
    bson_destroy(&rules);
    json_schema_destroy(schema);
    bson_destroy(spec);
    bson_destroy(document);
}

static void expect_refusal(const char *schema_json, uint32_t code, const char *message)
{
    bson_t *spec = support_json(schema_json);
    bson_error_t error;
    json_schema_t *schema = json_schema_compile(spec, &error);
    if (schema != NULL) {
        fail_msg("%s compiled", schema_json);
    }
    if (error.code != code || strstr(error.message, message) == NULL) {
        fail_msg("%s: %u '%s', expected %u '%s'", schema_json, error.code, error.message, code, message);
    }
    bson_destroy(spec);
}

static void test_strings(void **state)
{
    (void)state;
    const char *schema = "{'properties': {'s': {'minLength': 2, 'maxLength': 4, 'pattern': '^a'}}}";
    expect_rules(schema, "{'s': 'abc'}", NULL);
    expect_rules(schema, "{'s': 5}", NULL); /* string keywords pass other kinds */
    expect_rules(schema, "{}", NULL);
    /* One code point, two bytes: too short, as mongod counts. */
    expect_rules(schema, "{'s': '\xc3\xa9'}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 's', "
                 "'details': [{'operatorName': 'pattern', 'specifiedAs': {'pattern': '^a'}, 'reason': "
                 "'regular expression did not match', 'consideredValue': '\xc3\xa9'}, {'operatorName': "
                 "'minLength', 'specifiedAs': {'minLength': 2}, 'reason': 'specified string length was not "
                 "satisfied', 'consideredValue': '\xc3\xa9'}]}]}]}");
    expect_rules(schema, "{'s': 'abcde'}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 's', "
                 "'details': [{'operatorName': 'maxLength', 'specifiedAs': {'maxLength': 4}, 'reason': "
                 "'specified string length was not satisfied', 'consideredValue': 'abcde'}]}]}]}");
}

static void test_numbers(void **state)
{
    (void)state;
    const char *tenths = "{'properties': {'n': {'multipleOf': 0.1}}}";
    expect_rules(tenths, "{'n': 0.3}", NULL); /* 15 significant digits, as Decimal128 of a double */
    expect_rules(tenths, "{'n': 3}", NULL);
    expect_rules(tenths, "{'n': {'$numberDecimal': '0.30'}}", NULL);
    expect_rules(tenths, "{'n': 0}", NULL);
    expect_rules(tenths, "{'n': 0.35}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'n', "
                 "'details': [{'operatorName': 'multipleOf', 'specifiedAs': {'multipleOf': 0.1}, 'reason': "
                 "'considered value is not a multiple of the specified value', 'consideredValue': 0.35}]}]}]}");
    const char *threes = "{'properties': {'n': {'multipleOf': 3}}}";
    expect_rules(threes, "{'n': -9}", NULL);
    expect_rules(threes, "{'n': 9.0}", NULL);
    expect_rules(threes, "{'n': {'$numberLong': '9000000000000000000'}}", NULL);
    expect_rules(threes, "{'n': 1e300}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'n', "
                 "'details': [{'operatorName': 'multipleOf', 'specifiedAs': {'multipleOf': 3}, 'reason': "
                 "'considered value is not a multiple of the specified value', 'consideredValue': 1e+300}]}]}]}");
    expect_rules(threes, "{'n': {'$numberDouble': 'Infinity'}}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'n', "
                 "'details': [{'operatorName': 'multipleOf', 'specifiedAs': {'multipleOf': 3}, 'reason': "
                 "'considered value is not a multiple of the specified value', 'consideredValue': "
                 "{'$numberDouble': 'Infinity'}}]}]}]}");
    /* An exclusive bound names its flag in specifiedAs. */
    expect_rules("{'properties': {'n': {'maximum': 10, 'exclusiveMaximum': true}}}", "{'n': 10}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'n', "
                 "'details': [{'operatorName': 'maximum', 'specifiedAs': {'maximum': 10, 'exclusiveMaximum': true}, "
                 "'reason': 'comparison failed', 'consideredValue': 10}]}]}]}");
    /* NaN satisfies no bound. */
    expect_rules("{'properties': {'n': {'minimum': 0}}}", "{'n': {'$numberDouble': 'NaN'}}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'n', "
                 "'details': [{'operatorName': 'minimum', 'specifiedAs': {'minimum': 0}, 'reason': "
                 "'comparison failed', 'consideredValue': {'$numberDouble': 'NaN'}}]}]}]}");
    /* The parser's order: number keywords, then enum, the type last. */
    expect_rules("{'properties': {'n': {'bsonType': 'int', 'enum': [1, 2], 'minimum': 5}}}", "{'n': 3}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'n', "
                 "'details': [{'operatorName': 'minimum', 'specifiedAs': {'minimum': 5}, 'reason': "
                 "'comparison failed', 'consideredValue': 3}, {'operatorName': 'enum', 'specifiedAs': {'enum': "
                 "[1, 2]}, 'reason': 'value was not found in enum', 'consideredValue': 3}]}]}]}");
}

static void test_arrays(void **state)
{
    (void)state;
    const char *schema = "{'properties': {'a': {'minItems': 2, 'maxItems': 3, 'uniqueItems': true, "
                         "'items': {'bsonType': 'int'}}}}";
    expect_rules(schema, "{'a': [1, 2]}", NULL);
    expect_rules(schema, "{'a': 'not an array'}", NULL);
    expect_rules(schema, "{'a': [1]}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'a', "
                 "'details': [{'operatorName': 'minItems', 'specifiedAs': {'minItems': 2}, 'reason': 'array did "
                 "not match specified length', 'consideredValue': [1], 'numberOfItems': 1}]}]}]}");
    expect_rules(schema, "{'a': [1, 1, 'x', 4]}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'a', "
                 "'details': [{'operatorName': 'maxItems', 'specifiedAs': {'maxItems': 3}, 'reason': 'array did "
                 "not match specified length', 'consideredValue': [1, 1, 'x', 4], 'numberOfItems': 4}, "
                 "{'operatorName': 'uniqueItems', 'specifiedAs': {'uniqueItems': true}, 'reason': 'found a "
                 "duplicate item', 'consideredValue': [1, 1, 'x', 4], 'duplicatedValue': 1}, {'operatorName': "
                 "'items', 'reason': 'At least one item did not match the sub-schema', 'itemIndex': 2, "
                 "'details': [{'operatorName': 'bsonType', 'specifiedAs': {'bsonType': 'int'}, 'reason': 'type "
                 "did not match', 'consideredValue': 'x', 'consideredType': 'string'}]}]}]}]}");
    /* Objects that differ only in field order are one item twice. */
    expect_rules("{'properties': {'a': {'uniqueItems': true}}}", "{'a': [{'x': 1, 'y': 2}, {'y': 2, 'x': 1}]}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'a', "
                 "'details': [{'operatorName': 'uniqueItems', 'specifiedAs': {'uniqueItems': true}, 'reason': "
                 "'found a duplicate item', 'consideredValue': [{'x': 1, 'y': 2}, {'y': 2, 'x': 1}], "
                 "'duplicatedValue': {'y': 2, 'x': 1}}]}]}]}");
    const char *tuple = "{'properties': {'p': {'items': [{'bsonType': 'string'}, {'bsonType': 'int'}], "
                        "'additionalItems': false}}}";
    expect_rules(tuple, "{'p': ['a', 1]}", NULL);
    expect_rules(tuple, "{'p': ['a']}", NULL);
    expect_rules(tuple, "{'p': [1, 1, true]}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'p', "
                 "'details': [{'operatorName': 'items', 'details': [{'itemIndex': 0, 'details': [{'operatorName': "
                 "'bsonType', 'specifiedAs': {'bsonType': 'string'}, 'reason': 'type did not match', "
                 "'consideredValue': 1, 'consideredType': 'int'}]}]}, {'operatorName': 'additionalItems', "
                 "'specifiedAs': {'additionalItems': false}, 'reason': 'found additional items', "
                 "'additionalItems': [true]}]}]}]}");
    expect_rules("{'properties': {'p': {'items': [{}], 'additionalItems': {'bsonType': 'int', 'title': 'ints'}}}}",
                 "{'p': ['x', 1, 'y']}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'p', "
                 "'details': [{'operatorName': 'additionalItems', 'title': 'ints', 'reason': 'At least one "
                 "additional item did not match the sub-schema', 'itemIndex': 2, 'details': [{'operatorName': "
                 "'bsonType', 'specifiedAs': {'bsonType': 'int'}, 'reason': 'type did not match', "
                 "'consideredValue': 'y', 'consideredType': 'string'}]}]}]}]}");
    /* additionalItems means nothing without items' list. */
    expect_rules("{'properties': {'p': {'items': {}, 'additionalItems': false}}}", "{'p': [1, 2]}", NULL);
}

static void test_objects(void **state)
{
    (void)state;
    /* missingProperties in sorted order, as mongod's set of names. */
    expect_rules("{'required': ['b', 'a', 'c']}", "{'c': 1}",
                 "{'rules': [{'operatorName': 'required', 'specifiedAs': {'required': ['b', 'a', 'c']}, "
                 "'missingProperties': ['a', 'b']}]}");
    expect_rules("{'minProperties': 3}", "{'_id': 1, 'a': 1}",
                 "{'rules': [{'operatorName': 'minProperties', 'specifiedAs': {'minProperties': 3}, 'reason': "
                 "'specified number of properties was not satisfied', 'numberOfProperties': 2}]}");
    expect_rules("{'properties': {'o': {'maxProperties': 1}}}", "{'o': {'x': 1, 'y': 2}}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'o', "
                 "'details': [{'operatorName': 'maxProperties', 'specifiedAs': {'maxProperties': 1}, 'reason': "
                 "'specified number of properties was not satisfied', 'numberOfProperties': 2}]}]}]}");
    /* A property's title and description stand beside its details. */
    expect_rules("{'properties': {'x': {'bsonType': 'int', 'title': 'X', 'description': 'an int'}}}", "{'x': 'no'}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'x', "
                 "'title': 'X', 'description': 'an int', 'details': [{'operatorName': 'bsonType', 'specifiedAs': "
                 "{'bsonType': 'int'}, 'reason': 'type did not match', 'consideredValue': 'no', "
                 "'consideredType': 'string'}]}]}]}");
    expect_rules("{'properties': {'_id': {}}, 'additionalProperties': {'bsonType': 'string', 'description': "
                 "'strings only'}}",
                 "{'_id': 1, 'a': 'x', 'b': 2, 'c': 3}",
                 "{'rules': [{'operatorName': 'additionalProperties', 'description': 'strings only', 'reason': "
                 "'at least one additional property did not match the subschema', 'failingProperty': 'b', "
                 "'details': [{'operatorName': 'bsonType', 'specifiedAs': {'bsonType': 'string'}, 'reason': "
                 "'type did not match', 'consideredValue': 2, 'consideredType': 'int'}]}]}");
    const char *patterns = "{'properties': {'_id': {}}, 'patternProperties': {'^n_': {'bsonType': 'number'}, "
                           "'^s_': {'bsonType': 'string'}}, 'additionalProperties': false}";
    expect_rules(patterns, "{'_id': 1, 'n_a': 1.5, 's_b': 'y'}", NULL);
    expect_rules(patterns, "{'_id': 1, 'n_a': 'x', 's_b': 'y', 'z': 1}",
                 "{'rules': [{'operatorName': 'additionalProperties', 'specifiedAs': {'additionalProperties': "
                 "false}, 'additionalProperties': ['z']}, {'operatorName': 'patternProperties', 'details': "
                 "[{'propertyName': 'n_a', 'regexMatched': '^n_', 'details': [{'operatorName': 'bsonType', "
                 "'specifiedAs': {'bsonType': 'number'}, 'reason': 'type did not match', 'consideredValue': "
                 "'x', 'consideredType': 'string'}]}]}]}");
    const char *dependencies = "{'dependencies': {'card': ['billing'], 'vip': {'required': ['level']}}}";
    expect_rules(dependencies, "{'billing': 1}", NULL);
    expect_rules(dependencies, "{'card': 1, 'billing': 2, 'vip': true, 'level': 3}", NULL);
    expect_rules(dependencies, "{'card': 1, 'vip': true}",
                 "{'rules': [{'operatorName': 'dependencies', 'failingDependencies': [{'conditionalProperty': "
                 "'card', 'missingProperties': ['billing']}, {'conditionalProperty': 'vip', 'details': "
                 "[{'operatorName': 'required', 'specifiedAs': {'required': ['level']}, 'missingProperties': "
                 "['level']}]}]}]}");
    /* The object keywords in the parser's order, whatever the written one. */
    expect_rules("{'required': ['a'], 'properties': {'b': {'bsonType': 'int'}}}", "{'b': 'x'}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'b', "
                 "'details': [{'operatorName': 'bsonType', 'specifiedAs': {'bsonType': 'int'}, 'reason': 'type "
                 "did not match', 'consideredValue': 'x', 'consideredType': 'string'}]}]}, {'operatorName': "
                 "'required', 'specifiedAs': {'required': ['a']}, 'missingProperties': ['a']}]}");
}

static void test_logic(void **state)
{
    (void)state;
    expect_rules("{'properties': {'n': {'allOf': [{'minimum': 0}, {'maximum': 10, 'title': 'small'}]}}}",
                 "{'n': 11}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'n', "
                 "'details': [{'operatorName': 'allOf', 'schemasNotSatisfied': [{'index': 1, 'title': 'small', "
                 "'details': [{'operatorName': 'maximum', 'specifiedAs': {'maximum': 10}, 'reason': 'comparison "
                 "failed', 'consideredValue': 11}]}]}]}]}]}");
    const char *any = "{'properties': {'v': {'anyOf': [{'bsonType': 'string'}, {'bsonType': 'int'}]}}}";
    expect_rules(any, "{'v': 3}", NULL);
    expect_rules(any, "{'v': 1.5}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'v', "
                 "'details': [{'operatorName': 'anyOf', 'schemasNotSatisfied': [{'index': 0, 'details': "
                 "[{'operatorName': 'bsonType', 'specifiedAs': {'bsonType': 'string'}, 'reason': 'type did not "
                 "match', 'consideredValue': 1.5, 'consideredType': 'double'}]}, {'index': 1, 'details': "
                 "[{'operatorName': 'bsonType', 'specifiedAs': {'bsonType': 'int'}, 'reason': 'type did not "
                 "match', 'consideredValue': 1.5, 'consideredType': 'double'}]}]}]}]}]}");
    const char *one = "{'properties': {'v': {'oneOf': [{'minimum': 0}, {'maximum': 10}]}}}";
    expect_rules(one, "{'v': 20}", NULL);
    expect_rules(one, "{'v': 5}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'v', "
                 "'details': [{'operatorName': 'oneOf', 'reason': 'more than one subschema matched', "
                 "'matchingSchemaIndexes': [0, 1]}]}]}]}");
    expect_rules("{'properties': {'v': {'oneOf': [{'bsonType': 'string'}, {'bsonType': 'bool'}]}}}", "{'v': 5}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'v', "
                 "'details': [{'operatorName': 'oneOf', 'schemasNotSatisfied': [{'index': 0, 'details': "
                 "[{'operatorName': 'bsonType', 'specifiedAs': {'bsonType': 'string'}, 'reason': 'type did not "
                 "match', 'consideredValue': 5, 'consideredType': 'int'}]}, {'index': 1, 'details': "
                 "[{'operatorName': 'bsonType', 'specifiedAs': {'bsonType': 'bool'}, 'reason': 'type did not "
                 "match', 'consideredValue': 5, 'consideredType': 'int'}]}]}]}]}]}");
    expect_rules("{'properties': {'v': {'not': {'bsonType': 'string'}}}}", "{'v': 'x'}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'v', "
                 "'details': [{'operatorName': 'not', 'reason': 'child expression matched'}]}]}]}");
    expect_rules("{'properties': {'v': {'not': {'bsonType': 'string'}}}}", "{'v': 1}", NULL);
    /* enum compares embedded objects whatever their field order. */
    expect_rules("{'properties': {'o': {'enum': [{'a': 1, 'b': 2}]}}}", "{'o': {'b': 2, 'a': 1.0}}", NULL);
    /* JSON Schema's own type names. */
    expect_rules("{'properties': {'v': {'type': 'number'}, 'w': {'type': ['string', 'null']}}}",
                 "{'v': 1.5, 'w': null}", NULL);
    expect_rules("{'properties': {'v': {'type': 'number'}, 'w': {'type': ['string', 'null']}}}", "{'v': '1', 'w': 2}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'v', "
                 "'details': [{'operatorName': 'type', 'specifiedAs': {'type': 'number'}, 'reason': 'type did not "
                 "match', 'consideredValue': '1', 'consideredType': 'string'}]}, {'propertyName': 'w', 'details': "
                 "[{'operatorName': 'type', 'specifiedAs': {'type': ['string', 'null']}, 'reason': 'type did not "
                 "match', 'consideredValue': 2, 'consideredType': 'int'}]}]}]}");
    /* A top-level type that excludes objects matches nothing. */
    expect_rules("{'bsonType': 'array'}", "{'a': 1}", "{'rules': []}");
}

/* One type named: a value of another type fails on the type alone. Several
 * named: each keyword still applies to the values of its kind. */
static void test_one_type_named(void **state)
{
    (void)state;
    const char *one = "{'properties': {'n': {'bsonType': 'int', 'minLength': 2, 'minimum': 5}}}";
    expect_rules(one, "{'n': 'a'}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'n', "
                 "'details': [{'operatorName': 'bsonType', 'specifiedAs': {'bsonType': 'int'}, 'reason': 'type "
                 "did not match', 'consideredValue': 'a', 'consideredType': 'string'}]}]}]}");
    expect_rules(one, "{'n': 3}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'n', "
                 "'details': [{'operatorName': 'minimum', 'specifiedAs': {'minimum': 5}, 'reason': 'comparison "
                 "failed', 'consideredValue': 3}]}]}]}");
    expect_rules("{'properties': {'n': {'bsonType': ['int', 'bool'], 'minLength': 2}}}", "{'n': 'a'}",
                 "{'rules': [{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'n', "
                 "'details': [{'operatorName': 'minLength', 'specifiedAs': {'minLength': 2}, 'reason': 'specified "
                 "string length was not satisfied', 'consideredValue': 'a'}, {'operatorName': 'bsonType', "
                 "'specifiedAs': {'bsonType': ['int', 'bool']}, 'reason': 'type did not match', "
                 "'consideredValue': 'a', 'consideredType': 'string'}]}]}]}");
    /* At the root, an enum without objects can match nothing. */
    expect_rules("{'enum': [1, 2]}", "{'a': 1}",
                 "{'rules': [{'operatorName': 'enum', 'specifiedAs': {'enum': [1, 2]}, 'reason': 'expression "
                 "always evaluates to false'}]}");
    expect_rules("{'enum': [{'a': 1}]}", "{'a': 1}", NULL);
}

/* uniqueItems over a large array sorts rather than compares every pair. */
static void test_unique_items_scale(void **state)
{
    (void)state;
    bson_t *spec = support_json("{'properties': {'a': {'uniqueItems': true}}}");
    bson_t document = BSON_INITIALIZER, array;
    bson_error_t error;
    json_schema_t *schema = json_schema_compile(spec, &error);
    assert_non_null(schema);
    BSON_APPEND_ARRAY_BEGIN(&document, "a", &array);
    for (uint32_t i = 0; i < 200000; i++) {
        char key[16];
        const char *name;
        bson_uint32_to_string(i, &name, key, sizeof key);
        bson_append_int64(&array, name, -1, i);
    }
    bson_append_array_end(&document, &array);
    assert_true(json_schema_matches(schema, &document, NULL));
    bson_reinit(&document);
    BSON_APPEND_ARRAY_BEGIN(&document, "a", &array);
    for (uint32_t i = 0; i < 200000; i++) {
        char key[16];
        const char *name;
        bson_uint32_to_string(i, &name, key, sizeof key);
        bson_append_double(&array, name, -1, i == 199999 ? 7.0 : (double)i); /* 7.0 repeats 7 */
    }
    bson_append_array_end(&document, &array);
    bson_t rules = BSON_INITIALIZER;
    assert_false(json_schema_matches(schema, &document, &rules));
    bson_iter_t duplicate;
    assert_true(bson_iter_init(&duplicate, &rules) &&
                bson_iter_find_descendant(&duplicate, "0.propertiesNotSatisfied.0.details.0.duplicatedValue",
                                          &duplicate));
    assert_true(BSON_ITER_HOLDS_DOUBLE(&duplicate) && bson_iter_double(&duplicate) == 7.0);
    bson_destroy(&rules);
    bson_destroy(&document);
    json_schema_destroy(schema);
    bson_destroy(spec);
}

/* A pattern with a NUL inside is refused as the matcher's $regex is. */
static void test_pattern_with_a_nul(void **state)
{
    (void)state;
    bson_t spec = BSON_INITIALIZER, properties, property;
    bson_error_t error;
    BSON_APPEND_DOCUMENT_BEGIN(&spec, "properties", &properties);
    BSON_APPEND_DOCUMENT_BEGIN(&properties, "a", &property);
    bson_append_utf8(&property, "pattern", -1, "a\0b", 3);
    bson_append_document_end(&properties, &property);
    bson_append_document_end(&spec, &properties);
    assert_null(json_schema_compile(&spec, &error));
    assert_int_equal(error.code, 2);
    assert_non_null(strstr(error.message, "embedded null byte"));
    bson_destroy(&spec);
}

static void test_refused_schemas(void **state)
{
    (void)state;
    expect_refusal("{'minLength': -1}", 9, "Expected a positive number in: minLength: -1");
    expect_refusal("{'maxItems': 'x'}", 9, "Expected a number in: maxItems: \"x\"");
    expect_refusal("{'minProperties': 1.5}", 9, "Expected an integer: minProperties: 1.5");
    expect_refusal("{'multipleOf': 0}", 9, "$jsonSchema keyword 'multipleOf' must have a positive value");
    expect_refusal("{'multipleOf': 'x'}", 14, "$jsonSchema keyword 'multipleOf' must be a number");
    expect_refusal("{'type': 'integer'}", 9, "$jsonSchema type 'integer' is not currently supported.");
    expect_refusal("{'type': 'int'}", 2, "Unknown type name alias: int");
    expect_refusal("{'type': 'string', 'bsonType': 'string'}", 9,
                   "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'");
    expect_refusal("{'bsonType': ['int', 'int']}", 9, "$jsonSchema keyword 'bsonType' has duplicate value: int");
    expect_refusal("{'bsonType': []}", 9, "$jsonSchema keyword 'bsonType' must name at least one type");
    expect_refusal("{'bsonType': 'text'}", 2, "Unknown type name alias: text");
    expect_refusal("{'allOf': []}", 2, "$jsonSchema keyword 'allOf' must be a non-empty array");
    expect_refusal("{'anyOf': [1]}", 14,
                   "$jsonSchema keyword 'anyOf' must be an array of objects, but found an element of type int");
    expect_refusal("{'oneOf': {}}", 14, "$jsonSchema keyword 'oneOf' must be an array");
    expect_refusal("{'not': []}", 14,
                   "$jsonSchema keyword 'not' must be an object, but found an element of type array");
    expect_refusal("{'enum': [1, 1.0]}", 9, "$jsonSchema keyword 'enum' array cannot contain duplicate values.");
    expect_refusal("{'enum': []}", 9, "$jsonSchema keyword 'enum' cannot be an empty array");
    expect_refusal("{'required': ['a', 'a']}", 9,
                   "$jsonSchema keyword 'required' array cannot contain duplicate values");
    expect_refusal("{'required': []}", 9, "$jsonSchema keyword 'required' cannot be an empty array");
    expect_refusal("{'required': 'a'}", 14,
                   "$jsonSchema keyword 'required' must be an array, but found an element of type string");
    expect_refusal("{'required': [1]}", 14,
                   "$jsonSchema keyword 'required' must be an array of strings, but found an element of type: int");
    expect_refusal("{'format': 'email'}", 9, "$jsonSchema keyword 'format' is not currently supported");
    expect_refusal("{'bogus': 1}", 9, "Unknown $jsonSchema keyword: bogus");
    expect_refusal("{'minimum': 1, 'minimum': 2}", 9, "Duplicate $jsonSchema keyword: minimum");
    expect_refusal("{'exclusiveMinimum': true}", 9,
                   "$jsonSchema keyword 'minimum' must be a present if exclusiveMinimum is present");
    expect_refusal("{'maximum': 1, 'exclusiveMaximum': 1}", 14,
                   "$jsonSchema keyword 'exclusiveMaximum' must be a boolean");
    expect_refusal("{'items': 1}", 14, "$jsonSchema keyword 'items' must be an array or an object, not int");
    expect_refusal("{'items': [1]}", 14,
                   "$jsonSchema keyword 'items' requires that each element of the array is an object, but found a int");
    expect_refusal("{'additionalItems': 1}", 14,
                   "$jsonSchema keyword 'additionalItems' must be either an object or a boolean, but got a int");
    expect_refusal("{'additionalProperties': 1}", 14,
                   "$jsonSchema keyword 'additionalProperties' must be an object or a boolean");
    expect_refusal("{'patternProperties': {'^a': 1}}", 14,
                   "$jsonSchema keyword 'patternProperties' has property '^a' which is not an object");
    expect_refusal("{'dependencies': {'a': []}}", 9,
                   "property 'a' in $jsonSchema keyword 'dependencies' cannot be an empty array");
    expect_refusal("{'dependencies': {'a': 1}}", 14,
                   "property 'a' in $jsonSchema keyword 'dependencies' must be either an object or an array");
    expect_refusal("{'dependencies': {'a': ['b', 'b']}}", 9,
                   "array 'a' in $jsonSchema keyword 'dependencies' contains duplicate element: b");
    expect_refusal("{'uniqueItems': 1}", 14, "$jsonSchema keyword 'uniqueItems' must be a boolean");
    expect_refusal("{'title': 1}", 14, "$jsonSchema keyword 'title' must be of type string");
    expect_refusal("{'encrypt': {}}", 115, "'encrypt'");
    expect_refusal("{'properties': {'a': {'pattern': '('}}}", 51091, "Regular expression is invalid");
    /* multipleOf's remainder refuses NaN and infinity where it applies; at the root it means nothing. */
    expect_refusal("{'properties': {'a': {'multipleOf': {'$numberDouble': 'NaN'}}}}", 2, "divisor cannot be NaN");
    expect_refusal("{'properties': {'a': {'multipleOf': {'$numberDouble': 'Infinity'}}}}", 2,
                   "divisor cannot be infinite");
    expect_refusal("{'multipleOf': {'$numberDouble': '-Infinity'}}", 9, "must have a positive value");
    expect_rules("{'multipleOf': {'$numberDouble': 'NaN'}, 'pattern': '('}", "{'a': 1}", NULL);
    expect_refusal("{'patternProperties': {'(': {}}}", 2, "Invalid regular expression: missing )");
    /* Errors in mongod's order: unknown keywords first, encryption before object keywords. */
    expect_refusal("{'encrypt': {}, 'bogus': 1}", 9, "Unknown $jsonSchema keyword: bogus");
    expect_refusal("{'encrypt': {}, 'required': 'x'}", 115, "'encrypt'");
    expect_refusal("{'required': ['a', 'a', 1]}", 9, "'required' array cannot contain duplicate values");
    expect_refusal("{'required': ['a', 1, 'a']}", 14, "must be an array of strings");
    expect_refusal("{'bsonType': ['zz', 'aa']}", 2, "Unknown type name alias: aa");
    expect_refusal("{'bsonType': ['int', 1, 'integer']}", 14, "'bsonType' array elements must be strings");
    /* A nested schema's error is the whole schema's. */
    expect_refusal("{'properties': {'a': {'items': {'minItems': -2}}}}", 9,
                   "Expected a positive number in: minItems: -2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strings), cmocka_unit_test(test_numbers), cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_objects), cmocka_unit_test(test_logic),   cmocka_unit_test(test_one_type_named),
        cmocka_unit_test(test_unique_items_scale), cmocka_unit_test(test_pattern_with_a_nul),
        cmocka_unit_test(test_refused_schemas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
