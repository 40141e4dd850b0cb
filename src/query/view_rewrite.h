/* The aggregation a read of a view runs, as mongod 6.0 rewrites it: the
 * stages that follow the view's pipeline for a find, count or distinct. Pure. */
#ifndef TC_QUERY_VIEW_REWRITE_H
#define TC_QUERY_VIEW_REWRITE_H

#include "common/error.h"

/* command is the read (its first field names the view); out_pipeline and
 * out_cursor (initialized by the caller) receive the stages and the cursor
 * options:
 *   find      [$match filter, $sort, $skip, $limit, $project projection]
 *             (empty ones left out), cursor {batchSize};
 *   count     [$match query, $skip, $limit (its absolute value), {$count: "count"}];
 *   distinct  [$match query, {$unwind: {path: "$key", preserveNullAndEmptyArrays:
 *             true}}, {$group: {_id: null, distinct: {$addToSet: "$key"}}}].
 * Errors as mongod's: InvalidPipelineOperator 168 "Option <name> not supported
 * in aggregation." for find's min, max, returnKey, showRecordId, tailable,
 * awaitData, noCursorTimeout, allowPartialResults, oplogReplay, readOnce, and
 * singleBatch unless limit is 1; FailedToParse 9 for distinct without key. */
bool view_rewrite_read(const char *command_name, const bson_t *command, bson_t *out_pipeline, bson_t *out_cursor,
                       bson_error_t *error) TC_MUST_CHECK;

#endif
