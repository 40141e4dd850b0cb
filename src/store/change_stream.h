/* Change streams: an aggregate whose pipeline starts with $changeStream opens a
 * tailable cursor over the oplog (oplog.h) that turns entries into events
 * (change_event.h) and runs the stages after $changeStream on them. A getMore
 * with nothing to return waits up to maxTimeMS (awaitData) without holding a
 * worker: it asks the server to run the request again a little later. */
#ifndef TC_STORE_CHANGE_STREAM_H
#define TC_STORE_CHANGE_STREAM_H

#include "store/commands.h"

/* True when the aggregate command's pipeline starts with a $changeStream stage. */
bool change_stream_requested(const bson_t *command);

/* Runs such an aggregate: validates it as mongod does (40573 without --replSet,
 * InvalidNamespace 73 on admin/config/local, 286 ChangeStreamHistoryLost for a
 * start point older than the oplog, 280 for a resume token the oplog does not
 * hold...), opens the cursor and appends cursor: {firstBatch,
 * postBatchResumeToken, id, ns} to reply. */
bool change_stream_aggregate(command_context_t *context, bson_t *reply, bson_error_t *error) TC_MUST_CHECK;

/* Whether cursor was opened by change_stream_aggregate(). */
bool change_stream_is_cursor(const store_cursor_t *cursor);

/* getMore on a change stream cursor the caller has checked out; this function
 * returns it to the table (destroyed once invalidated or failed). Appends
 * cursor: {nextBatch, postBatchResumeToken, id, ns}, or, when no event is ready
 * and maxTimeMS (default 1000) has not passed since the first run of this
 * getMore, sets context->rerun_after_ms instead and appends nothing. */
bool change_stream_get_more(command_context_t *context, store_cursor_t *cursor, int64_t batch_size, bson_t *reply,
                            bson_error_t *error) TC_MUST_CHECK;

/* The errorLabel mongod 6.0 adds to any command failing with an error of its
 * NonResumableChangeStreamError category (ChangeStreamFatalError 280,
 * ChangeStreamHistoryLost 286): "NonResumableChangeStreamError", which tells a
 * driver not to resume the stream; else NULL. */
const char *change_stream_error_label(const bson_error_t *error);

#endif
