/* Private to the router's files (router.c and router_*.c): one client request's
 * state from arrival to reply, and the steps the files call across. Everything
 * here runs on the proxy's event-loop thread. */
#ifndef TC_PROXY_ROUTER_PRIVATE_H
#define TC_PROXY_ROUTER_PRIVATE_H

#include "proxy/proxy_private.h"
#include "proxy/retry.h"

/* The request's current send to a tier, kept so that it can be sent once more
 * (retry.h's rules) once the tier's primary is found again (recovery.c). */
typedef struct tier_call {
    proxy_tier_t tier;
    uint8_t *message;       /* the client's own message, or owned */
    size_t length;
    uint8_t *owned;         /* a message the router built for this step */
    backend_reply_fn done;
    bool retried;
    /* The first attempt's failure, answered if the primary is not found in time. */
    bool failed_on_network;
    bson_error_t network_error;
    uint8_t *failed_reply;
    size_t failed_length;
} tier_call_t;

typedef struct proxy_request {
    proxy_t *proxy;
    server_pending_t *pending;
    access_client_t client;  /* who sent it (access.c) */
    uint64_t connection_id;
    int32_t client_request_id;
    bool legacy;            /* an OP_QUERY command: answered with OP_REPLY */
    bool compressed;
    uint8_t compressor;
    bool no_reply;          /* the client sent moreToCome */
    uint8_t *message;       /* the request as forwarded (decompressed, flags cleared) */
    size_t length;
    bson_t command;         /* body with document sequences merged (for the planner) */
    const char *command_name;
    plan_decision_t decision;
    bool has_decision;
    namespace_state_t *namespace_state;
    char ns[PLAN_NAMESPACE_SIZE];
    proxy_tier_t tier;
    uint64_t members[PROXY_TIER_COUNT]; /* the member of each tier its reads go to (0: the primary) */
    int64_t getmore_proxy_id; /* getMore: the client's cursor id */
    bool opens_cursor;        /* the reply may carry a new cursor to map */
    bool pinned; /* the documents it faults in are pinned against the evictor */
    /* PLAN_ROUTE_FAST_THEN_ARCHIVE: the fast tier's documents and the ids it lacked. */
    bool has_point_state;
    bool point_rebuilt; /* the fast tier got our find (one batch), not the client's */
    bson_t point_fast_documents;
    bson_t point_missing_ids;
    /* explain of a point read: the fast tier's explain, while the archive's runs. */
    bson_t *explain_fast_body;
    retry_kind_t retry_kind; /* of the client's command; also its internal steps' */
    tier_call_t call;
    uint64_t operation_time; /* the latest operationTime of its tiers' replies */
    bson_error_t refusal; /* a transaction's command refused: sent once its abort is done */
    /* A command applied to both tiers, the archive first (a catalog command on a
     * tiered namespace, a session command). */
    const char *wait_database;   /* dropDatabase, listCollections: the feeder wait covers its tiered namespaces */
    bool waits_for_every_namespace; /* listDatabases: the feeder wait covers every tiered namespace */
    bool tolerates_stopped_feed; /* a stopped feed does not hold it back (it may be the fix) */
    uint8_t *archive_reply;      /* the archive's reply, answered once the fast tier has the change */
    size_t archive_reply_length;
    bool archive_lacked;         /* a removal the archive had nothing for (NamespaceNotFound...) */
    bool fast_created;           /* collMod: the fast tier's collection was created for it */
} proxy_request_t;

/* --- router.c: replies, sends, the main path ------------------------------------- */

/* Frees the request (its reply sent, or its connection closing). */
void router_request_free(proxy_request_t *request);

/* Each finishes the request: sends the reply (compressed like the request was,
 * unless the client sent moreToCome) and frees the request. */
void router_finish_with_message(proxy_request_t *request, uint8_t *encoded, size_t length); /* takes encoded */
void router_finish_with_document(proxy_request_t *request, const bson_t *document, uint32_t delay_ms);
void router_finish_with_error(proxy_request_t *request, const bson_error_t *error);
/* A tier's reply (an error), as it is. */
void router_relay_reply(proxy_request_t *request, const uint8_t *reply, size_t length);
bool router_reply_is_ok(const bson_t *body);
/* The opening of a tier's reply (a backend_reply_fn's arguments): true with
 * out_body (a view into reply) when the reply is ok: 1; else false, the request
 * finished: with the error of a tier not reached (counted in requestsFailed), or
 * with the tier's reply (an error, or unreadable) relayed as it is. */
bool router_take_ok_reply(proxy_request_t *request, const uint8_t *reply, size_t length, const bson_error_t *error,
                          bson_t *out_body) TC_MUST_CHECK;

/* Sends message to tier; done gets the reply. owned (NULL for the client's own
 * message) is kept until the request ends, for a retry. */
void router_send_to_tier(proxy_request_t *request, proxy_tier_t tier, uint8_t *message, size_t length,
                         uint8_t *owned, backend_reply_fn done);
/* The client's own message to tier, its reply (cursor ids patched) to the client. */
void router_forward(proxy_request_t *request, proxy_tier_t tier);
void router_forward_to_archive(proxy_request_t *request);
/* backend_reply_fn of router_forward. */
void router_on_tier_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error);

/* --- router_local.c -------------------------------------------------------------- */

/* hello, isMaster, ping, thermoclineStatus. */
void router_answer_locally(proxy_request_t *request);

/* --- router_wait.c --------------------------------------------------------------- */

typedef void (*router_resume_fn)(proxy_request_t *request);

/* Runs resume once the feeder has applied the writes acknowledged so far to the
 * namespaces the request reads (all of them, or only the deletes: deletes_only);
 * fails the request when its feed stopped (unless tolerates_stopped_feed) or
 * after readYourWritesWait. */
void router_after_feeder_caught_up(proxy_request_t *request, bool deletes_only, router_resume_fn resume);

/* Queues the request: for_pin, until router_pin_fault_in succeeds; else until
 * the feeder has caught up on blocking. */
void router_queue_wait(proxy_request_t *request, bool for_pin, bool deletes_only, namespace_state_t *blocking,
                       router_resume_fn resume);

/* Pins the documents the write faults in against the evictor (all or none);
 * false while one is being evicted. */
bool router_pin_fault_in(proxy_request_t *request);
void router_unpin_fault_in(proxy_request_t *request);

/* Whether ns ("db.collection") is in database. */
bool router_namespace_in_database(const char *ns, const char *database);

/* --- router_fault_in.c ----------------------------------------------------------- */

/* Copies in what the write may touch (after the deletes before it reached the
 * archive), then forwards the write to the fast tier. */
void router_fault_in_after_deletes(proxy_request_t *request);

/* --- router_point_read.c --------------------------------------------------------- */

void router_route_point_read(proxy_request_t *request);

/* --- router_explain.c ------------------------------------------------------------ */

bool router_request_is_explain(const proxy_request_t *request);
/* Answers with body (a tier's ok explain) and the thermocline field; archive_body:
 * the archive's explain of a point read, else NULL. */
void router_finish_explain(proxy_request_t *request, const bson_t *body, const bson_t *archive_body);
/* A point read's explain: on both tiers. */
void router_route_explain_both(proxy_request_t *request);

/* --- router_transaction.c -------------------------------------------------------- */

/* Whether the transaction may run this command; if not, why (in reason). */
bool router_transaction_may_run(const proxy_request_t *request, char *reason, size_t reason_size);
/* Refuses the command with OperationNotSupportedInTransaction, once the fast tier
 * has aborted the transaction. */
void router_refuse_in_transaction(proxy_request_t *request, const char *reason);
/* A commit the fast tier acknowledged: reads of the archive wait for the feeder. */
void router_note_transaction_commit(proxy_request_t *request, const bson_t *body);

/* --- router_catalog.c ------------------------------------------------------------ */

/* A command the planner says applies to both tiers (catalog, sessions). */
void router_route_both_tiers(proxy_request_t *request);

/* listDatabases, and listCollections of a database with tiered namespaces, which
 * the archive answers: after the feeder caught up (true), like reads. false: not
 * such a command. */
bool router_route_catalog_listing(proxy_request_t *request);
/* Refuses (and answers) $out, $merge or mapReduce output into a tiered namespace,
 * or one the planner cannot name; false when the request goes on. */
bool router_refuse_tiered_output(proxy_request_t *request);

#endif
