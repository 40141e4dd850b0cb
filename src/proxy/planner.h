/* The planner: a pure function from (command, namespace policy, coverage state) to
 * a route and a reason. It decides which tier can answer a command completely and
 * what a write must first copy from the archive; no I/O, no state, no clock.
 * Anything it cannot prove goes to the archive. */
#ifndef TC_PROXY_PLANNER_H
#define TC_PROXY_PLANNER_H

#include "common/error.h"
#include "common/fields.h"

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

/* The coverage contract with the warmer and the evictor. While coverage is valid
 * with horizon H, the fast tier holds the newest version of every document of the
 * namespace that matches {timeField: {$gte: H}} under MongoDB's query semantics (an
 * array time field qualifies when any element is a date >= H). So the evictor may
 * delete only documents that do not match that query, and the warmer declares
 * coverage valid once it has copied every document that does. The planner sends a
 * read to the fast tier only when the read's filter implies that query. */

/* Room for a namespace: MongoDB's limit is 255 bytes ("db.collection"). */
#define PLAN_NAMESPACE_SIZE 256
#define PLAN_REASON_TEXT_SIZE 320

/* PLAN_ROUTE_PROXY and PLAN_REASON_MALFORMED stay last: counters are sized by them. */
typedef enum plan_route {
    PLAN_ROUTE_ARCHIVE,           /* the archive answers (a read first waits for the feeder) */
    PLAN_ROUTE_FAST,              /* the fast tier answers */
    PLAN_ROUTE_FAST_THEN_ARCHIVE, /* point read: the fast tier, then the archive for the ids
                                     the fast tier did not return (see point_ids) */
    PLAN_ROUTE_CURSOR_OWNER,      /* getMore, killCursors: the tier that opened the cursor,
                                     from the router's cursor table */
    PLAN_ROUTE_TRANSACTION_OWNER, /* commitTransaction, abortTransaction: the tier that ran
                                     the transaction */
    PLAN_ROUTE_PROXY,             /* hello, isMaster, ping, thermoclineStatus: the proxy answers */
} plan_route_t;

/* Why; stable names (plan_reason_name) for thermoclineStatus counters. */
typedef enum plan_reason {
    PLAN_REASON_NO_POLICY,                /* "no-policy": the archive holds the whole namespace */
    PLAN_REASON_FILTER_UNPROVABLE,        /* "filter-unprovable": no date lower bound proved */
    PLAN_REASON_HORIZON_UNKNOWN,          /* "horizon-unknown": bound proved, coverage not valid */
    PLAN_REASON_BEFORE_HORIZON,           /* "before-horizon": bound proved, below the horizon */
    PLAN_REASON_INSIDE_HORIZON,           /* "inside-horizon": the fast tier answers */
    PLAN_REASON_PIPELINE_READS_OTHER,     /* "pipeline-reads-other": $lookup, $graphLookup, $unionWith */
    PLAN_REASON_PIPELINE_WRITES,          /* "pipeline-writes": $out, $merge, mapReduce's out */
    PLAN_REASON_CHANGE_STREAM,            /* "change-stream": $changeStream on a tiered namespace: the fast tier */
    PLAN_REASON_POINT_READ,               /* "point-read": find by _id */
    PLAN_REASON_WRITE,                    /* "write": every write runs on the fast tier */
    PLAN_REASON_CURSOR,                   /* "cursor": routed by cursor ownership */
    PLAN_REASON_TRANSACTION,              /* "transaction": routed by transaction ownership */
    PLAN_REASON_CATALOG,                  /* "catalog": DDL, applies_to_both_tiers */
    PLAN_REASON_NOT_ROUTED,               /* "not-routed": admin and other commands: the archive */
    PLAN_REASON_ANSWERED_BY_PROXY,        /* "proxy" */
    PLAN_REASON_MALFORMED,                /* "malformed": a read the archive will reject */
} plan_reason_t;

typedef enum plan_kind {
    PLAN_KIND_READ,        /* find, aggregate, count, distinct, mapReduce */
    PLAN_KIND_WRITE,       /* insert, update, delete, findAndModify */
    PLAN_KIND_CURSOR,      /* getMore, killCursors */
    PLAN_KIND_TRANSACTION, /* commitTransaction, abortTransaction */
    PLAN_KIND_CATALOG,     /* create, drop, createIndexes, dropIndexes, dropDatabase,
                              renameCollection, collMod */
    PLAN_KIND_SESSION,     /* endSessions, killSessions, refreshSessions...: both tiers */
    PLAN_KIND_PROXY,       /* answered by the proxy */
    PLAN_KIND_OTHER,       /* everything else: admin, users, listDatabases... */
} plan_kind_t;

/* The namespace's policy; plan_command takes NULL for a namespace without one. The
 * horizon itself comes from plan_coverage_t (the caller computes now - maxAge +
 * safetySlack once the warmer, or the config, says the fast tier is complete). */
typedef struct plan_policy {
    const char *time_field; /* a field path, never NULL */
    /* The namespace's unique indexes other than _id_, as listIndexes lists them
     * (each {key, name, unique, and sparse, partialFilterExpression, collation when
     * set}), as a BSON array; NULL: none known. A write that sets one of their keys
     * faults in the archive documents that may hold the same value (I7). */
    const bson_t *unique_indexes;
} plan_policy_t;

typedef struct plan_coverage {
    bool valid;         /* false: the horizon is +infinity (nothing proves a read fast) */
    int64_t horizon_ms; /* H, milliseconds since the epoch, as a BSON date */
} plan_coverage_t;

/* One decision. plan_command always initialises it (also when it fails); free it
 * with plan_decision_cleanup(). Holds bson_t values: never copy it by value. Every
 * array below is a BSON array ("0", "1", ...) of values copied from the command. */
typedef struct plan_decision {
    plan_route_t route;
    plan_reason_t reason;
    plan_kind_t kind;
    char reason_text[PLAN_REASON_TEXT_SIZE]; /* for logs, explain and thermoclineStatus */

    bool is_explain;             /* explain, or aggregate with explain: true: nothing is
                                    written and nothing is faulted in */
    bool in_transaction;         /* the command carries autocommit (a multi-document
                                    transaction): the router applies the transaction rules */
    bool applies_to_both_tiers;  /* catalog and session commands: the router also applies
                                    them to the fast tier (set whatever the policy) */
    bool is_change_stream;       /* an aggregate opening a $changeStream on a tiered namespace:
                                    the router drops the workers' events from its batches */
    bool reads_other_namespaces; /* a pipeline stage reads another collection: a
                                    read-your-writes wait must cover it too */
    bool writes_output;          /* $out, $merge or mapReduce out: the archive would write a
                                    collection directly; the router must refuse when that
                                    namespace has a policy or output_namespace is "" */
    char output_namespace[PLAN_NAMESPACE_SIZE]; /* "db.collection", "" if not known */

    /* The lower bound the filter proved on the time field (reads and writes). */
    bool has_lower_bound;
    int64_t lower_bound_ms;
    bool lower_bound_inclusive;

    /* PLAN_ROUTE_FAST_THEN_ARCHIVE: the _id values asked for, in the filter's order.
     * The router asks the archive for those the fast tier did not return, comparing
     * ids with order_compare_values (5, 5.0 and 5L are one id), and merges the two
     * answers in _id order (descending for sort {_id: -1}), cut to the limit. */
    bson_t point_ids;
    uint32_t point_id_count;

    /* Writes (PLAN_KIND_WRITE, not explain). needs_fault_in is true when either
     * fault-in list is not empty: before the write, copy into the fast tier the archive
     * documents with these _id values, and those matching these filters (each
     * {filter: <document>, collation: <document, only when the statement had one>},
     * capped by the config's faultInLimit). A copy never overwrites a newer fast-tier
     * version nor resurrects a document deleted since (I6). */
    bool needs_fault_in;
    bson_t fault_in_ids;
    uint32_t fault_in_id_count;
    bson_t fault_in_filters;
    uint32_t fault_in_filter_count;
    /* _id values an insert or an upsert may create: each must not already exist in
     * the archive (I7); faulting them in makes the fast tier raise the DuplicateKey. */
    bson_t unique_id_checks;
    uint32_t unique_id_check_count;
    /* Statements whose new unique key values the update computes from the stored
     * document ($inc, $rename, $unset, $push and the other array operators, a path
     * through an array or into a key's value, a pipeline, a field of a partial
     * index's filter, an upsert's query operator), which no filter above can name:
     * their numbers in `updates` (0 for findAndModify), a BSON array of int32. The
     * router reads what they match in the fast tier, applies each update there and
     * faults in the keys of the results (plan_unique_keys_of_document) before the
     * write. unique_computed_indexes: the unique indexes concerned (specs as in
     * plan_policy_t.unique_indexes, each once). */
    bson_t unique_computed_statements;
    uint32_t unique_computed_count;
    bson_t unique_computed_indexes;
} plan_decision_t;

/* Plans one command: `command` is the command document as the client sent it, with
 * its $db and with any OP_MSG document sequences merged in as arrays
 * (wire_op_msg_command). `policy` is the policy of the namespace that
 * plan_command_namespace() names, NULL when it has none; coverage is that
 * namespace's coverage, NULL meaning not valid.
 *
 * Returns false (out still initialised, route ARCHIVE) only when the command must
 * not be sent anywhere: applyOps and bulkWrite (CommandNotFound, as a 6.0 mongos
 * answers; they would write around the fast tier), an empty command, a malformed
 * write on a policy namespace (TypeMismatch 14, FailedToParse 9, Location40414: IDL
 * messages: sending it to the archive would bypass the fast tier, and the planner
 * will not guess what to fault in), and an upsert whose inserted _id cannot be
 * known in advance (CommandNotSupported 115: a pipeline update, or _id reached by a
 * dotted path or an operator other than $set/$setOnInsert); and BadValue for a
 * policy without a usable time field (a caller's bug). A malformed read is routed
 * to the archive (reason malformed), which answers with mongod's own error. */
bool plan_command(const bson_t *command, const plan_policy_t *policy, const plan_coverage_t *coverage,
                  plan_decision_t *out, bson_error_t *error) TC_MUST_CHECK;
/* The same, for a command whose fields the caller has indexed already (the router
 * indexes each command once, for every step that reads it). */
bool plan_command_fields(const fields_t *fields, const plan_policy_t *policy, const plan_coverage_t *coverage,
                         plan_decision_t *out, bson_error_t *error) TC_MUST_CHECK;

void plan_decision_cleanup(plan_decision_t *decision);

/* The namespace whose policy plan_command needs: the collection a read, write,
 * cursor or catalog command names ("db.collection"; the inner command's for
 * explain, the `collection` field for getMore, the source for renameCollection).
 * False for commands on a whole database (aggregate: 1, dropDatabase, admin
 * commands), a command without a string $db, and names that do not fit out_size. */
bool plan_command_namespace(const bson_t *command, char *out_namespace, size_t out_size);
bool plan_command_namespace_fields(const fields_t *fields, char *out_namespace, size_t out_size);

/* Whether filter proves `time_field >= bound` for every document it matches: some
 * top-level conjunct (also inside a top-level $and, recursively) is an equality,
 * $eq, $gte, $gt or non-empty $in on exactly time_field whose operands are all BSON
 * dates. The strongest such bound is returned (out_inclusive false for $gt).
 * Everything else proves nothing: $or, $nor, $not, $expr, $where, dotted sub-paths,
 * arrays, strings or numbers compared with a date, $exists, $ne, null, an operator
 * document holding $ref/$id/$db, and a field named twice at one level. Malformed
 * filters ($and not a non-empty array of documents, nesting deeper than 100) prove
 * nothing either. */
bool plan_filter_lower_bound(const bson_t *filter, const char *time_field, int64_t *out_lower_bound_ms,
                             bool *out_inclusive);

/* Whether filter is exactly a point read: {_id: v}, {_id: {$eq: v}} or
 * {_id: {$in: [v, ...]}} (non-empty), every v a plain value: not a regex, an array,
 * undefined, nor a document whose first field starts with '$'. Appends the ids to
 * out_ids (an initialised, empty BSON array) when true. */
bool plan_filter_point_ids(const bson_t *filter, bson_t *out_ids, uint32_t *out_count);

const char *plan_route_name(plan_route_t route);   /* "archive", "fast", "fast-then-archive"... */
const char *plan_reason_name(plan_reason_t reason); /* "inside-horizon"... */
const char *plan_kind_name(plan_kind_t kind);       /* "read", "write"... */

/* Fault-in filters for the archive documents that may hold a key document would
 * have in one of unique_indexes (a BSON array of specs, as plan_policy_t's): one
 * {filter, collation when the index has one} per index, appended to out_filters (a
 * BSON array) from *count on, leaving out one equal to a filter already there, and
 * one the document held already in before (its version before the update, NULL:
 * none; not for a partial index, whose filter it may enter only now). A missing
 * field is a null key (none in a sparse index without any of its fields); an array
 * value: each element. */
void plan_unique_keys_of_document(const bson_t *unique_indexes, const bson_t *document, const bson_t *before,
                                  bson_t *out_filters, uint32_t *count);

/* insert, update, delete, findAndModify (and its lower-case alias). */
bool plan_command_is_write(const char *name);

#endif
