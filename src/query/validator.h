/* A collection's validator (create's and collMod's `validator`): a query
 * filter every written document must satisfy, and when one does not, the
 * `details` of MongoDB 6.0's DocumentValidationFailure errInfo saying why.
 * Pure: the store decides when to check (validationLevel) and what a failure
 * does (validationAction). */
#ifndef TC_QUERY_VALIDATOR_H
#define TC_QUERY_VALIDATOR_H

#include "common/error.h"
#include "query/expression.h"

typedef struct validator validator_t;

/* Compiles filter as a validator. context gives $expr its $$NOW and the
 * collection's collation (NULL: $$NOW read at each check, binary strings).
 * $jsonSchema may stand wherever the matcher takes it (json_schema.h).
 * Errors: the matcher's for a bad filter (BadValue 2, FailedToParse 9, ...),
 * json_schema_compile()'s among them. The filter is copied; free with
 * validator_destroy(). */
validator_t *validator_compile(const bson_t *filter, const expression_context_t *context,
                               bson_error_t *error) TC_MUST_CHECK;

/* Tests document: *out_valid says whether it satisfies the validator. When it
 * does not and out_details is not NULL, *out_details (initialised here only
 * then) receives errInfo.details as mongod 6.0 writes it for query operators:
 * {operatorName, specifiedAs, reason?, consideredValue?} for one clause, and
 * {operatorName: "$and" | "$or", clausesNotSatisfied: [{index, details}]} or
 * {operatorName: "$nor", clausesSatisfied: [...]} around several (a validator
 * of several fields is an implicit $and); {operatorName: "$jsonSchema", title?,
 * description?, schemaRulesNotSatisfied: [...]} for a schema (under $nor:
 * reason "schema matched"). Fails only when an $expr's
 * evaluation fails (mongod fails the write with that error). One thread at a
 * time may use a validator. */
bool validator_check(validator_t *validator, const bson_t *document, bool *out_valid, bson_t *out_details,
                     bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. */
void validator_destroy(validator_t *validator);

#endif
