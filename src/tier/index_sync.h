/* Private to src/tier: the fast tier made a faithful copy of the archive's
 * collection definition (index_sync.c), and the checks at start that refuse a
 * namespace that cannot be tiered (preflight.c). */
#ifndef TC_TIER_INDEX_SYNC_H
#define TC_TIER_INDEX_SYNC_H

#include "tier/tier_private.h"

/* What one namespace's sync remembers between runs (in the warmer's thread). */
typedef struct index_sync_state {
    bool synced;         /* a sync succeeded: the fast tier's indexes match; coverage may be valid */
    int64_t next_due_ms; /* monotonic */
    bson_t refused;      /* {name: message} the fast tier refused, logged once each */
    bson_t ttl;          /* the TTL rules last written to thermocline.indexes */
    bool ttl_written;
    bool options_refused; /* the fast tier refused the validator: logged once until it accepts */
    bool collation_differs; /* the fast tier's default collation is not the archive's: logged once */
    bool time_index_warned;
} index_sync_state_t;

void index_sync_state_init(index_sync_state_t *state);
void index_sync_state_cleanup(index_sync_state_t *state);

/* One sync of policy's collection, archive -> fast:
 *   validator, validationLevel, validationAction: create or collMod on the fast tier;
 *   every archive index but _id_ (without expireAfterSeconds, see src/tier/README.md),
 *       plus {timeField: 1} when the archive has no index starting with timeField;
 *   every other fast-tier index but _id_ dropped;
 *   the archive's TTL rules written to thermocline.indexes for the evictor.
 * A spec or option the fast tier refuses is logged and skipped (the namespace goes
 * on). False only when a tier cannot be read or written at all (then retried). */
bool index_sync_namespace(tier_context_t *context, mongoc_client_t *archive, mongoc_client_t *fast,
                          const config_namespace_t *policy, index_sync_state_t *state, bson_error_t *error);

/* The evictor's TTL condition of ns from thermocline.indexes: appends to out_or
 * (the array of a $or) one {field: {$lt: now - expireAfterSeconds}} per TTL index
 * of the archive, numbered from *position on. False on a read error. */
bool index_sync_append_ttl_conditions(mongoc_client_t *fast, const char *ns, int64_t now_ms, bson_t *out_or,
                                      uint32_t *position, bson_error_t *error);

/* Runs command and copies its cursor.firstBatch into out_array (always
 * initialised; the caller destroys). NamespaceNotFound is no error: *out_exists
 * false and an empty array. */
/* policy's collection as the server's listCollections lists it (into out_info,
 * which the caller always destroys; *out_exists false, and out_info empty, when
 * the collection does not exist). False only when the server cannot be asked. */
bool index_sync_collection_info(mongoc_client_t *client, const config_namespace_t *policy, bson_t *out_info,
                                bool *out_exists, bson_error_t *error) TC_MUST_CHECK;

bool index_sync_list(mongoc_client_t *client, const char *database, const bson_t *command, bson_t *out_array,
                     bool *out_exists, bson_error_t *error);

/* Whether key (an index's key pattern) starts with field. */
bool index_sync_key_starts_with(const bson_t *spec, const char *field);

/* What index_sync_namespace would change on the fast tier now, changing nothing
 * (`thermocline check`): out_create and out_drop get the names of the indexes it
 * would create and drop (BSON arrays, always initialised; an index that differs
 * from the archive's is in both), *out_validation_differs whether it would
 * change the validator or its level or action, *out_collation_differs whether
 * the fast tier's collection has another default collation (which no sync can
 * change). *out_fast_exists false when the fast tier has no such collection yet
 * (the sync creates it whole). */
bool index_sync_plan(mongoc_client_t *archive, mongoc_client_t *fast, const config_namespace_t *policy,
                     bool *out_fast_exists, bson_t *out_create, bson_t *out_drop, bool *out_validation_differs,
                     bool *out_collation_differs, bson_error_t *error) TC_MUST_CHECK;

/* --- preflight.c ------------------------------------------------------------------ */

/* Why a collection (its listCollections entry) cannot be tiered, or NULL: a
 * capped, clustered or time-series collection, or a view. */
const char *preflight_untierable_reason(const bson_t *info);

/* Whether policy's collection on archive has an index whose first key is timeField. */
bool preflight_has_time_field_index(mongoc_client_t *archive, const config_namespace_t *policy, bool *out_has,
                                    bson_error_t *error) TC_MUST_CHECK;

/* The finding of a missing time-field index: what it costs, and the
 * createIndexes command that fixes it, into out. */
void preflight_time_index_advice(const config_namespace_t *policy, char *out, size_t size);

#endif
