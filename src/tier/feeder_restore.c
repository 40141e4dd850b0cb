/* The feeder's answer to an update that found nothing in the archive
 * (feeder_restore.h). Every fast-tier document reaches the archive through an
 * insert event first, so in the feed's own order an update always finds its
 * document; only the archive's own TTL monitor (or an operator) removes one
 * behind the feed's back. Its clock reads the archive's version, which a client's
 * later update in the fast tier (moving the TTL date on, say) may have made stale:
 * MongoDB alone would have kept the document, so dropping the update would lose an
 * acknowledged write (I1). The fast tier's current version goes back instead; the
 * feed's later events, which it already includes, apply to it idempotently. */
#include "tier/feeder_restore.h"

#include "common/log.h"

#define LOG_COMPONENT "FEEDER"

static int64_t reply_count(const bson_t *reply, const char *field)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, reply, field) && BSON_ITER_HOLDS_NUMBER(&iter) ? bson_iter_as_int64(&iter) : 0;
}

static bool restore_one(mongoc_client_t *fast, mongoc_client_t *archive, const config_namespace_t *policy,
                        const bson_value_t *id, bson_error_t *error)
{
    bool in_archive = false, in_fast = false, ok = false;
    bson_t current = BSON_INITIALIZER, command = BSON_INITIALIZER, updates, statement, query, reply;
    bson_init(&reply); /* (tier_find_by_id initialises current again: nothing is allocated yet) */
    TC_CHECK(tier_find_by_id(archive, policy->database, policy->collection, id, &in_archive, NULL, error));
    TC_CHECK(tier_find_by_id(fast, policy->database, policy->collection, id, &in_fast, &current, error));
    ok = true;
    if (in_archive || !in_fast) {
        goto done; /* found, or deleted since: a later event of the feed settles it */
    }
    BSON_APPEND_UTF8(&command, "update", policy->collection);
    BSON_APPEND_ARRAY_BEGIN(&command, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &statement);
    BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
    BSON_APPEND_VALUE(&query, "_id", id);
    bson_append_document_end(&statement, &query);
    BSON_APPEND_DOCUMENT(&statement, "u", &current);
    BSON_APPEND_BOOL(&statement, "upsert", true);
    bson_append_document_end(&updates, &statement);
    bson_append_array_end(&command, &updates);
    /* What the fast tier accepted, the archive gets as is. */
    BSON_APPEND_BOOL(&command, "bypassDocumentValidation", true);
    bson_destroy(&reply);
    ok = tier_command(archive, policy->database, &command, &reply, error);
    if (ok) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "{ns}: the archive no longer held a document a client updated in the fast tier (deleted behind "
                     "the feed, by the archive's TTL index or an operator): its current version was written back: "
                     "{document}",
                     TC_ATTR_STR("ns", policy->ns), TC_ATTR_DOC("document", &current));
    }
done:
    bson_destroy(&command);
    bson_destroy(&reply);
    bson_destroy(&current);
    return ok;
}

bool feeder_restore_missing(mongoc_client_t *fast, mongoc_client_t *archive, const config_namespace_t *policy,
                            feeder_op_t *const *ops, size_t count, const bson_t *reply, bson_error_t *error)
{
    int64_t expected = 0;
    for (size_t i = 0; i < count; i++) {
        expected += ops[i]->kind != FEEDER_OP_DELETE;
    }
    if (reply_count(reply, "nMatched") + reply_count(reply, "nUpserted") >= expected) {
        return true; /* the usual case: every update found its document */
    }
    for (size_t i = 0; i < count; i++) {
        if (ops[i]->kind == FEEDER_OP_UPDATE && !restore_one(fast, archive, policy, &ops[i]->id, error)) {
            return false;
        }
    }
    return true;
}
