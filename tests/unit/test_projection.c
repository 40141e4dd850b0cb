/* Unit tests for src/query/projection: find projections, JSON in and JSON out (field
 * order is significant), parse errors with mongod's codes, covered-query facts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"

#include <string.h>

#include "query/projection.h"

static void expect_projection(const char *spec_json, const char *document_json,
                              const char *expected_json)
{
    bson_t *spec = support_json_single_quoted(spec_json);
    bson_t *document = support_json_single_quoted(document_json);
    bson_t *expected = support_json_single_quoted(expected_json);
    bson_error_t error;
    bson_t out;
    projection_t *projection = projection_compile(spec, &error);
    if (projection == NULL) {
        fail_msg("compile %s: %s", spec_json, error.message);
    }
    assert_true(projection_apply(projection, document, &out, &error));
    if (!bson_equal(&out, expected)) {
        char *actual_text = bson_as_relaxed_extended_json(&out, NULL);
        print_error("projection %s of %s\nexpected %s\n     got %s\n", spec_json, document_json,
                    expected_json, actual_text);
        bson_free(actual_text);
        fail();
    }
    bson_destroy(&out);
    projection_destroy(projection);
    bson_destroy(spec);
    bson_destroy(document);
    bson_destroy(expected);
}

static void expect_error(const char *spec_json, int code, const char *message)
{
    bson_t *spec = support_json_single_quoted(spec_json);
    bson_error_t error;
    projection_t *projection = projection_compile(spec, &error);
    if (projection != NULL) {
        fail_msg("compile %s succeeded, expected code %d", spec_json, code);
    }
    assert_int_equal(error.code, code);
    if (message != NULL) {
        assert_string_equal(error.message, message);
    }
    bson_destroy(spec);
}

static const char *const person =
    "{'_id': 1, 'name': 'ann', 'age': 30, 'address': {'city': 'oslo', 'zip': '0150'}, "
    "'tags': ['a', 'b', 'c', 'd']}";

static void test_empty(void **state)
{
    (void)state;
    expect_projection("{}", person, person);
    bson_t *document = support_json_single_quoted(person);
    bson_t out;
    bson_error_t error;
    projection_t *projection = projection_compile(NULL, &error);
    assert_true(projection_is_empty(projection));
    assert_false(projection_is_inclusion(projection));
    assert_true(projection_includes_id(projection));
    assert_true(projection_apply(projection, document, &out, &error));
    assert_true(bson_equal(&out, document));
    bson_destroy(&out);
    projection_destroy(projection);
    projection_destroy(NULL);
    bson_destroy(document);
}

static void test_inclusion(void **state)
{
    (void)state;
    expect_projection("{'name': 1}", person, "{'_id': 1, 'name': 'ann'}");
    /* The document's order, not the projection's. */
    expect_projection("{'age': 1, 'name': true}", person, "{'_id': 1, 'name': 'ann', 'age': 30}");
    expect_projection("{'name': 1, '_id': 0}", person, "{'name': 'ann'}");
    expect_projection("{'_id': 1}", person, "{'_id': 1}");
    /* Any non-zero number includes. */
    expect_projection("{'age': -1.5, 'missing': 1}", person, "{'_id': 1, 'age': 30}");
    expect_projection("{'address.city': 1}", person, "{'_id': 1, 'address': {'city': 'oslo'}}");
    expect_projection("{'address': {'zip': 1}}", person, "{'_id': 1, 'address': {'zip': '0150'}}");
    /* _id is not necessarily first: document order is kept. */
    expect_projection("{'a': 1}", "{'a': 1, '_id': 2, 'b': 3}", "{'a': 1, '_id': 2}");
    /* A dotted path through a non-document drops it, through a document keeps it. */
    expect_projection("{'a.b': 1}", "{'_id': 1, 'a': 5}", "{'_id': 1}");
    expect_projection("{'a.b': 1}", "{'_id': 1, 'a': {'c': 1}}", "{'_id': 1, 'a': {}}");
    /* Arrays of documents: each document projected, scalars dropped, nesting kept. */
    expect_projection("{'a.b': 1}",
                      "{'_id': 1, 'a': [{'b': 1, 'c': 2}, {'c': 3}, 7, [{'b': 4, 'd': 5}]]}",
                      "{'_id': 1, 'a': [{'b': 1}, {}, [{'b': 4}]]}");
    expect_projection("{'a.b.c': 1}", "{'_id': 1, 'a': {'b': [{'c': 1, 'd': 1}, {'d': 2}]}}",
                      "{'_id': 1, 'a': {'b': [{'c': 1}, {}]}}");
    /* _id sub-paths replace the default _id. */
    expect_projection("{'_id.a': 1}", "{'_id': {'a': 1, 'b': 2}, 'x': 1}", "{'_id': {'a': 1}}");
}

static void test_exclusion(void **state)
{
    (void)state;
    expect_projection("{'tags': 0, 'age': false}", person,
                      "{'_id': 1, 'name': 'ann', 'address': {'city': 'oslo', 'zip': '0150'}}");
    expect_projection("{'_id': 0}", "{'_id': 1, 'a': 2}", "{'a': 2}");
    expect_projection("{'_id': 0, 'a': 0}", "{'_id': 1, 'a': 2, 'b': 3}", "{'b': 3}");
    expect_projection("{'_id': 1, 'a': 0}", "{'_id': 1, 'a': 2, 'b': 3}", "{'_id': 1, 'b': 3}");
    expect_projection("{'address.zip': 0}", person,
                      "{'_id': 1, 'name': 'ann', 'age': 30, 'address': {'city': 'oslo'}, "
                      "'tags': ['a', 'b', 'c', 'd']}");
    /* Through arrays: documents lose the field, other members stay. */
    expect_projection("{'a.b': 0}", "{'_id': 1, 'a': [{'b': 1, 'c': 2}, 7, [{'b': 3}]]}",
                      "{'_id': 1, 'a': [{'c': 2}, 7, [{}]]}");
    expect_projection("{'a.b': 0}", "{'_id': 1, 'a': 5}", "{'_id': 1, 'a': 5}");
}

static void test_slice(void **state)
{
    (void)state;
    /* $slice alone is an exclusion-style projection: every other field stays, in place. */
    expect_projection("{'tags': {'$slice': 2}}", person,
                      "{'_id': 1, 'name': 'ann', 'age': 30, 'address': {'city': 'oslo', 'zip': "
                      "'0150'}, 'tags': ['a', 'b']}");
    expect_projection("{'tags': {'$slice': -1}, 'name': 0, 'age': 0, 'address': 0}", person,
                      "{'_id': 1, 'tags': ['d']}");
    expect_projection("{'tags': {'$slice': [1, 2]}, '_id': 0, 'name': 0, 'age': 0, 'address': 0}",
                      person, "{'tags': ['b', 'c']}");
    expect_projection("{'t': {'$slice': [-3, 2]}}", "{'_id': 1, 't': [1, 2, 3, 4]}",
                      "{'_id': 1, 't': [2, 3]}");
    expect_projection("{'t': {'$slice': [-9, 2]}}", "{'_id': 1, 't': [1, 2, 3, 4]}",
                      "{'_id': 1, 't': [1, 2]}");
    expect_projection("{'t': {'$slice': [9, 2]}}", "{'_id': 1, 't': [1, 2, 3, 4]}",
                      "{'_id': 1, 't': []}");
    expect_projection("{'t': {'$slice': 0}}", "{'_id': 1, 't': [1, 2]}", "{'_id': 1, 't': []}");
    expect_projection("{'t': {'$slice': 10}}", "{'_id': 1, 't': [1, 2]}",
                      "{'_id': 1, 't': [1, 2]}");
    /* Non-arrays are returned unchanged. */
    expect_projection("{'t': {'$slice': 1}}", "{'_id': 1, 't': 'abc'}", "{'_id': 1, 't': 'abc'}");
    /* With an inclusion, only the included fields and the sliced one. */
    expect_projection("{'name': 1, 'tags': {'$slice': 1}}", person,
                      "{'_id': 1, 'name': 'ann', 'tags': ['a']}");
    expect_projection("{'_id': 1, 't': {'$slice': 1}}", "{'_id': 1, 'x': 2, 't': [1, 2]}",
                      "{'_id': 1, 't': [1]}");
    expect_projection("{'a.t': {'$slice': 1}}", "{'_id': 1, 'a': {'t': [1, 2], 'u': 3}}",
                      "{'_id': 1, 'a': {'t': [1], 'u': 3}}");
    expect_projection("{'a.t': {'$slice': -1}}",
                      "{'_id': 1, 'a': [{'t': [1, 2]}, {'t': [3, 4], 'u': 5}]}",
                      "{'_id': 1, 'a': [{'t': [2]}, {'t': [4], 'u': 5}]}");
}

static void test_elem_match(void **state)
{
    (void)state;
    const char *school = "{'_id': 1, 'zipcode': '63109', 'students': [{'name': 'john', "
                         "'school': 102, 'age': 10}, {'name': 'jess', 'school': 102, 'age': 11}, "
                         "{'name': 'jeff', 'school': 108, 'age': 15}]}";
    /* $elemMatch alone is an inclusion: only _id and the first match. */
    expect_projection("{'students': {'$elemMatch': {'school': 102}}}", school,
                      "{'_id': 1, 'students': [{'name': 'john', 'school': 102, 'age': 10}]}");
    expect_projection("{'students': {'$elemMatch': {'school': 102, 'age': {'$gt': 10}}}}", school,
                      "{'_id': 1, 'students': [{'name': 'jess', 'school': 102, 'age': 11}]}");
    /* No match, or not an array: the field is left out. */
    expect_projection("{'students': {'$elemMatch': {'school': 999}}}", school, "{'_id': 1}");
    expect_projection("{'zipcode': {'$elemMatch': {'a': 1}}}", school, "{'_id': 1}");
    expect_projection("{'zipcode': 1, 'students': {'$elemMatch': {'age': 15}}}", school,
                      "{'_id': 1, 'zipcode': '63109', 'students': [{'name': 'jeff', 'school': "
                      "108, 'age': 15}]}");
    expect_projection("{'n': {'$elemMatch': {'$gte': 3}}}", "{'_id': 1, 'n': [1, 5, 3]}",
                      "{'_id': 1, 'n': [5]}");
}

static void test_parse_errors(void **state)
{
    (void)state;
    expect_error("{'a': 1, 'b': 0}", 31254,
                 "Cannot do exclusion on field b in inclusion projection");
    expect_error("{'a': 0, 'b': 1}", 31253,
                 "Cannot do inclusion on field b in exclusion projection");
    expect_error("{'a': 0, 'b': {'c': 1}}", 31253,
                 "Cannot do inclusion on field c in exclusion projection");
    expect_error("{'a': 1, 'a.b': 1}", 31249, "Path collision at a.b remaining portion b");
    expect_error("{'a.b': 1, 'a': 1}", 31250, "Path collision at a");
    expect_error("{'a': {}}", 51270,
                 "An empty sub-projection is not a valid value. Found empty object at path");
    expect_error("{'a': {'$slice': 'x'}}", 31273,
                 "$slice only supports numbers and [skip, limit] arrays");
    expect_error("{'a': {'$slice': [1]}}", 31272,
                 "$slice array argument should be of form [skip, limit]");
    expect_error("{'a': {'$slice': ['x', 1]}}", 31257,
                 "$slice expects the skip argument to be a number, got string");
    expect_error("{'a': {'$slice': [1, 'x']}}", 31258,
                 "$slice expects the limit argument to be a number, got string");
    expect_error("{'a': {'$slice': [1, 0]}}", 31259, "$slice limit must be positive, got 0");
    expect_error("{'a': {'$elemMatch': 1}}", 31274,
                 "elemMatch: Invalid argument, object required, but got int");
    expect_error("{'a.b': {'$elemMatch': {'c': 1}}}", 31275,
                 "Cannot use $elemMatch projection on a nested field.");
    expect_error("{'a': {'b': {'$elemMatch': {'c': 1}}}}", 31275, NULL);
    expect_error("{'a': {'$elemMatch': {'$jsonSchema': {'required': ['b']}}}}", 224,
                 "$jsonSchema is not allowed in this context");
    expect_error("{'': 1}", 40352, "FieldPath cannot be constructed with empty string");
    expect_error("{'a..b': 1}", 15998, "FieldPath field names may not be empty strings.");
    expect_error("{'$a': 1}", 16410, NULL);
    /* Not implemented yet: expressions. */
    expect_error("{'a': '$b'}", 2, NULL);
    expect_error("{'a': 'text'}", 2, NULL);
    expect_error("{'a': {'$literal': 1}}", 2, NULL);
    /* The positional projection needs the query (projection_compile_with_query). */
    expect_error("{'a.$': 1}", 51050, "Projections with a positional operator require a matcher");
    expect_error("{'$': 1}", 16410, NULL);
}

/* ---- the positional projection ---------------------------------------------------- */

static void expect_positional(const char *spec_json, const char *query_json,
                              const char *document_json, const char *expected_json)
{
    bson_t *spec = support_json_single_quoted(spec_json);
    bson_t *query = support_json_single_quoted(query_json);
    bson_t *document = support_json_single_quoted(document_json);
    bson_t *expected = support_json_single_quoted(expected_json);
    bson_error_t error;
    bson_t out;
    projection_t *projection = projection_compile_with_query(spec, query, &error);
    if (projection == NULL) {
        fail_msg("compile %s: %s", spec_json, error.message);
    }
    if (!projection_apply(projection, document, &out, &error)) {
        fail_msg("apply %s with query %s to %s: %s", spec_json, query_json, document_json,
                 error.message);
    }
    if (!bson_equal(&out, expected)) {
        char *actual_text = bson_as_relaxed_extended_json(&out, NULL);
        print_error("projection %s, query %s, of %s\nexpected %s\n     got %s\n", spec_json,
                    query_json, document_json, expected_json, actual_text);
        bson_free(actual_text);
        fail();
    }
    bson_destroy(&out);
    projection_destroy(projection);
    bson_destroy(spec);
    bson_destroy(query);
    bson_destroy(document);
    bson_destroy(expected);
}

static void expect_positional_apply_error(const char *spec_json, const char *query_json,
                                          const char *document_json, int code,
                                          const char *message)
{
    bson_t *spec = support_json_single_quoted(spec_json);
    bson_t *query = support_json_single_quoted(query_json);
    bson_t *document = support_json_single_quoted(document_json);
    bson_error_t error;
    bson_t out;
    projection_t *projection = projection_compile_with_query(spec, query, &error);
    assert_non_null(projection);
    assert_false(projection_apply(projection, document, &out, &error));
    assert_int_equal(error.code, code);
    assert_string_equal(error.message, message);
    assert_true(bson_empty(&out));
    bson_destroy(&out);
    projection_destroy(projection);
    bson_destroy(spec);
    bson_destroy(query);
    bson_destroy(document);
}

static void expect_positional_error(const char *spec_json, const char *query_json, int code,
                                    const char *message)
{
    bson_t *spec = support_json_single_quoted(spec_json);
    bson_t *query = support_json_single_quoted(query_json);
    bson_error_t error;
    projection_t *projection = projection_compile_with_query(spec, query, &error);
    if (projection != NULL) {
        projection_destroy(projection);
        fail_msg("compile %s succeeded, expected code %d", spec_json, code);
    }
    assert_int_equal(error.code, code);
    if (message != NULL) {
        assert_string_equal(error.message, message);
    }
    bson_destroy(spec);
    bson_destroy(query);
}

static void test_positional(void **state)
{
    (void)state;
    const char *grades = "{'_id': 1, 'name': 'x', 'grades': [80, 85, 90]}";
    expect_positional("{'grades.$': 1}", "{'grades': {'$gte': 85}}", grades,
                      "{'_id': 1, 'grades': [85]}");
    expect_positional("{'grades.$': 1}", "{'grades': 90}", grades, "{'_id': 1, 'grades': [90]}");
    expect_positional("{'name': 1, 'grades.$': 1}", "{'grades': {'$gte': 85}}", grades,
                      "{'_id': 1, 'name': 'x', 'grades': [85]}");
    expect_positional("{'_id': 0, 'grades.$': 1}", "{'grades': {'$lt': 85}}", grades,
                      "{'grades': [80]}");
    /* The first array on the path is narrowed to the matched element, as projected. */
    expect_positional("{'a.b.$': 1}", "{'a.b': 2}",
                      "{'_id': 1, 'a': [{'b': 1, 'c': 1}, {'b': 2, 'c': 2}]}",
                      "{'_id': 1, 'a': [{'b': 2}]}");
    expect_positional("{'x.a.$': 1}", "{'x.a': 3}", "{'_id': 1, 'x': {'a': [1, 3], 'z': 1}}",
                      "{'_id': 1, 'x': {'a': [3]}}");
    expect_positional("{'a': {'b.$': 1}}", "{'a.b': 2}", "{'_id': 1, 'a': {'b': [1, 2]}}",
                      "{'_id': 1, 'a': {'b': [2]}}");
    expect_positional("{'a.$': 1}", "{'a': {'$elemMatch': {'x': 2}}}",
                      "{'_id': 1, 'a': [{'x': 1}, {'x': 2}, {'x': 2}]}",
                      "{'_id': 1, 'a': [{'x': 2}]}");
    /* The index may come from a predicate on another array of the document. */
    expect_positional("{'a.$': 1}", "{'b': 2}", "{'_id': 1, 'a': [7, 8, 9], 'b': [1, 2]}",
                      "{'_id': 1, 'a': [8]}");
    /* No array on the path: the field is kept as it is, or absent. */
    expect_positional("{'a.$': 1}", "{'a': 5}", "{'_id': 1, 'a': 5, 'b': 1}", "{'_id': 1, 'a': 5}");
    expect_positional("{'a.$': 1}", "{'b': 1}", "{'_id': 1, 'b': 1}", "{'_id': 1}");

    const char *message = "positional operator '.$' couldn't find a matching element in the array";
    expect_positional_apply_error("{'grades.$': 1}", "{'_id': 1}", grades, 51246, message);
    expect_positional_apply_error("{'grades.$': 1}", "{}", grades, 51246, message);
    /* $or records no index. */
    expect_positional_apply_error("{'grades.$': 1}", "{'$or': [{'grades': 85}, {'x': 1}]}",
                                  grades, 51246, message);
    expect_positional_apply_error("{'a.$': 1}", "{'b': 3}", "{'_id': 1, 'a': [1], 'b': [1, 2, 3]}",
                                  51247, "positional operator '.$' element mismatch");

    expect_positional_error("{'a.$.b': 1}", "{}", 31394, NULL);
    expect_positional_error("{'a.$': 1, 'b.$': 1}", "{}", 31276,
                            "Cannot specify more than one positional projection per query.");
    expect_positional_error("{'a': {'$elemMatch': {'x': 1}}, 'b.$': 1}", "{}", 31256,
                            "Cannot specify positional operator and $elemMatch.");
    expect_positional_error("{'b.$': 1, 'a': {'$elemMatch': {'x': 1}}}", "{}", 31255,
                            "Cannot specify positional operator and $elemMatch.");
    expect_positional_error("{'a.$': 0}", "{}", 31395,
                            "positional projection cannot be used with exclusion");
    expect_positional_error("{'a.$': {'x': 1}}", "{}", 31271,
                            "positional projection cannot be used with an expression or sub "
                            "object");
    expect_positional_error("{'a.$': 'x'}", "{}", 31308,
                            "positional projection cannot be used with a literal");
    expect_positional_error("{'.$': 1}", "{}", 5392900, "Projection on field .$ is invalid");
    expect_positional_error("{'a.$': 1, 'b': 0}", "{}", 31254, NULL);
    expect_positional_error("{'b': 0, 'a.$': 1}", "{}", 31253,
                            "Cannot do inclusion on field a.$ in exclusion projection");
    expect_positional_error("{'a.$': 1, 'a.b': 1}", "{}", 31249, NULL);
    expect_positional_error("{'a..$': 1}", "{}", 15998, NULL);
    expect_positional_error("{'a.$': 1}", "{'$foo': 1}", 2, NULL);
    /* mongod parses the query again for it, banning its special features. */
    expect_positional_error("{'a.$': 1}", "{'a': 1, '$expr': {'$eq': ['$b', 1]}}", 224,
                            "$expr is not allowed in this context");
    expect_positional_error("{'a.$': 1}", "{'a': 1, '$jsonSchema': {}}", 224,
                            "$jsonSchema is not allowed in this context");

    bson_error_t error;
    bson_t *spec = support_json_single_quoted("{'a.$': 1}");
    bson_t *query = support_json_single_quoted("{'a': 1}");
    projection_t *projection = projection_compile_with_query(spec, query, &error);
    assert_true(projection_is_inclusion(projection));
    assert_true(projection_includes_id(projection));
    assert_true(projection_has_computed_fields(projection));
    assert_int_equal(projection_included_path_count(projection), 1);
    assert_string_equal(projection_included_path(projection, 0), "a");
    projection_destroy(projection);
    bson_destroy(query);
    bson_destroy(spec);
}

static void test_covered_query_facts(void **state)
{
    (void)state;
    bson_error_t error;
    bson_t *spec = support_json_single_quoted("{'b.c': 1, 'a': 1}");
    projection_t *projection = projection_compile(spec, &error);
    assert_true(projection_is_inclusion(projection));
    assert_true(projection_includes_id(projection));
    assert_false(projection_has_computed_fields(projection));
    assert_int_equal(projection_included_path_count(projection), 2);
    assert_string_equal(projection_included_path(projection, 0), "b.c");
    assert_string_equal(projection_included_path(projection, 1), "a");
    assert_null(projection_included_path(projection, 2));
    projection_destroy(projection);
    bson_destroy(spec);

    spec = support_json_single_quoted("{'a': 1, '_id': 0}");
    projection = projection_compile(spec, &error);
    assert_true(projection_is_inclusion(projection));
    assert_false(projection_includes_id(projection));
    assert_int_equal(projection_included_path_count(projection), 1);
    projection_destroy(projection);
    bson_destroy(spec);

    spec = support_json_single_quoted("{'a': 0}");
    projection = projection_compile(spec, &error);
    assert_false(projection_is_inclusion(projection));
    assert_true(projection_includes_id(projection));
    assert_int_equal(projection_included_path_count(projection), 0);
    projection_destroy(projection);
    bson_destroy(spec);

    spec = support_json_single_quoted("{'_id': 0}");
    projection = projection_compile(spec, &error);
    assert_false(projection_is_inclusion(projection));
    assert_false(projection_includes_id(projection));
    projection_destroy(projection);
    bson_destroy(spec);

    spec = support_json_single_quoted("{'_id': 1}");
    projection = projection_compile(spec, &error);
    assert_true(projection_is_inclusion(projection));
    assert_true(projection_includes_id(projection));
    assert_int_equal(projection_included_path_count(projection), 0);
    projection_destroy(projection);
    bson_destroy(spec);

    /* A covering index would need t too. */
    spec = support_json_single_quoted("{'a': 1, 't': {'$slice': 2}}");
    projection = projection_compile(spec, &error);
    assert_true(projection_is_inclusion(projection));
    assert_true(projection_has_computed_fields(projection));
    assert_int_equal(projection_included_path_count(projection), 2);
    assert_string_equal(projection_included_path(projection, 1), "t");
    projection_destroy(projection);
    bson_destroy(spec);

    /* {_id: 1, t: {$slice}} is an inclusion; {_id: 0, t: {$slice}} an exclusion. */
    spec = support_json_single_quoted("{'_id': 0, 't': {'$slice': 2}}");
    projection = projection_compile(spec, &error);
    assert_false(projection_is_inclusion(projection));
    assert_false(projection_includes_id(projection));
    projection_destroy(projection);
    bson_destroy(spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_inclusion),
        cmocka_unit_test(test_exclusion),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_elem_match),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_covered_query_facts),
        cmocka_unit_test(test_positional),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
