/* Private to the feeder: an acknowledged update whose document the archive no
 * longer holds (its own TTL index deleted the older version first) is not lost
 * (feeder_restore.c). */
#ifndef TC_TIER_FEEDER_RESTORE_H
#define TC_TIER_FEEDER_RESTORE_H

#include "tier/feeder_batch.h"
#include "tier/tier_private.h"

/* After ops[0..count) of policy's namespace were applied to the archive (reply:
 * the bulk's reply, with nMatched and nUpserted): when fewer documents matched
 * than updates and replaces were sent, each update's document missing from the
 * archive gets the fast tier's current version (upsert). False only on a read or
 * write error (the caller retries the batch: every step is idempotent). */
bool feeder_restore_missing(mongoc_client_t *fast, mongoc_client_t *archive, const config_namespace_t *policy,
                            feeder_op_t *const *ops, size_t count, const bson_t *reply, bson_error_t *error);

#endif
