/* The feeder's pure part: change events in, archive writes out. One batch of
 * events (one getMore of the fast tier's change stream) becomes at most a few
 * writes per document: repeated writes to one document are coalesced, so the
 * archive reads and writes each hot document once per batch, in the order the
 * fast tier applied them. No I/O here; unit-tested in tests/unit/test_feeder_batch.c.
 *
 *   insert, replace      -> replaceOne({_id}, fullDocument, upsert)  (idempotent)
 *   update               -> updateOne({_id}, {$set: updatedFields, $unset: removedFields}),
 *                           preceded by {$push: {f: {$each: [], $slice: newSize}}}
 *                           for truncatedArrays
 *   delete               -> deleteOne({_id})
 *
 * Coalescing per document: a delete or a full document replaces whatever came
 * before it; an update after a full document is applied to it (one replace);
 * an update after an update merges when that cannot change the field order the
 * fast tier produced (the later one sets only paths the earlier one set, and
 * removes paths unrelated to the earlier ones). */
#ifndef TC_TIER_FEEDER_BATCH_H
#define TC_TIER_FEEDER_BATCH_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

typedef enum feeder_op_kind {
    FEEDER_OP_REPLACE, /* replaceOne({_id}, document, {upsert: true}) */
    FEEDER_OP_UPDATE,  /* updateOne({_id}, document) */
    FEEDER_OP_DELETE,  /* deleteOne({_id}) */
} feeder_op_kind_t;

/* One archive write. */
typedef struct feeder_op {
    feeder_op_kind_t kind;
    size_t namespace_index; /* as given to feeder_batch_add */
    bson_value_t id;        /* the document's _id (owned by the batch) */
    bson_t document;        /* REPLACE: the document; UPDATE: the update; DELETE: empty */
    uint64_t first_time;    /* cluster times of the first and last events folded in */
    uint64_t last_time;
    uint32_t events;        /* change events folded into this write */
    /* Internal: an update kept as its two parts while it may still merge. */
    bool is_truncation;
    bson_t set_fields;
    bson_t unset_fields;
} feeder_op_t;

typedef struct feeder_batch feeder_batch_t;

/* Free with feeder_batch_destroy(). */
feeder_batch_t *feeder_batch_new(void);
void feeder_batch_destroy(feeder_batch_t *batch);

/* Forgets every event, keeping the memory. */
void feeder_batch_reset(feeder_batch_t *batch);

/* Adds one change event (insert, replace, update or delete) of the namespace
 * namespace_index. False with BadValue for another operationType or an event
 * missing documentKey._id, fullDocument (insert, replace), updateDescription
 * (update) or clusterTime. */
bool feeder_batch_add(feeder_batch_t *batch, size_t namespace_index, const bson_t *event,
                      bson_error_t *error) TC_MUST_CHECK;

/* Events added since the last reset (also those that coalesced away). */
size_t feeder_batch_event_count(const feeder_batch_t *batch);

/* The writes, in an order that keeps each document's writes in event order:
 * grouped by namespace, then in rounds (every document's first write, then the
 * second writes...), and inside a round replaces and updates before deletes, so
 * an ordered bulk write sends few commands. The array and the writes belong to
 * the batch and stay valid until the next add, reset or destroy. */
feeder_op_t *const *feeder_batch_finish(feeder_batch_t *batch, size_t *out_count);

/* The updates that replay an update event's description ({updatedFields,
 * removedFields, truncatedArrays}): out_truncation {$push: {f: {$each: [],
 * $slice: n}}} (empty when no array was truncated) and out_update {$set: ...,
 * $unset: {...}} (empty when no field changed). Both are initialised by the
 * callee, also on failure; the caller destroys them. False with BadValue for a
 * malformed description. */
bool feeder_update_from_description(const bson_t *description, bson_t *out_truncation, bson_t *out_update,
                                    bson_error_t *error) TC_MUST_CHECK;

#endif
