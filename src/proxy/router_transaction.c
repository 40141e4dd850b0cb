/* Multi-document transactions through the proxy: they run on the fast tier, and
 * only while each command is one the fast tier answers completely. */
#include "proxy/router_private.h"

#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

/* --- transactions ------------------------------------------------------------------
 * A multi-document transaction runs on the fast tier, and only while each of its
 * commands is one the fast tier answers completely there: a read the planner
 * proves inside the horizon, a write with nothing to fault in (or, in the
 * command that starts the transaction, whose fault-in is done before its snapshot
 * is taken), on a tiered namespace. The first command that is not gets
 * OperationNotSupportedInTransaction naming its namespace, without
 * TransientTransactionError (retrying cannot help), once the fast tier has
 * aborted the transaction. commitTransaction and abortTransaction go to the fast
 * tier, which holds every transaction. */

/* Whether the transaction may run this command; if not, why (in reason). */
bool router_transaction_may_run(const proxy_request_t *request, char *reason, size_t reason_size)
{
    const plan_decision_t *decision = &request->decision;
    if (decision->kind == PLAN_KIND_TRANSACTION || decision->route == PLAN_ROUTE_CURSOR_OWNER) {
        return true;
    }
    if (request->namespace_state == NULL) {
        snprintf(reason, reason_size, "%s has no tiering policy, so only the archive holds it",
                 request->ns[0] != '\0' ? request->ns : "the database");
        return false;
    }
    if (decision->route != PLAN_ROUTE_FAST) {
        snprintf(reason, reason_size, "the fast tier cannot answer it completely (%s)", decision->reason_text);
        return false;
    }
    if (decision->kind == PLAN_KIND_WRITE && decision->needs_fault_in &&
        !bson_has_field(&request->command, "startTransaction")) {
        snprintf(reason, reason_size,
                 "it must first copy archive documents to the fast tier, which the transaction's snapshot, taken "
                 "by its first command, would not show (%s)",
                 decision->reason_text);
        return false;
    }
    return true;
}

void router_transaction_on_aborted(proxy_request_t *request)
{
    /* Whatever the tier answered, the transaction is over there. */
    router_finish_with_error(request, &request->route.transaction.refusal);
}

/* Refuses the command and aborts its transaction on the fast tier first, so the
 * client's next command finds it aborted. A refused first command started
 * nothing there. */
void router_refuse_in_transaction(proxy_request_t *request, const char *reason)
{
    request->route_kind = ROUTE_STATE_TRANSACTION_REFUSAL;
    tc_error_set(&request->route.transaction.refusal, TC_ERR_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                 "%s on %s cannot run in a transaction through thermocline proxy: %s. Transactions run on the fast "
                 "tier only; this one was aborted",
                 request->command_name, request->ns[0] != '\0' ? request->ns : "(no collection)", reason);
    bson_iter_t lsid, number;
    bson_t abort = BSON_INITIALIZER;
    uint8_t *encoded = NULL;
    size_t length;
    bson_error_t error;
    bool sent = false;
    if (!bson_has_field(&request->command, "startTransaction") &&
        bson_iter_init_find(&lsid, &request->command, "lsid") &&
        bson_iter_init_find(&number, &request->command, "txnNumber")) {
        BSON_APPEND_INT32(&abort, "abortTransaction", 1);
        bson_append_iter(&abort, "lsid", 4, &lsid);
        bson_append_iter(&abort, "txnNumber", 9, &number);
        BSON_APPEND_BOOL(&abort, "autocommit", false);
        BSON_APPEND_UTF8(&abort, "$db", "admin");
        if (wire_op_msg_build(0, 0, 0, &abort, NULL, 0, &encoded, &length, &error)) {
            request->tier = PROXY_TIER_FAST;
            router_enter(request, PHASE_ABORTING_TRANSACTION);
            backend_pool_send(request->proxy->tiers[PROXY_TIER_FAST], encoded, length, router_on_step_reply,
                              request);
            bson_free(encoded);
            sent = true;
        }
    }
    bson_destroy(&abort);
    if (!sent) {
        router_finish_with_error(request, &request->route.transaction.refusal);
    }
}

/* A committed transaction may have written any tiered namespace: reads sent to
 * the archive wait until the feeder has applied it, as after a plain write. */
uint64_t router_note_transaction_commit(proxy_request_t *request, const bson_t *body)
{
    bson_iter_t iter;
    uint64_t time = timestamp_find(body, "operationTime");
    if (!bson_iter_init_find(&iter, body, "ok") || bson_iter_as_double(&iter) != 1.0 || time == 0 ||
        request->proxy->namespace_count == 0) {
        return 0;
    }
    for (size_t i = 0; i < request->proxy->namespace_count; i++) {
        namespace_state_t *state = &request->proxy->namespaces[i];
        state->last_write_time = time > state->last_write_time ? time : state->last_write_time;
        state->last_delete_time = time > state->last_delete_time ? time : state->last_delete_time;
    }
    return time;
}
