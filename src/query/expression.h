/* Aggregation expressions ("$a.b", {$add: [...]}, {$cond: ...}, literals, documents and
 * arrays of expressions): compiled once from their BSON spec, then evaluated against
 * documents with MongoDB 6.0's semantics, result types and error codes. Used by the
 * pipeline stages and, later, by the matcher's $expr. */
#ifndef TC_QUERY_EXPRESSION_H
#define TC_QUERY_EXPRESSION_H

#include "common/error.h"
#include "query/collation.h"

#include <stdint.h>

typedef struct expression expression_t;

/* Compiles spec, an expression as it appears in a stage (any BSON value: a string
 * starting with '$' is a field path or "$$variable", a document whose single field is
 * an $operator is an operator call, other documents and arrays hold expressions, the
 * rest are literals). Errors: InvalidPipelineOperator 168 for an unknown operator,
 * MongoDB's numbered codes for malformed arguments (16020 arity, 15983, 16410, ...).
 * Nothing of spec is referenced afterwards. Free with expression_destroy(). */
expression_t *expression_compile(const bson_value_t *spec, bson_error_t *error) TC_MUST_CHECK;

/* expression_compile() for a command with `let`: the user variables ("$$name") it
 * reads must be fields of defined (NULL: none), or Location17276 "Use of undefined
 * variable". */
expression_t *expression_compile_with_variables(const bson_value_t *spec, const bson_t *defined,
                                                bson_error_t *error) TC_MUST_CHECK;

/* expression_compile() without that check, for an expression whose variables are
 * known only later (a filter's $expr): check them with expression_check_variables()
 * before evaluating it. */
expression_t *expression_compile_unchecked(const bson_value_t *spec, bson_error_t *error) TC_MUST_CHECK;

/* The check, for an expression compiled already. */
bool expression_check_variables(const expression_t *expression, const bson_t *defined,
                                bson_error_t *error) TC_MUST_CHECK;

/* The state evaluation reads besides the document: what $$NOW answers, and the
 * values of the command's let variables. */
typedef struct expression_context {
    int64_t now_milliseconds;
    const bson_t *variables; /* {name: value}, NULL: none; borrowed */
    /* The command's collation (its own, else the collection's default), which
     * its filters, sorts and groups compare strings by; NULL: binary. Borrowed:
     * whatever keeps it past the command (a plan, a matcher) retains it. */
    const collation_t *collation;
} expression_context_t;

/* Fills context for an operation that starts now (one $$NOW for the whole command). */
void expression_context_init(expression_context_t *context);

/* A command's `let` ({name: expression}): each value evaluated once, in order
 * (a later one may read an earlier one and $$NOW), into out_values (always
 * initialised; the caller destroys it), which context->variables then points at.
 * A name that is not a user variable's (upper case, '$', empty) gets mongod's
 * 16870/16871/16869. */
bool expression_evaluate_let(const bson_value_t *let, expression_context_t *context, bson_t *out_values,
                             bson_error_t *error) TC_MUST_CHECK;

/* Evaluates expression with document as $$ROOT and $$CURRENT. On success out_value holds
 * an owned result: free it with bson_value_destroy(). A missing result (an absent field,
 * $$REMOVE) has value_type BSON_TYPE_EOD, which is not null. On failure out_value is
 * left missing and error holds MongoDB's code ("can't $divide by zero", BadValue 2).
 * context may be NULL (then $$NOW is read from the clock at this call). */
bool expression_evaluate(const expression_t *expression, const bson_t *document,
                         const expression_context_t *context, bson_value_t *out_value,
                         bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. */
void expression_destroy(expression_t *expression);

#endif
