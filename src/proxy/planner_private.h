/* Private to the planner: the context one plan carries, decision helpers, and the
 * filter analysis shared by planner.c, planner_write.c and planner_filter.c. */
#ifndef TC_PROXY_PLANNER_PRIVATE_H
#define TC_PROXY_PLANNER_PRIVATE_H

#include "common/fields.h"
#include "proxy/planner.h"

/* MongoDB refuses match expressions nested deeper than this; so does the planner,
 * which also keeps its recursion off a hostile 16 MB filter. */
#define PLANNER_MAX_DEPTH 100

typedef struct planner_bound {
    bool found;
    int64_t ms;
    bool inclusive;
} planner_bound_t;

/* What every step of one plan needs to know. */
typedef struct planner_context {
    const fields_t *fields; /* the command's top-level fields */
    const char *database;   /* $db, "" when absent */
    const char *name;       /* the command's name, its first field */
    const char *collection; /* the first field's value when a string, else "" */
    const plan_policy_t *policy;
    const plan_coverage_t *coverage;
} planner_context_t;

/* Sets route and reason, and the reason text (prefixed "explain: " for explain). */
void planner_decide(plan_decision_t *out, plan_route_t route, plan_reason_t reason, const char *format, ...)
    __attribute__((format(printf, 4, 5)));

/* Appends to the reason text, truncating quietly: it is for humans. */
void planner_reason_append(plan_decision_t *out, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* Whether a proved bound lies inside the horizon (false when coverage is not valid). */
bool planner_bound_inside_horizon(const planner_context_t *context, const planner_bound_t *bound);

/* Remembers bound as the decision's lower bound. */
void planner_record_bound(plan_decision_t *out, const planner_bound_t *bound);

/* planner_unique.c: fault-in filters for the archive documents that may hold a
 * unique key value the write sets (policy->unique_indexes), appended to
 * out->fault_in_filters: an inserted document's; an update's operators ($set, and
 * $setOnInsert and the query's equalities for an upsert). An update that computes a
 * key (planner.h: unique_computed_statements) records the indexes concerned and
 * returns true; the caller records the statement. */
void planner_unique_keys_of_insert(const plan_policy_t *policy, const bson_t *document, plan_decision_t *out);
bool planner_unique_keys_of_update(const plan_policy_t *policy, const bson_iter_t *update, const bson_t *query,
                                   bool upsert, plan_decision_t *out);

/* Plans insert, update, delete and findAndModify (planner_write.c). */
bool planner_plan_write(const planner_context_t *context, const bson_t *command, plan_decision_t *out,
                        bson_error_t *error);

/* Tightens bound with every lower bound filter proves on time_field (the
 * conjuncts plan_filter_lower_bound describes). False when filter is malformed
 * where it matters; bound is then unreliable and proves nothing. */
bool planner_collect_bound(const bson_t *filter, const char *time_field, planner_bound_t *bound);

/* The _id values a write's filter pins it to: the first top-level (or top-level
 * $and) conjunct that is an equality, $eq or non-empty $in on `_id` with plain
 * values. Appends them to out_ids (an initialised BSON array) and returns true;
 * false when no conjunct pins _id. */
bool planner_filter_pinned_ids(const bson_t *filter, bson_t *out_ids, uint32_t *out_count);

/* Whether a top-level (or top-level $and) conjunct names a sub-path of _id
 * ("_id.x"), which an upsert would copy into the _id it inserts. */
bool planner_filter_has_id_subpath(const bson_t *filter);

/* Where the _id of a document an upsert inserts comes from, reading only the
 * update (the filter's _id equality is handled by the caller). */
typedef enum planner_upsert_id {
    PLANNER_UPSERT_ID_GENERATED, /* the server generates an ObjectId */
    PLANNER_UPSERT_ID_KNOWN,     /* appended to the caller's array */
    PLANNER_UPSERT_ID_UNKNOWN,   /* a pipeline, or _id touched in a way not followed */
} planner_upsert_id_t;

planner_upsert_id_t planner_upsert_inserted_id(const bson_iter_t *update, bson_t *out_ids, uint32_t *out_count);

/* Appends value to a BSON array under the next index key ("0", "1", ...). */
void planner_append_value(bson_t *array, uint32_t *count, const bson_iter_t *value);

/* True for a value usable as an _id in an equality: not a regex, array or
 * undefined, and not a document whose first field starts with '$'. */
bool planner_is_plain_id(const bson_iter_t *iter);

#endif
