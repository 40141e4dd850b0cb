/* Unit tests for query/validator.h: whether a document satisfies a
 * collection's validator, the errInfo.details mongod 6.0 writes when it does
 * not, and the validators refused at compile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include <stdio.h>
#include <string.h>

#include "query/validator.h"

/* Checks document against validator: expected_details NULL means valid. */
static void expect_validation(const char *validator_json, const char *document_json, const char *expected_details)
{
    bson_t *filter = support_json(validator_json);
    bson_t *document = support_json(document_json);
    bson_error_t error;
    bson_t details;
    bool valid;
    validator_t *validator = validator_compile(filter, NULL, &error);
    if (validator == NULL) {
        fail_msg("%s: %s", validator_json, error.message);
    }
    assert_true(validator_check(validator, document, &valid, &details, &error));
    if (expected_details == NULL) {
        if (!valid) {
            fail_msg("%s refused %s", validator_json, document_json);
        }
    } else {
        if (valid) {
            fail_msg("%s accepted %s", validator_json, document_json);
        }
        bson_t *expected = support_json(expected_details);
        char *got = bson_as_relaxed_extended_json(&details, NULL);
        char *want = bson_as_relaxed_extended_json(expected, NULL);
        assert_string_equal(got, want);
        bson_free(got);
        bson_free(want);
        bson_destroy(expected);
        bson_destroy(&details);
    }
    validator_destroy(validator);
    bson_destroy(filter);
    bson_destroy(document);
}

static void expect_refusal(const char *validator_json, uint32_t code, const char *message_part)
{
    bson_t *filter = support_json(validator_json);
    bson_error_t error;
    assert_null(validator_compile(filter, NULL, &error));
    assert_int_equal(error.code, code);
    if (strstr(error.message, message_part) == NULL) {
        fail_msg("%s: '%s' lacks '%s'", validator_json, error.message, message_part);
    }
    bson_destroy(filter);
}

static void test_valid_documents(void **state)
{
    (void)state;
    expect_validation("{'a': {'%gte': 0}, 'b': 'x'}", "{'a': 3, 'b': 'x'}", NULL);
    expect_validation("{'%or': [{'a': 1}, {'b': 1}]}", "{'b': 1}", NULL);
    expect_validation("{'%expr': {'%lt': ['%a', '%b']}}", "{'a': 1, 'b': 2}", NULL);
    expect_validation("{}", "{'anything': true}", NULL);
}

static void test_one_clause_is_described_alone(void **state)
{
    (void)state;
    expect_validation("{'a': {'%gt': 5}}", "{'a': 3}",
                 "{'operatorName': '$gt', 'specifiedAs': {'a': {'%gt': 5}}, 'reason': 'comparison failed', "
                 "'consideredValue': 3}");
    expect_validation("{'a': 5}", "{'b': 1}",
                 "{'operatorName': '$eq', 'specifiedAs': {'a': 5}, 'reason': 'field was missing'}");
    expect_validation("{'a': {'%type': 'string'}}", "{'a': 1.5}",
                 "{'operatorName': '$type', 'specifiedAs': {'a': {'%type': 'string'}}, "
                 "'reason': 'type did not match', 'consideredValue': 1.5, 'consideredType': 'double'}");
    expect_validation("{'%expr': {'%eq': ['%a', 1]}}", "{'a': 2}",
                 "{'operatorName': '$expr', 'specifiedAs': {'%expr': {'%eq': ['%a', 1]}}, "
                 "'reason': 'expression did not match'}");
    /* $regex with $options is one operator. */
    expect_validation("{'s': {'%regex': '^a', '%options': 'i'}}", "{'s': 'b'}",
                 "{'operatorName': '$regex', 'specifiedAs': {'s': {'%regex': '^a', '%options': 'i'}}}");
}

static void test_several_clauses_are_an_implicit_and(void **state)
{
    (void)state;
    /* Two operators on one path are two clauses, as mongod parses them. */
    expect_validation("{'a': {'%gte': 0, '%lt': 10}, 'b': {'%exists': true}}", "{'a': 12, 'b': 1}",
                 "{'operatorName': '$and', 'clausesNotSatisfied': [{'index': 1, 'details': {'operatorName': '$lt', "
                 "'specifiedAs': {'a': {'%lt': 10}}, 'reason': 'comparison failed', 'consideredValue': 12}}]}");
    expect_validation("{'%or': [{'a': 1}, {'b': 2}]}", "{'a': 2}",
                 "{'operatorName': '$or', 'clausesNotSatisfied': ["
                 "{'index': 0, 'details': {'operatorName': '$eq', 'specifiedAs': {'a': 1}, "
                 "'reason': 'comparison failed', 'consideredValue': 2}}, "
                 "{'index': 1, 'details': {'operatorName': '$eq', 'specifiedAs': {'b': 2}, "
                 "'reason': 'field was missing'}}]}");
    expect_validation("{'%nor': [{'a': 1}, {'b': 2}]}", "{'a': 1}",
                 "{'operatorName': '$nor', 'clausesSatisfied': [{'index': 0, 'details': {'operatorName': '$eq', "
                 "'specifiedAs': {'a': 1}}}]}");
}

/* The $jsonSchema subset: each keyword on the value it applies to, and
 * schemaRulesNotSatisfied as mongod writes it. */
static void test_json_schema(void **state)
{
    (void)state;
    const char *schema = "{'%jsonSchema': {'required': ['name', 'total'], 'properties': {"
                         "'name': {'bsonType': 'string', 'pattern': '^[A-Z]'}, "
                         "'total': {'bsonType': 'number', 'minimum': 0, 'maximum': 100, 'exclusiveMaximum': true}, "
                         "'status': {'enum': ['open', 'closed']}, "
                         "'address': {'bsonType': 'object', 'required': ['city'], "
                         "'properties': {'city': {'bsonType': 'string'}}}}}}";
    expect_validation(schema, "{'name': 'Ann', 'total': 5, 'status': 'open', 'address': {'city': 'Oslo'}}", NULL);
    expect_validation(schema, "{'name': 'Ann', 'total': 99.5}", NULL);
    expect_validation(schema, "{'total': 5}",
                      "{'operatorName': '$jsonSchema', 'schemaRulesNotSatisfied': [{'operatorName': 'required', "
                      "'specifiedAs': {'required': ['name', 'total']}, 'missingProperties': ['name']}]}");
    expect_validation(schema, "{'name': 'ann', 'total': 100, 'status': 'lost', 'address': {'city': 3}}",
                      "{'operatorName': '$jsonSchema', 'schemaRulesNotSatisfied': [{'operatorName': 'properties', "
                      "'propertiesNotSatisfied': ["
                      "{'propertyName': 'name', 'details': [{'operatorName': 'pattern', 'specifiedAs': "
                      "{'pattern': '^[A-Z]'}, 'reason': 'regular expression did not match', 'consideredValue': "
                      "'ann'}]}, "
                      "{'propertyName': 'total', 'details': [{'operatorName': 'maximum', 'specifiedAs': "
                      "{'maximum': 100, 'exclusiveMaximum': true}, 'reason': 'comparison failed', "
                      "'consideredValue': 100}]}, "
                      "{'propertyName': 'status', 'details': [{'operatorName': 'enum', 'specifiedAs': "
                      "{'enum': ['open', 'closed']}, 'reason': 'value was not found in enum', "
                      "'consideredValue': 'lost'}]}, "
                      "{'propertyName': 'address', 'details': [{'operatorName': 'properties', "
                      "'propertiesNotSatisfied': [{'propertyName': 'city', 'details': [{'operatorName': "
                      "'bsonType', 'specifiedAs': {'bsonType': 'string'}, 'reason': 'type did not match', "
                      "'consideredValue': 3, 'consideredType': 'int'}]}]}]}]}]}");
    /* additionalProperties: false counts _id unless listed, as on mongod. */
    expect_validation("{'%jsonSchema': {'properties': {'a': {}}, 'additionalProperties': false}}",
                      "{'_id': 1, 'a': 1, 'b': 2}",
                      "{'operatorName': '$jsonSchema', 'schemaRulesNotSatisfied': [{'operatorName': "
                      "'additionalProperties', 'specifiedAs': {'additionalProperties': false}, "
                      "'additionalProperties': ['_id', 'b']}]}");
    /* The schema's title and description stand beside its rules. */
    expect_validation("{'%jsonSchema': {'title': 'Orders', 'description': 'one order', 'required': ['a']}}", "{}",
                      "{'operatorName': '$jsonSchema', 'title': 'Orders', 'description': 'one order', "
                      "'schemaRulesNotSatisfied': [{'operatorName': 'required', 'specifiedAs': {'required': ['a']}, "
                      "'missingProperties': ['a']}]}");
    /* A top-level type without objects: mongod's "always false". */
    expect_validation("{'%jsonSchema': {'bsonType': 'array'}}", "{'a': 1}",
                      "{'operatorName': '$jsonSchema', 'specifiedAs': {'%jsonSchema': {'bsonType': 'array'}}, "
                      "'reason': 'expression always evaluates to false'}");
    /* Inside $or and $nor, as any clause. */
    expect_validation("{'%or': [{'%jsonSchema': {'required': ['a']}}, {'b': 1}]}", "{'c': 1}",
                      "{'operatorName': '$or', 'clausesNotSatisfied': [{'index': 0, 'details': {'operatorName': "
                      "'$jsonSchema', 'schemaRulesNotSatisfied': [{'operatorName': 'required', 'specifiedAs': "
                      "{'required': ['a']}, 'missingProperties': ['a']}]}}, {'index': 1, 'details': "
                      "{'operatorName': '$eq', 'specifiedAs': {'b': 1}, 'reason': 'field was missing'}}]}");
    expect_validation("{'%nor': [{'%jsonSchema': {'required': ['a']}}]}", "{'a': 1}",
                      "{'operatorName': '$nor', 'clausesSatisfied': [{'index': 0, 'details': {'operatorName': "
                      "'$jsonSchema', 'reason': 'schema matched'}}]}");
    /* Beside other clauses, the schema is one clause of the implicit $and. */
    expect_validation("{'%jsonSchema': {'required': ['a']}, 'b': {'%gt': 1}}", "{'a': 1, 'b': 2}", NULL);
    expect_validation("{'%jsonSchema': {'required': ['a']}, 'b': {'%gt': 1}}", "{'b': 2}",
                      "{'operatorName': '$and', 'clausesNotSatisfied': [{'index': 0, 'details': {'operatorName': "
                      "'$jsonSchema', 'schemaRulesNotSatisfied': [{'operatorName': 'required', 'specifiedAs': "
                      "{'required': ['a']}, 'missingProperties': ['a']}]}}]}");
}

static void test_refused_validators(void **state)
{
    (void)state;
    expect_refusal("{'%jsonSchema': 1}", 14, "$jsonSchema must be an object");
    expect_refusal("{'%jsonSchema': {'encrypt': {}}}", 115, "'encrypt'");
    expect_refusal("{'%jsonSchema': {'bogus': 1}}", 9, "Unknown $jsonSchema keyword: bogus");
    expect_refusal("{'%jsonSchema': {'bsonType': 'text'}}", 2, "Unknown type name alias: text");
    expect_refusal("{'%jsonSchema': {'required': 'a'}}", 14, "'required' must be an array");
    expect_refusal("{'%or': [{'%jsonSchema': {'minLength': -1}}]}", 9, "Expected a positive number");
    expect_refusal("{'a': {'%bogus': 1}}", 2, "$bogus");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_documents),
        cmocka_unit_test(test_one_clause_is_described_alone),
        cmocka_unit_test(test_several_clauses_are_an_implicit_and),
        cmocka_unit_test(test_json_schema),
        cmocka_unit_test(test_refused_validators),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
