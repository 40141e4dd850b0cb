/* libFuzzer target: the query matcher, and find projections. The input is a filter
 * document followed by an optional document to test (each BSON document says its own
 * length in its first 4 bytes, which is where the input splits); both must be valid
 * BSON as the server would accept it. A filter that compiles is also run against the
 * fixed awkward documents, and {$nor: [filter]} must match exactly the others. The
 * first document is also tried as a projection. */
#include "fuzz_common.h"

#include "query/match.h"
#include "query/projection.h"

/* {$nor: [filter]}, compiled; NULL when refused. */
static match_expression_t *compile_negation(const bson_t *filter)
{
    bson_t negation = BSON_INITIALIZER;
    bson_t branches;
    bson_error_t error;
    match_expression_t *expression = NULL;
    if (bson_append_array_begin(&negation, "$nor", 4, &branches) &&
        bson_append_document(&branches, "0", 1, filter) &&
        bson_append_array_end(&negation, &branches)) {
        expression = match_compile(&negation, &error);
    }
    bson_destroy(&negation);
    return expression;
}

static void check_match(const match_expression_t *expression,
                        const match_expression_t *negation, const bson_t *document)
{
    bool matched = match_document(expression, document);
    FUZZ_REQUIRE(matched == match_document(expression, document), "matching is not repeatable");
    if (negation != NULL) {
        FUZZ_REQUIRE(matched != match_document(negation, document),
                     "filter and {$nor: [filter]} agree (both %s)", matched ? "match" : "miss");
    }
}

static void check_projection(const projection_t *projection, const bson_t *document)
{
    bson_t out;
    bson_error_t error;
    if (projection_apply(projection, document, &out, &error)) {
        fuzz_require_valid(&out, "projected document");
        if (projection_is_empty(projection)) {
            FUZZ_REQUIRE(bson_equal(&out, document), "an empty projection changed the document");
        }
    }
    bson_destroy(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader_t reader;
    bson_t filter;
    bson_t document;
    fuzz_reader_init(&reader, data, size);
    if (!fuzz_reader_document(&reader, &filter)) {
        return 0;
    }
    bool have_document = fuzz_reader_document(&reader, &document);

    bson_error_t error;
    match_expression_t *expression = match_compile(&filter, &error);
    if (expression != NULL) {
        match_expression_t *negation = compile_negation(&filter);
        if (have_document) {
            check_match(expression, negation, &document);
        }
        for (size_t i = 0; i < FUZZ_FIXED_COUNT; i++) {
            check_match(expression, negation, fuzz_fixed_document(i));
        }
        match_destroy(negation);
        match_destroy(expression);
    }

    projection_t *projection = projection_compile(&filter, &error);
    if (projection != NULL) {
        for (size_t i = 0; i < projection_included_path_count(projection); i++) {
            FUZZ_REQUIRE(projection_included_path(projection, i) != NULL, "path %zu is NULL", i);
        }
        if (have_document) {
            check_projection(projection, &document);
        }
        for (size_t i = 0; i < FUZZ_FIXED_COUNT; i++) {
            check_projection(projection, fuzz_fixed_document(i));
        }
        projection_destroy(projection);
    }
    return 0;
}
