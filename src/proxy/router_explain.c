/* explain through the proxy: the tier's own explain, with which tier the planner
 * chose and why; a point read's explain runs on both tiers. */
#include "proxy/router_private.h"

#include <string.h>

/* --- explain: the tier's own explain, and which tier the planner chose and why ---------
 * The reply is the tier's explain with one more field before ok:
 *   thermocline: {tier: "fast" | "archive" | "both", reason: <the planner's text>,
 *                 reasonName: <plan_reason_name>, archive: <the archive's explain>}
 * "both" is a point read: the fast tier first, then the archive for the ids the fast
 * tier lacks; its top level is the fast tier's explain, `archive` the archive's (as it
 * would run the same query). An error reply passes unchanged, as mongod gave it. */

bool router_request_is_explain(const proxy_request_t *request)
{
    return request->has_decision && (request->decision.is_explain || strcmp(request->command_name, "explain") == 0);
}

/* The fields of a tier's explain, without what belongs to the reply rather than the
 * explain (ok, and the replica set's times). */
static void append_explain_fields(bson_t *out, const bson_t *body)
{
    bson_iter_t iter;
    bson_iter_init(&iter, body);
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "ok") != 0 && strcmp(key, "$clusterTime") != 0 && strcmp(key, "operationTime") != 0) {
            bson_append_iter(out, key, -1, &iter);
        }
    }
}

static void append_thermocline_explain(proxy_request_t *request, const bson_t *archive_body, bson_t *out)
{
    const plan_decision_t *decision = &request->decision;
    const char *tier = decision->route == PLAN_ROUTE_FAST_THEN_ARCHIVE ? "both" : proxy_tier_name(request->tier);
    bson_t thermocline;
    BSON_APPEND_DOCUMENT_BEGIN(out, "thermocline", &thermocline);
    BSON_APPEND_UTF8(&thermocline, "tier", tier);
    BSON_APPEND_UTF8(&thermocline, "reason", decision->reason_text);
    BSON_APPEND_UTF8(&thermocline, "reasonName", plan_reason_name(decision->reason));
    if (archive_body != NULL) {
        bson_t archive;
        BSON_APPEND_DOCUMENT_BEGIN(&thermocline, "archive", &archive);
        append_explain_fields(&archive, archive_body);
        bson_append_document_end(&thermocline, &archive);
    }
    bson_append_document_end(out, &thermocline);
}

/* Answers with body (a tier's ok explain) and the thermocline field before its ok. */
void router_finish_explain(proxy_request_t *request, const bson_t *body, const bson_t *archive_body)
{
    bson_t reply = BSON_INITIALIZER;
    bson_iter_t iter;
    bool added = false;
    bson_iter_init(&iter, body);
    while (bson_iter_next(&iter)) {
        if (!added && strcmp(bson_iter_key(&iter), "ok") == 0) {
            append_thermocline_explain(request, archive_body, &reply);
            added = true;
        }
        bson_append_iter(&reply, bson_iter_key(&iter), -1, &iter);
    }
    if (!added) {
        append_thermocline_explain(request, archive_body, &reply);
    }
    router_finish_with_document(request, &reply, 0);
    bson_destroy(&reply);
}

void router_explain_on_archive_reply(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body;
    if (!router_take_ok_reply(request, outcome->reply, outcome->length, outcome->error, &body)) {
        return;
    }
    router_finish_explain(request, request->route.explain.fast_body, &body);
}

void router_explain_send_archive(proxy_request_t *request)
{
    router_call_tier(request, PHASE_EXPLAINING_ARCHIVE, PROXY_TIER_ARCHIVE, request->message, request->length, NULL);
}

void router_explain_on_fast_reply(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body;
    if (!router_take_ok_reply(request, outcome->reply, outcome->length, outcome->error, &body)) {
        return;
    }
    request->route.explain.fast_body = bson_copy(&body);
    router_wait_for_feeder(request, true, PHASE_EXPLAINING_ARCHIVE);
}

/* A point read's explain: the client's explain on both tiers, the fast tier first. */
void router_explain_both_start(proxy_request_t *request)
{
    request->route_kind = ROUTE_STATE_EXPLAIN;
    router_call_tier(request, PHASE_EXPLAINING_FAST, PROXY_TIER_FAST, request->message, request->length, NULL);
}
