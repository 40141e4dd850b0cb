/* Commands both tiers apply (catalog commands on tiered namespaces, session
 * commands: the archive first, then the fast tier), and the catalog changes the
 * proxy refuses (renames of tiered namespaces, $out or $merge into one). */
#include "proxy/router_private.h"

#include "common/bson_view.h"
#include "common/log.h"
#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

#define LOG_COMPONENT "ROUTER"

/* --- both tiers: catalog commands on tiered namespaces, session commands -------------
 * create, drop, createIndexes, dropIndexes, collMod on a tiered namespace, and
 * dropDatabase of a database holding one, change both tiers, as an operator expects
 * of one logical collection: an index exists on both (fast-tier reads use it,
 * unique indexes hold on both), a drop leaves neither holding the collection. The
 * feeder first applies the writes acknowledged before the command (a drop must not
 * be followed by their replay, which would bring the collection back in the
 * archive; an index build must see them). Then the archive, the authority: its
 * refusal is the answer and the fast tier is left untouched. Then the fast tier:
 * the client gets the archive's reply once both have the change; a fast-tier
 * failure after the archive's success is answered as an error naming both tiers'
 * states, never as a success. The feeder tails only inserts, updates, replaces and
 * deletes, so it never replays the drop itself. Session commands take the same
 * path, without the wait.
 *
 * A removal (drop, dropIndexes, dropDatabase) converges: NamespaceNotFound or
 * IndexNotFound from one tier means that tier holds nothing to remove, so running
 * it again after a partial failure finishes it on the fast tier. renameCollection
 * of, or onto, a tiered namespace is refused: the policy names the namespace. */

static bool is_command(const proxy_request_t *request, const char *name)
{
    return strcmp(request->command_name, name) == 0;
}

static bool is_removal(const proxy_request_t *request)
{
    return is_command(request, "drop") || is_command(request, "dropIndexes") ||
           is_command(request, "deleteIndexes") || is_command(request, "dropDatabase");
}

static int32_t reply_code(const bson_t *body)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, body, "code") || !BSON_ITER_HOLDS_NUMBER(&iter)) {
        return 0;
    }
    return (int32_t)bson_iter_as_int64(&iter);
}

/* A removal's "nothing to remove here". */
static bool code_means_absent(const proxy_request_t *request, int32_t code)
{
    return is_removal(request) && (code == TC_ERR_NAMESPACE_NOT_FOUND || code == TC_ERR_INDEX_NOT_FOUND);
}

/* Whether a create asks for more than a plain collection, which the fast tier's
 * existing collection (created by a write) may not have. */
static bool create_has_options(const bson_t *command)
{
    static const char *const generic[] = {
        "create", "$db", "lsid", "txnNumber", "$clusterTime", "writeConcern", "comment", "maxTimeMS",
        "$readPreference", "apiVersion", "apiStrict", "apiDeprecationErrors", "autocommit", "startTransaction",
    };
    bson_iter_t iter;
    bson_iter_init(&iter, command);
    while (bson_iter_next(&iter)) {
        bool known = false;
        for (size_t i = 0; i < sizeof generic / sizeof generic[0] && !known; i++) {
            known = strcmp(bson_iter_key(&iter), generic[i]) == 0;
        }
        if (!known) {
            return true;
        }
    }
    return false;
}

static const char *command_database(const proxy_request_t *request)
{
    bson_iter_t iter;
    if (bson_iter_init_find(&iter, &request->command, "$db") && BSON_ITER_HOLDS_UTF8(&iter)) {
        return bson_iter_utf8(&iter, NULL);
    }
    return "";
}

static bool database_is_tiered(const proxy_t *proxy, const char *database)
{
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        if (strcmp(proxy->namespaces[i].config->database, database) == 0) {
            return true;
        }
    }
    return false;
}

/* Answers with the archive's reply, or the fast tier's (fast_reply) when the
 * archive had nothing to remove and the fast tier removed it. */
static void finish_both_tiers(proxy_request_t *request, const uint8_t *fast_reply, size_t fast_length)
{
    proxy_t *proxy = request->proxy;
    access_note_reply(proxy, request->command_name, &request->fields);
    /* An index made or dropped, a collection dropped: writes read the unique indexes again. */
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        namespace_state_t *state = &proxy->namespaces[i];
        if (state == request->namespace_state ||
            (request->wait_database != NULL && strcmp(state->config->database, request->wait_database) == 0)) {
            unique_indexes_forget(proxy, state);
        }
    }
    if (request->route.both.archive_lacked && fast_reply != NULL) {
        router_relay_reply(request, fast_reply, fast_length);
        return;
    }
    uint8_t *reply = request->route.both.archive_reply;
    size_t length = request->route.both.archive_reply_length;
    request->route.both.archive_reply = NULL;
    router_finish_with_message(request, reply, length);
}

/* The fast tier failed after the archive succeeded: an error (the fast tier's code)
 * that says what each tier now holds. */
static void fail_on_fast_tier(proxy_request_t *request, int32_t code, const char *code_name, const char *message)
{
    char text[1024];
    const char *subject = request->ns[0] != '\0' ? request->ns : command_database(request);
    if (request->route.both.archive_lacked) {
        snprintf(text, sizeof text,
                 "%s on %s: the archive holds nothing to remove, and the fast tier failed: %s. The fast tier may "
                 "still hold it; run the command again through thermocline proxy once the cause is fixed",
                 request->command_name, subject, message);
    } else {
        snprintf(text, sizeof text,
                 "%s on %s was applied to the archive, but the fast tier failed: %s. The tiers now differ: the "
                 "archive has the change and the fast tier does not; run the command again through thermocline "
                 "proxy once the cause is fixed",
                 request->command_name, subject, message);
    }
    TC_LOG(TC_LOG_WARNING, LOG_COMPONENT, request->connection_id, "%s", text);
    bson_t body = BSON_INITIALIZER;
    BSON_APPEND_DOUBLE(&body, "ok", 0.0);
    BSON_APPEND_UTF8(&body, "errmsg", text);
    BSON_APPEND_INT32(&body, "code", code);
    BSON_APPEND_UTF8(&body, "codeName", code_name);
    router_finish_with_document(request, &body, 0);
    bson_destroy(&body);
}

/* The fast tier could not be reached (or the request to it not built). */
static void fail_on_fast_tier_send(proxy_request_t *request, const bson_error_t *error)
{
    int32_t code = error->domain == TC_ERROR_DOMAIN ? (int32_t)error->code : TC_ERR_HOST_UNREACHABLE;
    fail_on_fast_tier(request, code, tc_error_code_name(code), error->message);
}

/* --- TTLs stay off the fast tier -------------------------------------------------------
 * An index's expireAfterSeconds reaches the fast tier neither with createIndexes
 * nor with collMod: the fast tier's own TTL monitor would delete documents on its
 * clock, and the feeder would replay those deletes into the archive as a client's.
 * The evictor applies the archive's rule instead, which the index sync records
 * (src/tier/README.md, TTL) within indexSyncPeriod. */

/* spec without expireAfterSeconds into out; true when it had one. */
static bool copy_without_ttl(const bson_t *spec, bson_t *out)
{
    bson_iter_t iter;
    bool had = false;
    bson_iter_init(&iter, spec);
    while (bson_iter_next(&iter)) {
        if (strcmp(bson_iter_key(&iter), "expireAfterSeconds") == 0) {
            had = true;
        } else {
            bson_append_iter(out, NULL, 0, &iter);
        }
    }
    return had;
}

/* The command for the fast tier, its TTLs taken out (the client's $clusterTime
 * too: it is the archive's, which the fast tier does not know); *out_changed false
 * when there was none to take out, *out_empty when a collMod keeps nothing to do. */
static void command_without_ttl(const proxy_request_t *request, bson_t *out, bool *out_changed, bool *out_empty)
{
    static const char *const generic[] = {"collMod", "$db", "lsid", "$clusterTime", "writeConcern", "comment",
                                          "maxTimeMS", "$readPreference", "apiVersion", "apiStrict",
                                          "apiDeprecationErrors"};
    bool collmod = is_command(request, "collMod");
    bool options_left = false;
    bson_iter_t iter, indexes;
    *out_changed = false;
    bson_init(out);
    bson_iter_init(&iter, &request->command);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        bson_t view, stripped = BSON_INITIALIZER;
        if (strcmp(key, "$clusterTime") == 0) {
            continue;
        }
        if (!collmod && strcmp(key, "indexes") == 0 && BSON_ITER_HOLDS_ARRAY(&iter) &&
            bson_iter_recurse(&iter, &indexes)) {
            bson_t array;
            bson_append_array_begin(out, "indexes", -1, &array);
            while (bson_iter_next(&indexes)) {
                bson_t spec = BSON_INITIALIZER;
                if (BSON_ITER_HOLDS_DOCUMENT(&indexes) && bson_view_of(&indexes, &view)) {
                    *out_changed |= copy_without_ttl(&view, &spec);
                    bson_append_document(&array, bson_iter_key(&indexes), -1, &spec);
                } else {
                    bson_append_iter(&array, NULL, 0, &indexes);
                }
                bson_destroy(&spec);
            }
            bson_append_array_end(out, &array);
        } else if (collmod && strcmp(key, "index") == 0 && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
                   bson_view_of(&iter, &view) && copy_without_ttl(&view, &stripped)) {
            *out_changed = true;
            /* Left with only which index it names, the index option has nothing to change. */
            bool names_only = true;
            bson_iter_t field;
            bson_iter_init(&field, &stripped);
            while (bson_iter_next(&field)) {
                names_only &= strcmp(bson_iter_key(&field), "name") == 0 ||
                              strcmp(bson_iter_key(&field), "keyPattern") == 0;
            }
            if (!names_only) {
                bson_append_document(out, "index", -1, &stripped);
                options_left = true;
            }
        } else {
            bson_append_iter(out, NULL, 0, &iter);
            bool is_generic = false;
            for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++) {
                is_generic |= strcmp(key, generic[i]) == 0;
            }
            options_left |= !is_generic;
        }
        bson_destroy(&stripped);
    }
    *out_empty = collmod && !options_left;
}

static void send_both_to_fast(proxy_request_t *request)
{
    bson_t command;
    bool changed, empty;
    uint8_t *encoded;
    size_t length;
    bson_error_t error;
    if (!is_command(request, "createIndexes") && !is_command(request, "collMod")) {
        router_call_tier(request, PHASE_BOTH_ON_FAST, PROXY_TIER_FAST, request->message, request->length, NULL);
        return;
    }
    command_without_ttl(request, &command, &changed, &empty);
    if (!changed) {
        bson_destroy(&command);
        router_call_tier(request, PHASE_BOTH_ON_FAST, PROXY_TIER_FAST, request->message, request->length, NULL);
        return;
    }
    if (empty) {
        bson_destroy(&command);
        finish_both_tiers(request, NULL, 0); /* a TTL change alone: the archive's, which the evictor follows */
        return;
    }
    bool built = wire_op_msg_build(0, 0, 0, &command, NULL, 0, &encoded, &length, &error);
    bson_destroy(&command);
    if (!built) {
        fail_on_fast_tier_send(request, &error);
        return;
    }
    router_call_tier(request, PHASE_BOTH_ON_FAST, PROXY_TIER_FAST, encoded, length, encoded);
}

/* collMod's collection exists in the fast tier now: collMod again. */
void router_both_on_fast_created(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body;
    bson_error_t parse_error;
    if (outcome->error == NULL && wire_op_msg_peek_body(outcome->reply, outcome->length, &body, &parse_error) &&
        (router_reply_is_ok(&body) || reply_code(&body) == TC_ERR_NAMESPACE_EXISTS)) {
        send_both_to_fast(request);
        return;
    }
    router_both_on_fast_reply(request, outcome); /* the create failed: answered as collMod failing there */
}

/* collMod on a tiered namespace the fast tier has no collection for (no write has
 * created it yet): create it there, so that what collMod sets (a validator...)
 * applies to the writes that land there. */
static void create_fast_collection(proxy_request_t *request)
{
    bson_t create = BSON_INITIALIZER;
    uint8_t *encoded;
    size_t length;
    bson_error_t error;
    const config_namespace_t *names = request->namespace_state->config;
    request->route.both.fast_created = true;
    BSON_APPEND_UTF8(&create, "create", names->collection);
    BSON_APPEND_UTF8(&create, "$db", names->database);
    bool built = wire_op_msg_build(0, 0, 0, &create, NULL, 0, &encoded, &length, &error);
    bson_destroy(&create);
    if (!built) {
        fail_on_fast_tier_send(request, &error);
        return;
    }
    router_call_tier(request, PHASE_BOTH_CREATING_ON_FAST, PROXY_TIER_FAST, encoded, length, encoded);
}

void router_both_on_fast_reply(proxy_request_t *request, const router_outcome_t *outcome)
{
    const uint8_t *reply = outcome->reply;
    size_t length = outcome->length;
    bson_t body;
    bson_error_t parse_error;
    bson_iter_t iter;
    if (outcome->error != NULL) {
        request->proxy->requests_failed++;
        fail_on_fast_tier_send(request, outcome->error);
        return;
    }
    if (!wire_op_msg_peek_body(reply, length, &body, &parse_error)) {
        fail_on_fast_tier(request, TC_ERR_OPERATION_FAILED, tc_error_code_name(TC_ERR_OPERATION_FAILED),
                          "its reply could not be read");
        return;
    }
    int32_t code = reply_code(&body);
    if (router_reply_is_ok(&body)) {
        finish_both_tiers(request, reply, length);
        return;
    }
    if (code_means_absent(request, code)) {
        finish_both_tiers(request, NULL, 0); /* the archive's reply: its error when neither tier held it */
        return;
    }
    if (is_command(request, "collMod") && code == TC_ERR_NAMESPACE_NOT_FOUND && !request->route.both.fast_created) {
        create_fast_collection(request);
        return;
    }
    if (is_command(request, "create") && code == TC_ERR_NAMESPACE_EXISTS && !create_has_options(&request->command)) {
        finish_both_tiers(request, NULL, 0); /* a write created it there: a plain collection, as asked */
        return;
    }
    const char *code_name = tc_error_code_name(code);
    const char *message = "no error message";
    if (bson_iter_init_find(&iter, &body, "codeName") && BSON_ITER_HOLDS_UTF8(&iter)) {
        code_name = bson_iter_utf8(&iter, NULL);
    }
    if (bson_iter_init_find(&iter, &body, "errmsg") && BSON_ITER_HOLDS_UTF8(&iter)) {
        message = bson_iter_utf8(&iter, NULL);
    }
    fail_on_fast_tier(request, code != 0 ? code : TC_ERR_OPERATION_FAILED, code_name, message);
}

void router_both_on_archive_reply(proxy_request_t *request, const router_outcome_t *outcome)
{
    const uint8_t *reply = outcome->reply;
    size_t length = outcome->length;
    const bson_error_t *error = outcome->error;
    bson_t body;
    bson_error_t parse_error;
    /* A removal the archive had nothing for goes on: the fast tier may hold it. */
    request->route.both.archive_lacked = error == NULL && wire_op_msg_peek_body(reply, length, &body, &parse_error) &&
                              !router_reply_is_ok(&body) && code_means_absent(request, reply_code(&body));
    if (!request->route.both.archive_lacked && !router_take_ok_reply(request, reply, length, error, &body)) {
        return; /* the archive failed or refused: the fast tier is untouched */
    }
    request->route.both.archive_reply = bson_malloc(length);
    memcpy(request->route.both.archive_reply, reply, length);
    request->route.both.archive_reply_length = length;
    send_both_to_fast(request);
}

void router_both_send_to_archive(proxy_request_t *request)
{
    request->route_kind = ROUTE_STATE_BOTH;
    router_call_tier(request, PHASE_BOTH_ON_ARCHIVE, PROXY_TIER_ARCHIVE, request->message, request->length, NULL);
}

/* renameCollection names a tiered namespace as its source or its target. */
static bool refuse_tiered_rename(proxy_request_t *request)
{
    bson_iter_t iter;
    bson_error_t error;
    const char *target = "";
    if (bson_iter_init_find(&iter, &request->command, "to") && BSON_ITER_HOLDS_UTF8(&iter)) {
        target = bson_iter_utf8(&iter, NULL);
    }
    if (request->namespace_state != NULL) {
        tc_error_set(&error, TC_ERR_ILLEGAL_OPERATION,
                     "cannot rename %s: it is tiered by thermocline proxy (its policy in the proxy's config names "
                     "it), so a renamed collection would leave the policy naming a collection that no longer "
                     "exists and its documents split between the tiers under a name without a policy; copy the "
                     "documents to a new collection instead, or change the config",
                     request->ns);
    } else if (proxy_find_namespace(request->proxy, target) != NULL) {
        tc_error_set(&error, TC_ERR_ILLEGAL_OPERATION,
                     "cannot rename %s to %s: %s is tiered by thermocline proxy (its policy in the proxy's config "
                     "names it), and a rename would put documents in the archive that the fast tier does not hold; "
                     "insert them through the proxy instead",
                     request->ns[0] != '\0' ? request->ns : "the collection", target, target);
    } else {
        return false;
    }
    router_finish_with_error(request, &error);
    return true;
}

/* A command the planner says applies to both tiers. Session commands (endSessions,
 * killSessions...) always: transactions run on the fast tier, so its sessions are
 * the ones that hold state. A catalog command when it concerns a tiered namespace,
 * else the archive alone (which holds every other namespace whole). */
void router_both_tiers_start(proxy_request_t *request)
{
    if (request->decision.kind == PLAN_KIND_SESSION) {
        router_both_send_to_archive(request);
        return;
    }
    if (is_command(request, "renameCollection")) {
        if (!refuse_tiered_rename(request)) {
            router_forward(request, PROXY_TIER_ARCHIVE);
        }
        return;
    }
    if (is_command(request, "dropDatabase")) {
        const char *database = command_database(request);
        if (!database_is_tiered(request->proxy, database)) {
            router_forward(request, PROXY_TIER_ARCHIVE);
            return;
        }
        request->wait_database = database;
    } else if (request->namespace_state == NULL) {
        router_forward(request, PROXY_TIER_ARCHIVE);
        return;
    }
    /* A stopped feed (the archive refused a replayed write) must not block what
     * may be its fix, such as dropping the unique index that refused it. */
    request->tolerates_stopped_feed = true;
    router_wait_for_feeder(request, false, PHASE_BOTH_ON_ARCHIVE);
}

/* The archive learns of a database or collection the fast tier created (by a
 * write) only when the feeder replays a write to it: a listing waits for the
 * feeder as a read does (read-your-writes across tiers). A stopped feed does not
 * block it: listing is how an operator looks for the cause. */
bool router_route_catalog_listing(proxy_request_t *request)
{
    if (is_command(request, "listDatabases")) {
        if (request->proxy->namespace_count == 0) {
            return false;
        }
        request->waits_for_every_namespace = true;
    } else if (is_command(request, "listCollections")) {
        const char *database = command_database(request);
        if (!database_is_tiered(request->proxy, database)) {
            return false;
        }
        request->wait_database = database;
    } else {
        return false;
    }
    request->tolerates_stopped_feed = true;
    router_wait_for_feeder(request, false, PHASE_FORWARDING);
    return true;
}

/* $out, $merge or mapReduce's out writes a collection in the archive directly,
 * around the fast tier: refused when that collection is tiered, or unnamed. */
bool router_refuse_tiered_output(proxy_request_t *request)
{
    const plan_decision_t *decision = &request->decision;
    bson_error_t error;
    if (!decision->writes_output) {
        return false;
    }
    if (decision->output_namespace[0] == '\0') {
        tc_error_set(&error, TC_ERR_ILLEGAL_OPERATION,
                     "%s: thermocline proxy cannot tell which collection it writes, so it cannot tell whether that "
                     "collection is tiered; name the output collection as a string or {db, coll}",
                     decision->reason_text);
    } else if (proxy_find_namespace(request->proxy, decision->output_namespace) != NULL) {
        tc_error_set(&error, TC_ERR_ILLEGAL_OPERATION,
                     "%s, which is tiered by thermocline proxy: the archive would write it directly, around the fast "
                     "tier, which must hold that collection's recent documents; write into a collection without a "
                     "tiering policy, or insert through the proxy",
                     decision->reason_text);
    } else {
        return false;
    }
    router_finish_with_error(request, &error);
    return true;
}
