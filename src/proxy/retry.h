/* Which commands and which tier failures the proxy may retry once, by MongoDB's
 * retryable-reads and retryable-writes specifications. Pure: no I/O, no state;
 * the router (router.c) does the retrying once the tier's primary is found again
 * (recovery.c). */
#ifndef TC_PROXY_RETRY_H
#define TC_PROXY_RETRY_H

#include "common/fields.h"
#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum retry_kind {
    RETRY_NEVER, /* anything else: getMore, mapReduce, explain, transactions, admin... */
    RETRY_READ,  /* find, aggregate without $out/$merge, count, distinct, listCollections,
                    listIndexes, listDatabases */
    RETRY_WRITE, /* insert, update and delete without multi-document statements,
                    findAndModify: only when the client sent a txnNumber (retryWrites) */
} retry_kind_t;

/* How the retryable-reads and retryable-writes specifications class command (as
 * the client sent it, document sequences merged). A command carrying autocommit
 * belongs to a multi-document transaction, which has its own retry rules: never. */
retry_kind_t retry_command_kind(const bson_t *command);
/* The same, for a command whose fields the caller has indexed. */
retry_kind_t retry_command_kind_fields(const fields_t *command);

/* Whether the code says the member is no longer (or not yet) the primary, or is
 * shutting down: the pool must find the primary again before a retry. */
bool retry_code_changes_primary(int32_t code);

/* Whether a tier's reply body is a retryable failure for a command of kind: ok 0
 * with a retryable code; for writes also a RetryableWriteError label or a
 * writeConcernError with a retryable code. Sets *out_code to the code found (0 when
 * the reply is not retryable). */
bool retry_reply_is_retryable(const bson_t *reply, retry_kind_t kind, int32_t *out_code);

#endif
