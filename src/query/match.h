/* The query matcher: compiles a find filter once, then tests documents against it
 * with MongoDB's semantics (dotted paths, arrays matching on any element, null
 * matching missing fields, cross-type brackets). */
#ifndef TC_QUERY_MATCH_H
#define TC_QUERY_MATCH_H

#include "common/error.h"
#include "query/expression.h"

typedef struct match_expression match_expression_t;

/* Compiles filter (NULL: match everything). Returns NULL and fills error (may be
 * NULL) with mongod's code and message for a bad filter (BadValue 2 for an unknown
 * $operator, FailedToParse 9, TypeMismatch 14, Location51091 for a bad regex, ...).
 * $where, $text and geo operators are refused with BadValue; $jsonSchema is
 * query/json_schema.h's.
 * The filter's bytes are copied; free the result with match_destroy(). */
match_expression_t *match_compile(const bson_t *filter, bson_error_t *error) TC_MUST_CHECK;

/* match_compile() for a command's filter: context gives $expr the command's $$NOW
 * and let variables (copied; NULL: none, $$NOW read now), and a $$name the let does
 * not define is Location17276. */
match_expression_t *match_compile_with_context(const bson_t *filter, const expression_context_t *context,
                                               bson_error_t *error) TC_MUST_CHECK;

/* match_compile() where mongod's parser bans its special features
 * (kBanAllSpecialFeatures): a $pull condition, an arrayFilters entry, an
 * $elemMatch projection, the query of a positional projection. $expr and
 * $jsonSchema there are QueryFeatureNotAllowed 224, $where and $text BadValue 2,
 * "<operator> is not allowed in this context". */
match_expression_t *match_compile_without_special_features(const bson_t *filter, bson_error_t *error) TC_MUST_CHECK;

/* Whether an evaluation failed since the compile ($expr: "can't $divide by zero"):
 * a document that failed did not match, and the command must fail with error, as
 * mongod's does. */
bool match_failed(const match_expression_t *expression, bson_error_t *error);

/* True when document satisfies the filter. Allocates nothing. An expression keeps
 * its regexes' scratch space, so one thread at a time may use it (any thread). */
bool match_document(const match_expression_t *expression, const bson_t *document);

/* Room for an array element's field name ("0" ... "4294967295") and its NUL. */
#define MATCH_ARRAY_INDEX_SIZE 16

/* What mongod's MatchDetails reports about a match: the position, within the first
 * array the query traversed, of the element that made it match (its elemMatchKey).
 * The positional '$' of updates and find projections reads it. */
typedef struct match_details {
    bool has_array_index;
    char array_index[MATCH_ARRAY_INDEX_SIZE]; /* the element's field name, e.g. "2" */
} match_details_t;

/* match_document(), also filling out_details (NULL-able; then identical to
 * match_document). The index is recorded as mongod does: a predicate that reached a
 * value through arrays records the outermost array's element position; $elemMatch
 * records the matching element's own position; within $and the predicate that sorts
 * last in mongod's canonical order (match type, then path) wins; $or, $nor and $not
 * record nothing. When the document does not match, out_details has no index. */
bool match_document_with_details(const match_expression_t *expression, const bson_t *document,
                                 match_details_t *out_details);

/* mongod's parseIntegerElementToLong (non_negative: ...ToNonNegativeLong) on the
 * element key: value. On failure reason gets mongod's FailedToParse text ("Expected
 * an integer: maxLength: 1.5"). */
bool match_parse_integer(const char *key, const bson_value_t *value, bool non_negative, int64_t *out, char *reason,
                         size_t size);

/* A double or decimal128 NaN, which no comparison matches. */
bool match_value_is_nan(const bson_value_t *value);

/* Safe on NULL. */
void match_destroy(match_expression_t *expression);

#endif
