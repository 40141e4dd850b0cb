/* Query execution for find (and the scans under count, distinct, update, delete
 * and aggregate): chooses an access path (collection scan, _id lookup, or an
 * index scan with bounds derived from the filter), then produces matching
 * documents in batches. A plan is resumable: a cursor keeps it between getMore
 * calls, and it continues where it stopped in a fresh transaction, on any thread. */
#ifndef TC_STORE_FIND_H
#define TC_STORE_FIND_H

#include "store/storage.h"
#include "query/expression.h"

typedef struct find_options {
    const bson_t *filter;     /* NULL: match everything */
    const bson_t *sort;       /* NULL or empty: natural order */
    const bson_t *projection; /* NULL or empty: whole documents */
    const bson_t *hint;       /* NULL; or {key pattern}; or {$hint: "name"} form handled by caller */
    const char *hint_name;    /* index name hint, or NULL */
    const bson_t *min;        /* NULL or empty; else the hinted index's fields: scan from here (inclusive) */
    const bson_t *max;        /* NULL or empty; else ...: scan up to here (exclusive) */
    int64_t skip;
    int64_t limit;            /* 0: no limit */
    bool return_key_only;     /* internal: callers that only need record ids and documents */
    const expression_context_t *expression_context; /* $expr's $$NOW and let variables; NULL: none */
} find_options_t;

typedef struct find_plan find_plan_t;

/* Compiles options against collection (NULL: the collection does not exist,
 * the plan returns nothing). Errors: BadValue 2 for a bad filter/sort/hint, etc.
 * Free with find_plan_destroy(). */
find_plan_t *find_plan_new(storage_session_t *session, collection_t *collection, const find_options_t *options,
                           bson_error_t *error) TC_MUST_CHECK;

/* Calls emit for each next result, in order, until emit returns false (the
 * batch is full: the plan keeps that result for the next call), the results
 * end (*out_exhausted true), or an error. The document passed to emit is the
 * projected result, valid only during the call; record_id is the record it came
 * from (for a covered query, the record its index key points to). Call inside a transaction. collection is the
 * current catalog pointer for the plan's namespace (NULL if it was dropped). */
typedef bool (*find_emit_fn)(void *context, const bson_t *document, int64_t record_id);
bool find_plan_run(find_plan_t *plan, storage_session_t *session, collection_t *collection, find_emit_fn emit,
                   void *context, bool *out_exhausted, bson_error_t *error) TC_MUST_CHECK;

/* Appends explain's queryPlanner.winningPlan to out under "winningPlan"... the
 * whole queryPlanner document body (namespace, parsedQuery, winningPlan,
 * rejectedPlans). */
void find_plan_append_query_planner(const find_plan_t *plan, const char *ns, bson_t *out);

/* Appends executionStats' body (nReturned, totalKeysExamined, totalDocsExamined,
 * executionStages) after the plan ran to the end. */
void find_plan_append_execution_stats(const find_plan_t *plan, int64_t elapsed_ms, bson_t *out);

void find_plan_destroy(find_plan_t *plan);

#endif
