/* Private to the router's files (router.c and router_*.c): one client request's
 * state from arrival to reply, and the steps the files call across. Everything
 * here runs on the proxy's event-loop thread. */
#ifndef TC_PROXY_ROUTER_PRIVATE_H
#define TC_PROXY_ROUTER_PRIVATE_H

#include "proxy/proxy_private.h"
#include "proxy/retry.h"

/* A request's phase: what it waits for now. Every asynchronous step (access.c,
 * member_route.c, a tier's reply, a wait in proxy->waits, recovery.c) ends in
 * router_advance(), which hands the outcome to the phase's step; a step moves the
 * request on with router_enter(), the one function that changes the phase, and
 * aborts on a move the table in router.c does not allow. README.md draws them. */
typedef enum request_phase {
    PHASE_DECODED,              /* arrived, its command decoded */
    PHASE_AUTHENTICATING,       /* access.c runs a SASL step, logout or connectionStatus */
    PHASE_ANSWERING_HELLO,      /* access.c adds hello's authentication fields */
    PHASE_RELOADING,            /* thermoclineReload: until reload.c has applied the config or refused it */
    PHASE_ADMITTING,            /* access.c checks the user's privileges */
    PHASE_LOADING_INDEXES,      /* a write: until the namespace's unique indexes are read from the archive */
    PHASE_CHOOSING_MEMBERS,     /* planned; member_route.c picks each tier's member for $readPreference */
    PHASE_WAITING_FOR_PINS,     /* a write that faults in: until its documents are no longer being evicted */
    PHASE_PINNING_FAST,         /* ... its pins written in the fast tier too (router_pins.c), */
    PHASE_READING_EVICTIONS,    /* ... the evictor's intents that cover them read, */
    PHASE_WAITING_FOR_EVICTIONS, /* ... and, while one does, read again after a pause */
    PHASE_WAITING_FOR_FEEDER,   /* until the feeder applied the writes (or deletes) the archive must show */
    PHASE_FORWARDING,           /* the client's command on a tier; the reply goes back (cursor ids patched) */
    PHASE_PUBLISHING_DELETES,   /* a delete's time recorded for other proxies before its reply goes back */
    PHASE_FAULT_IN_CHECKING_FAST, /* a write's ids looked for in the fast tier: the archive only for the rest */
    PHASE_FAULT_IN_FINDING,     /* the archive's documents the write may touch */
    PHASE_FAULT_IN_MARKING,     /* ... their fault marks written pending (thermocline.workerWrites), */
    PHASE_FAULT_IN_INSERTING,   /* ... copied into the fast tier, */
    PHASE_FAULT_IN_MARKED,      /* ... their marks done; then the write is forwarded */
    PHASE_UNIQUE_READING_FAST,  /* the documents a write computes unique keys from (router_unique.c) */
    PHASE_POINT_READING_FAST,   /* a find by _id on the fast tier */
    PHASE_POINT_READING_ARCHIVE, /* ... and on the archive for the ids the fast tier lacked */
    PHASE_EXPLAINING_FAST,      /* a point read's explain on the fast tier, */
    PHASE_EXPLAINING_ARCHIVE,   /* then on the archive */
    PHASE_BOTH_ON_ARCHIVE,      /* a command both tiers apply: the archive first, */
    PHASE_BOTH_CREATING_ON_FAST, /* (collMod: the fast tier's collection created first) */
    PHASE_BOTH_ON_FAST,         /* then the fast tier */
    PHASE_ABORTING_TRANSACTION, /* a command refused in a transaction: its abort on the fast tier first */
    PHASE_STREAM_READING_MARKS, /* a change stream's batch: the marks of its inserts and deletes */
    PHASE_STREAM_WAITING_FOR_MARKS, /* ... one of them pending: read again after a pause */
    PHASE_STREAM_LOOKING_UP,    /* ... updateLookup's documents the fast tier no longer held, in the archive */
    PHASE_AWAITING_PRIMARY,     /* a call that failed retryably: until recovery.c finds the primary again */
    PHASE_FINISHED,             /* answered (or its connection closing); freed at once */
    PHASE_COUNT
} request_phase_t;

/* What an asynchronous step handed back to router_advance(): a tier's reply (or
 * error), access.c's reply document, the members chosen, or nothing (a wait ended,
 * a primary found). */
typedef struct router_outcome {
    const uint8_t *reply;
    size_t length;
    const bson_error_t *error;
    const bson_t *document;
    const uint64_t *member_ids;
    bool recovered; /* PHASE_AWAITING_PRIMARY: the primary was found in time */
} router_outcome_t;

/* The request's current call to a tier, kept so that it can be sent once more
 * (retry.h's rules) once the tier's primary is found again (recovery.c). */
typedef struct tier_call {
    proxy_tier_t tier;
    request_phase_t phase;  /* the phase its reply goes to */
    uint8_t *message;       /* the client's own message, or owned */
    size_t length;
    uint8_t *owned;         /* a message the router built for this step */
    bool retried;
    /* The first attempt's failure, answered if the primary is not found in time. */
    bool failed_on_network;
    bson_error_t network_error;
    uint8_t *failed_reply;
    size_t failed_length;
} tier_call_t;

/* Which member of proxy_request_t.route is live (set when the route starts). */
typedef enum route_state_kind {
    ROUTE_STATE_NONE,
    ROUTE_STATE_POINT,
    ROUTE_STATE_EXPLAIN,
    ROUTE_STATE_BOTH,
    ROUTE_STATE_TRANSACTION_REFUSAL,
    ROUTE_STATE_FAULT_IN,
    ROUTE_STATE_STREAM,
} route_state_kind_t;

typedef struct proxy_request {
    proxy_t *proxy;
    server_pending_t *pending;
    request_phase_t phase;   /* only router_enter() changes it */
    /* Where its time went (the loop's clock, milliseconds), for the slow-operation log. */
    uint64_t arrived_ms;
    uint64_t arrived_ns;     /* uv_hrtime(): the latency metrics.c observes */
    uint64_t phase_entered_ms;
    uint32_t phase_ms[PHASE_COUNT];
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
    fields_t fields;        /* command's top-level fields, indexed once when it is admitted */
    const char *command_name;
    plan_decision_t decision;
    bool has_decision;
    namespace_state_t *namespace_state; /* points into generation */
    proxy_generation_t *generation; /* current when it arrived: held until it is freed */
    char ns[PLAN_NAMESPACE_SIZE];
    proxy_tier_t tier;
    uint64_t members[PROXY_TIER_COUNT]; /* the member of each tier its reads go to (0: the primary) */
    int64_t getmore_proxy_id; /* getMore: the client's cursor id */
    bool pinned; /* the documents it faults in are pinned against the evictor */
    tier_progress_t *pin_progress; /* ... in this progress (a reload may replace the proxy's), */
    size_t pin_slot;               /* ... under its namespace's slot there */
    struct { /* its pins in the fast tier (router_pins.c), for an evictor in another process */
        bson_t *keys;            /* the pin documents' _ids (owned; NULL: none written) */
        int64_t sent_ms;         /* monotonic: when they were sent */
        bson_t *evictions;       /* the evictor's intents seen covering them (owned; NULL: not read yet) */
        int64_t waiting_since_ms; /* monotonic: the first read of the intents */
    } fast_pins;
    bool change_stream; /* opens or continues a change stream on a tiered namespace (on the fast tier) */
    bool stream_update_lookup; /* ... with fullDocument: "updateLookup" */
    bson_t *stream_stages; /* ... the stages after $changeStream the proxy applies (owned; NULL: none) */
    struct proxy_request *next_index_waiter; /* PHASE_LOADING_INDEXES: the namespace's list */
    struct router_unique *unique; /* router_unique.c's state once its read started (owned) */
    retry_kind_t retry_kind; /* of the client's command; also its internal steps' */
    tier_call_t call;
    request_phase_t after_wait; /* PHASE_WAITING_FOR_FEEDER: the archive step that follows */
    uint64_t operation_time; /* the latest operationTime of its tiers' replies */
    /* What the feeder wait covers beyond the request's namespace. */
    const char *wait_database;   /* dropDatabase, listCollections: the database's tiered namespaces */
    bool waits_for_every_namespace; /* listDatabases: every tiered namespace */
    bool tolerates_stopped_feed; /* a stopped feed does not hold it back (it may be the fix) */
    /* With other proxies: the fast tier's operation time when it arrived, which the
     * feeder must pass too (writes acknowledged through them), once the probe of
     * generation barrier_probe has answered; both 0: not needed. */
    uint64_t barrier_time;
    uint64_t barrier_probe;
    /* PHASE_PUBLISHING_DELETES: the delete's reply, sent once published (owned). */
    uint8_t *published_reply;
    size_t published_reply_length;
    /* The state of the route it takes, by route_kind. */
    route_state_kind_t route_kind;
    union {
        struct { /* PLAN_ROUTE_FAST_THEN_ARCHIVE: the fast tier's documents and the ids it lacked */
            bool rebuilt; /* the fast tier got our find (one batch), not the client's */
            bson_t fast_documents;
            bson_t missing_ids;
        } point;
        struct { /* a point read's explain: the fast tier's, while the archive's runs */
            bson_t *fast_body;
        } explain;
        struct { /* a command applied to both tiers, the archive first */
            uint8_t *archive_reply; /* answered once the fast tier has the change */
            size_t archive_reply_length;
            bool archive_lacked; /* a removal the archive had nothing for (NamespaceNotFound...) */
            bool fast_created;   /* collMod: the fast tier's collection was created for it */
        } both;
        struct { /* a command refused in a transaction: sent once its abort is done */
            bson_error_t refusal;
        } transaction;
        struct { /* a write's ids the fast tier lacked: the archive's part of its fault-in */
            bson_t missing_ids;
            uint32_t missing_count;
            bson_t copied_ids;   /* the archive's documents copied in, under fault marks */
            uint64_t mark_since; /* their marks' since: a fast-tier time before the copy */
            uint8_t *insert;     /* the copy's insert, sent once the marks are pending */
            size_t insert_length;
        } fault_in;
        struct { /* a change stream's batch, while its events' marks are read */
            bson_t body;        /* the fast tier's reply */
            int64_t started_ms; /* the loop's clock when the batch came */
            bson_t kept;        /* its events without the workers' (once the marks are read) */
        } stream;
    } route;
} proxy_request_t;

/* --- router.c: the lifecycle ----------------------------------------------------- */

/* Moves the request to phase; aborts on a move the transition table forbids. */
void router_enter(proxy_request_t *request, request_phase_t phase);
/* The outcome of the step the request waited for, handed to its phase's step. */
void router_advance(proxy_request_t *request, const router_outcome_t *outcome);
const char *router_phase_name(request_phase_t phase);

/* --- router.c: replies, sends, the main path ------------------------------------- */

/* Whether a failed call to a tier runs once more (retry.h's rules): not retried
 * yet, failoverWait set, the proxy not stopping, and a network error or a reply
 * body (NULL: unparsed) retryable for kind, whose code goes to *code. The router's
 * calls and router_pins.c's rounds share it. */
bool router_retries_failure(const proxy_t *proxy, bool retried, retry_kind_t kind, const bson_t *body,
                            const bson_error_t *error, int32_t *code);
/* What a retry's log line names as the failure: the error's message, or the code's name. */
const char *router_failure_text(const bson_error_t *error, int32_t code);

/* Frees the request (its reply sent, or its connection closing). */
void router_request_free(proxy_request_t *request);
/* Closes the client's connection instead of answering, and frees the request. */
void router_close_connection(proxy_request_t *request);

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

/* Calls tier with message in phase: its reply reaches that phase's step through
 * router_advance (after one retry where retry.h allows). owned (NULL for the
 * client's own message) is kept until the request ends, for a retry. */
void router_call_tier(proxy_request_t *request, request_phase_t phase, proxy_tier_t tier, uint8_t *message,
                      size_t length, uint8_t *owned);
/* The same with a command the router built (destroyed here, also when it cannot
 * be encoded: the request is then answered with the error). */
void router_call_tier_command(proxy_request_t *request, request_phase_t phase, proxy_tier_t tier, bson_t *command);
/* The client's own message to tier, its reply (cursor ids patched) to the client. */
void router_forward(proxy_request_t *request, proxy_tier_t tier);
/* PHASE_FORWARDING's step: a tier's reply to the client's own command. */
void router_on_tier_reply(proxy_request_t *request, const uint8_t *reply, size_t length, const bson_error_t *error);
/* Its end: the reply (owned, an OP_MSG) to the client, cursor ids patched. */
void router_finish_cursor_reply(proxy_request_t *request, uint8_t *message, size_t length);
/* backend_reply_fn of a step sent without the retry rules: its outcome to router_advance. */
void router_on_step_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error);

/* --- unique_indexes.c ------------------------------------------------------------ */

/* True when the request waits (PHASE_LOADING_INDEXES) for its namespace's list;
 * router_advance gets the outcome (an error when the archive could not tell). */
bool unique_indexes_wait(proxy_request_t *request);

/* --- router_slow.c --------------------------------------------------------------- */

/* Logs the request (its shape, route, and time per phase) when total_ms reaches
 * slowOpThresholdMs. */
void router_log_if_slow(proxy_request_t *request, uint64_t total_ms);

/* --- router_local.c -------------------------------------------------------------- */

/* hello, isMaster, ping, _isSelf, thermoclineStatus. */
void router_answer_locally(proxy_request_t *request);
/* PHASE_ANSWERING_HELLO's step: fields are access.c's additions (NULL: none). */
void router_answer_hello(proxy_request_t *request, const bson_t *fields);

/* --- router_wait.c --------------------------------------------------------------- */

/* Enters PHASE_WAITING_FOR_FEEDER until the feeder has applied the writes
 * acknowledged so far to the namespaces the request reads (all of them, or only
 * the deletes: deletes_only), then goes on with next, an archive step (at once
 * when nothing is pending); fails the request when its feed stopped (unless
 * tolerates_stopped_feed) or after readYourWritesWait. */
void router_wait_for_feeder(proxy_request_t *request, bool deletes_only, request_phase_t next);

/* A delete (or a commit) the fast tier acknowledged at delete_time: records it
 * in thermocline.deletes, where other proxies' deletes-only waits read it, then
 * finishes with reply (taken; PHASE_PUBLISHING_DELETES). */
void router_publish_deletes(proxy_request_t *request, uint64_t delete_time, uint8_t *reply, size_t length);
/* PHASE_PUBLISHING_DELETES's step. */
void router_deletes_on_published(proxy_request_t *request, const router_outcome_t *outcome);

/* Enters PHASE_WAITING_FOR_PINS until router_pin_fault_in succeeds. */
void router_wait_for_pins(proxy_request_t *request);

/* Enters phase for delay_ms, then hands its step an empty outcome. */
void router_wait_briefly(proxy_request_t *request, request_phase_t phase, int64_t delay_ms);

/* Pins the documents the write faults in against the evictor (all or none);
 * false while one is being evicted. */
bool router_pin_fault_in(proxy_request_t *request);
void router_unpin_fault_in(proxy_request_t *request);

/* The step after PHASE_WAITING_FOR_FEEDER: the archive step in request->after_wait. */
void router_after_feeder_wait(proxy_request_t *request);

/* --- router_pins.c: a write's pins in the fast tier -------------------------------- */

/* Whether the write's pins go to the fast tier too (tier/pins.h's rule). */
bool router_pins_needed(proxy_request_t *request);
/* Whether a write pins its whole namespace (router_wait.c): a fault-in by filter,
 * or unique keys its updates compute, whose holders are known only later. */
bool router_pins_whole_namespace(const proxy_request_t *request);
/* PHASE_PINNING_FAST: the pin documents upserted with the other writes of its
 * round, then (PHASE_READING_EVICTIONS) the evictor's intents read; the fast-tier
 * check once none covers the pins, else a pause (PHASE_WAITING_FOR_EVICTIONS)
 * whose step, router_pins_after_wait, reads again alone. */
void router_pins_write(proxy_request_t *request);
/* The step of a read of its own: the intents it waits for, still alive. */
void router_pins_on_evictions(proxy_request_t *request, const router_outcome_t *outcome);
void router_pins_after_wait(proxy_request_t *request);
/* Whether the pins (if any) are young enough for the write to be sent. */
bool router_pins_fresh(const proxy_request_t *request);
/* Removes the pins from the fast tier (without waiting) and frees their state. */
void router_pins_release(proxy_request_t *request);

/* --- router_fault_in.c: a write's archive documents copied in first ------------------ */

void router_fault_in_start(proxy_request_t *request);
/* Ends a write the router sends to the fast tier's thermocline database (marks,
 * pins): ordered: false, writeConcern {w: 1}, $db. */
void router_append_state_write_options(bson_t *command);
/* PHASE_WAITING_FOR_PINS's step: pinned in memory; then in the fast tier when
 * router_pins_needed, else the fast-tier check at once. */
void router_fault_in_pinned(proxy_request_t *request);
/* The ids looked for in the fast tier (PHASE_FAULT_IN_CHECKING_FAST), or for a
 * write by filter only, the feeder's deletes awaited. */
void router_fault_in_check_fast(proxy_request_t *request);
/* PHASE_FAULT_IN_CHECKING_FAST's step: the write goes on, or the archive gives what
 * the fast tier lacks (after the feeder's deletes). */
void router_fault_in_on_fast_checked(proxy_request_t *request, const router_outcome_t *outcome);
/* After the wait: the find on the archive (PHASE_FAULT_IN_FINDING). */
void router_fault_in_find(proxy_request_t *request);
void router_fault_in_on_found(proxy_request_t *request, const router_outcome_t *outcome);
void router_fault_in_on_marking(proxy_request_t *request, const router_outcome_t *outcome);
void router_fault_in_on_inserted(proxy_request_t *request, const router_outcome_t *outcome);
void router_fault_in_on_marked(proxy_request_t *request, const router_outcome_t *outcome);
/* Its end: the write forwarded, or first the unique keys it computes read. */
void router_fault_in_done(proxy_request_t *request);

/* --- router_unique.c: unique keys a write's updates compute, checked at write time - */

/* Whether the write has statements whose unique keys it computes, not read yet. */
bool router_unique_pending(const proxy_request_t *request);
/* Reads what those statements match in the fast tier (PHASE_UNIQUE_READING_FAST),
 * then faults in the keys their updates give, or forwards the write. */
void router_unique_start(proxy_request_t *request);
void router_unique_on_read(proxy_request_t *request, const router_outcome_t *outcome);
/* Once read: the keys' fault-in filters, which the fault-in finds; else NULL. */
const bson_t *router_unique_filters(const proxy_request_t *request);
/* Safe on NULL. */
void router_unique_destroy(struct router_unique *unique);

/* --- router_change_stream.c: the workers' events left out of a stream's batches ---- */

/* Forwards the aggregate opening a tiered change stream to the fast tier: its
 * stages from the first that may reshape an event on are kept to be applied here,
 * to the events the workers' are dropped from (the tier gets $changeStream and the
 * $match stages before them). */
void router_change_stream_open(proxy_request_t *request);
/* Refuses (and answers) a database's or the cluster's change stream where tiered
 * namespaces are (IllegalOperation, naming one); false when the request goes on
 * (not such a stream, or nothing tiered in it: the archive's). */
bool router_change_stream_refuse_whole(proxy_request_t *request);
/* A change stream's reply from the fast tier: true when it holds inserts or
 * deletes, whose marks are read (PHASE_STREAM_READING_MARKS) before the reply,
 * without the workers' events, goes to the client; false: relay it as it is. */
bool router_change_stream_takes_reply(proxy_request_t *request, const uint8_t *reply, size_t length);
void router_change_stream_on_marks(proxy_request_t *request, const router_outcome_t *outcome);
/* PHASE_STREAM_WAITING_FOR_MARKS's step: the marks read again. */
void router_change_stream_after_wait(proxy_request_t *request);
/* After the feeder's deletes: the archive's versions of evicted documents. */
void router_change_stream_look_up(proxy_request_t *request);
void router_change_stream_on_looked_up(proxy_request_t *request, const router_outcome_t *outcome);

/* --- router_kill_cursors.c ------------------------------------------------------- */

/* killCursors: answered from the cursor map, each server told of its own ids. */
void router_kill_cursors(proxy_request_t *request);

/* --- router_point_read.c: a find by _id, the fast tier then the archive ---------- */

void router_point_read_start(proxy_request_t *request);
void router_point_read_on_fast_reply(proxy_request_t *request, const router_outcome_t *outcome);
/* After the wait: the ids the fast tier lacked, on the archive. */
void router_point_read_send_archive(proxy_request_t *request);
void router_point_read_on_archive_reply(proxy_request_t *request, const router_outcome_t *outcome);

/* --- router_explain.c ------------------------------------------------------------ */

bool router_request_is_explain(const proxy_request_t *request);
/* Answers with body (a tier's ok explain) and the thermocline field; archive_body:
 * the archive's explain of a point read, else NULL. */
void router_finish_explain(proxy_request_t *request, const bson_t *body, const bson_t *archive_body);
/* A point read's explain: on both tiers, the fast tier first. */
void router_explain_both_start(proxy_request_t *request);
void router_explain_on_fast_reply(proxy_request_t *request, const router_outcome_t *outcome);
void router_explain_send_archive(proxy_request_t *request);
void router_explain_on_archive_reply(proxy_request_t *request, const router_outcome_t *outcome);

/* --- router_transaction.c -------------------------------------------------------- */

/* Whether the transaction may run this command; if not, why (in reason). */
bool router_transaction_may_run(const proxy_request_t *request, char *reason, size_t reason_size);
/* Refuses the command with OperationNotSupportedInTransaction, once the fast tier
 * has aborted the transaction (PHASE_ABORTING_TRANSACTION). */
void router_refuse_in_transaction(proxy_request_t *request, const char *reason);
void router_transaction_on_aborted(proxy_request_t *request);
/* A commit the fast tier acknowledged: reads of the archive wait for the feeder.
 * Returns its time (it may have deleted in any tiered namespace), or 0. */
uint64_t router_note_transaction_commit(proxy_request_t *request, const bson_t *body);

/* --- router_catalog.c ------------------------------------------------------------ */

/* A command the planner says applies to both tiers (catalog, sessions). */
void router_both_tiers_start(proxy_request_t *request);
void router_both_send_to_archive(proxy_request_t *request);
void router_both_on_archive_reply(proxy_request_t *request, const router_outcome_t *outcome);
void router_both_on_fast_created(proxy_request_t *request, const router_outcome_t *outcome);
void router_both_on_fast_reply(proxy_request_t *request, const router_outcome_t *outcome);

/* listDatabases, and listCollections of a database with tiered namespaces, which
 * the archive answers: after the feeder caught up (true), like reads. false: not
 * such a command. */
bool router_route_catalog_listing(proxy_request_t *request);
/* Refuses (and answers) $out, $merge or mapReduce output into a tiered namespace,
 * or one the planner cannot name; false when the request goes on. */
bool router_refuse_tiered_output(proxy_request_t *request);

/* metrics.c: a request has finished (its route, reason and latency). */
void proxy_metrics_request_finished(proxy_request_t *request);

#endif
