/* Whether one query filter implies another: every document the first matches, the
 * second matches too. The store's planner asks it before using a partial index
 * (the query must imply the index's partialFilterExpression, mongod's
 * isSubsetOf) or a sparse one (the query must imply that an indexed field
 * exists). Pure; conservative: false whenever it cannot prove the implication. */
#ifndef TC_QUERY_FILTER_IMPLIES_H
#define TC_QUERY_FILTER_IMPLIES_H

#include <bson/bson.h>
#include <stdbool.h>

/* The forms understood, as in mongod's subset rule for partial indexes: in
 * condition, equality ({f: v}, $eq), $exists: true, $gt/$gte/$lt/$lte, $type,
 * $in, $and and $or at any level; in query, the same operators as conjuncts
 * (top-level fields and $and), and a top-level $or whose every clause implies.
 * A range is implied only by values of the same canonical type (mongod's type
 * bracketing: {$gt: 5} never matches a string). */
bool filter_implies(const bson_t *query, const bson_t *condition);

#endif
