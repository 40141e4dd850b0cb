/* The query matcher: compiles a find filter once, then tests documents against it
 * with MongoDB's semantics (dotted paths, arrays matching on any element, null
 * matching missing fields, cross-type brackets). */
#ifndef TC_QUERY_MATCH_H
#define TC_QUERY_MATCH_H

#include "common/error.h"

typedef struct match_expression match_expression_t;

/* Compiles filter (NULL: match everything). Returns NULL and fills error (may be
 * NULL) with mongod's code and message for a bad filter (BadValue 2 for an unknown
 * $operator, FailedToParse 9, TypeMismatch 14, Location51091 for a bad regex, ...).
 * $expr, $where, $text, $jsonSchema and geo operators are refused with BadValue.
 * The filter's bytes are copied; free the result with match_destroy(). */
match_expression_t *match_compile(const bson_t *filter, bson_error_t *error) TC_MUST_CHECK;

/* True when document satisfies the filter. Allocates nothing. An expression keeps
 * its regexes' scratch space, so one thread at a time may use it (any thread). */
bool match_document(const match_expression_t *expression, const bson_t *document);

/* Safe on NULL. */
void match_destroy(match_expression_t *expression);

#endif
