/* The command layer of `thermocline store`: one handler per MongoDB command,
 * registered in one table (dispatch.c), grouped by file: cmd_admin.c (handshake
 * and server information), cmd_catalog.c (databases, collections, indexes),
 * cmd_write.c (insert, update, delete, findAndModify), cmd_read.c (find, getMore,
 * killCursors, count, distinct, aggregate, explain), cmd_transaction.c
 * (commitTransaction, abortTransaction), cmd_current_op.c (currentOp, killOp,
 * and the $currentOp and $listLocalSessions sources of {aggregate: 1}). */
#ifndef TC_STORE_COMMANDS_H
#define TC_STORE_COMMANDS_H

#include "net/server.h"
#include "store/current_op.h"
#include "store/cursors.h"
#include "store/op_latency.h"
#include "store/session_cache.h"
#include "store/store.h"

#include <stdatomic.h>

typedef struct transaction_table transaction_table_t;

/* Server-wide state, shared by every worker thread. */
typedef struct store {
    store_options_t options;
    storage_t *storage;
    cursor_table_t *cursors;
    server_t *server;
    int64_t start_time_ms;    /* wall clock, for uptime */
    bson_oid_t process_id;    /* topologyVersion.processId */
    struct {
        atomic_llong insert, query, update, delete_, getmore, command;
    } opcounters;
    op_latency_t latencies;   /* serverStatus.opLatencies */
    struct auth_manager *auth; /* access control (auth.h) */
    transaction_table_t *transactions; /* multi-document transactions (transactions.h) */
    current_op_table_t *operations; /* operations in progress (current_op.h) */
    session_cache_t *sessions;      /* logical sessions seen (session_cache.h) */
    struct ttl_monitor *ttl;        /* the TTL monitor (ttl_monitor.h) */
    /* Point reads on the loop thread (dispatch_on_loop.c): how many ran there;
     * the rest is the loop thread's own. */
    struct {
        atomic_ullong count;
        int64_t paused_until_ms;     /* after one read a data file */
        int64_t pressure_checked_ms; /* when the cache's fill was last read */
        bool cache_pressed;          /* it was near WiredTiger's eviction triggers */
    } loop_point_reads;
} store_t;

/* One client connection's state (server_request_t.connection_data), made on
 * its first command and freed when it closes (dispatch_connection_close). */
typedef struct store_connection {
    current_op_entry_t operation; /* registered in store->operations while the connection lives */
    struct auth_session *auth;    /* access control's (auth.c); NULL until first needed */
} store_connection_t;

/* Everything a handler needs about the command it runs. */
typedef struct command_context {
    store_t *store;
    storage_session_t *session;
    const bson_t *command;    /* body with document sequences merged in */
    const char *name;         /* the command's name: its first field */
    const char *database;     /* $db */
    uint64_t connection_id;
    const char *peer_address;
    uint32_t reply_delay_ms;  /* set by awaitable hello */
    uint32_t attempt;         /* 0, or how many times this request was run again */
    uint32_t rerun_after_ms;  /* set to run the request again after this long instead of
                               * replying (a change stream's awaitData getMore) */
    store_connection_t *connection; /* the connection's state; NULL for a command run
                                     * outside a connection */
    current_op_entry_t *operation;  /* the command's entry in store->operations */
    /* A command of a multi-document transaction (transactions.h): session is then
     * the transaction's own, holding its WiredTiger transaction. */
    struct transaction_session *transaction; /* NULL: not in one */
    uint64_t transaction_id;  /* unique per transaction, marks its cursors; 0: none */
    int64_t txn_number;
    bool abort_transaction;   /* set by a handler whose write failed: the transaction ends */
    /* The command's $$NOW and, for the commands that take one, its `let`
     * variables, evaluated once before the handler runs. */
    const expression_context_t *expression_context;
    /* errInfo of the last write refused by the collection's validator
     * (validation.h), which its writeError or the command's error carries;
     * NULL for a command run outside dispatch. */
    bson_t *error_info;
    /* Where a durable write leaves its journal sync to the reply
     * (command_sync_journal): the dispatcher's flag, for a client's request with
     * a reply, which then waits for the journal thread without holding the
     * worker; shared by the inner contexts a handler copies ($merge's writes).
     * NULL: the handler syncs itself. */
    bool *journal_sync_wanted;
} command_context_t;

/* A handler appends its reply fields (not "ok") to reply and returns true, or
 * fills error and returns false (the dispatcher then sends only the error).
 * Write commands report per-document failures in writeErrors and return true. */
typedef bool (*command_handler_fn)(command_context_t *context, bson_t *reply, bson_error_t *error);

typedef struct command_definition {
    const char *name;
    command_handler_fn handler;
} command_definition_t;

/* Each cmd_*.c exports its table, ended by {NULL, NULL}. */
extern const command_definition_t admin_commands[];
extern const command_definition_t catalog_commands[];
extern const command_definition_t write_commands[];
extern const command_definition_t read_commands[];
extern const command_definition_t aggregate_commands[];
extern const command_definition_t transaction_commands[];
extern const command_definition_t coll_mod_commands[];
extern const command_definition_t rename_commands[];
extern const command_definition_t current_op_commands[];

/* --- helpers shared by the handlers ------------------------------------------- */

/* "db.coll" from the command's first field (a string) and $db. Errors:
 * InvalidNamespace 73 / TypeMismatch 14 as mongod. Caller bson_free()s. */
bool command_namespace(const command_context_t *context, char **out_ns, bson_error_t *error) TC_MUST_CHECK;

/* Reads an optional sub-document field; *out stays an empty static document if
 * absent. Errors: TypeMismatch 14 "BSON field 'find.filter' is the wrong type
 * 'string', expected type 'object'". */
bool command_get_document(const command_context_t *context, const char *field, bson_t *out,
                          bson_error_t *error) TC_MUST_CHECK;

/* Reads an optional numeric field as int64 (default when absent). */
bool command_get_int64(const command_context_t *context, const char *field, int64_t default_value,
                       int64_t *out, bson_error_t *error) TC_MUST_CHECK;

/* Reads an optional boolean field (numbers count as mongod counts them). */
bool command_get_bool(const command_context_t *context, const char *field, bool default_value, bool *out,
                      bson_error_t *error) TC_MUST_CHECK;

/* changeStreamPreAndPostImages: {enabled: bool} of create or collMod
 * (command_name), strictly as mongod's IDL reads it: TypeMismatch 14,
 * 40414 without enabled, 40415 for another field. */
bool command_parse_pre_and_post_images(const char *command_name, bson_iter_t *iter, bool *out_enabled,
                                       bson_error_t *error) TC_MUST_CHECK;

/* Unauthorized 13 "<command> may only be run against the admin database." */
bool command_require_admin_database(const command_context_t *context, bson_error_t *error) TC_MUST_CHECK;

/* A string field the command requires: 40414 when absent, TypeMismatch 14
 * otherwise. *out points into the command. */
bool command_get_required_string(const command_context_t *context, const char *field, const char **out,
                                 bson_error_t *error) TC_MUST_CHECK;

/* Whether field is one any command may carry (mongod's generic arguments:
 * lsid, $db, writeConcern, comment...), not one of the command's own. */
bool command_is_generic_argument(const char *field);

/* Appends cursor: {firstBatch|nextBatch: [...], id, ns} to reply. */
typedef struct batch_builder {
    bson_t array;
    uint32_t count;
    uint32_t limit;  /* documents; 0: none */
    size_t bytes;
} batch_builder_t;

/* The emit function for find_plan_run that fills a batch_builder_t. */
bool batch_builder_emit(void *context, const bson_t *document, int64_t record_id);

/* Runs the cursor (plan or documents) until the batch is full or it ends.
 * Call with the catalog lock held. */
bool command_fill_batch(command_context_t *context, store_cursor_t *cursor, collection_t *collection,
                        batch_builder_t *batch, bool *out_exhausted, bson_error_t *error) TC_MUST_CHECK;

/* An aggregation streamed through a cursor (cmd_aggregate.c). */
bool aggregation_fill_batch(command_context_t *context, void *aggregation, collection_t *collection,
                            batch_builder_t *batch, bool *out_exhausted, bson_error_t *error) TC_MUST_CHECK;

/* aggregate itself (cmd_aggregate.c), for the commands that run as one: a
 * read of a view, explain {aggregate}. */
bool command_aggregate(command_context_t *context, bson_t *reply, bson_error_t *error) TC_MUST_CHECK;

/* --- what the store is doing (cmd_current_op.c) -------------------------------- */

/* The documents of {aggregate: 1}'s first stage $currentOp or
 * $listLocalSessions (stage), argument its options: out_documents, an array
 * (initialized here; the caller destroys it). Errors as mongod 6.0:
 * InvalidNamespace 73 off admin; for $currentOp FailedToParse 9 (options not a
 * document, not booleans, unknown); for $listLocalSessions TypeMismatch 14,
 * 40415 for an unknown field, UnsupportedFormat 12 for allUsers with users. */
bool command_system_source(command_context_t *context, const char *stage, const bson_iter_t *argument,
                           bson_t *out_documents, bson_error_t *error) TC_MUST_CHECK;

/* --- $out and $merge (aggregate_output.c) -------------------------------------- */

typedef struct aggregate_output aggregate_output_t;

/* Finds a $out or $merge stage in stages: *out_output (NULL when there is
 * none; free with aggregate_output_destroy()) and out_stages, the stages
 * before it (initialized here). Errors as mongod 6.0: 40601 when it is not
 * the last stage, OperationNotSupportedInTransaction 263 in a transaction, its
 * parse errors (16990, 16994, 17385 for system.*, 51178-51187 and 51199 for
 * $merge, BadValue 2 for an unknown mode, 40415 for an unknown field). */
bool aggregate_output_parse(const command_context_t *context, const bson_t *stages, bson_t *out_stages,
                            aggregate_output_t **out_output, bson_error_t *error) TC_MUST_CHECK;

/* Writes the aggregate's results (documents[count], which $merge may give an
 * _id) to the output's target, under the aggregate's write concern (a durable
 * one leaves the journal's sync to the reply, command_sync_journal). Takes the
 * catalog lock itself: call without it. */
bool aggregate_output_write(command_context_t *context, const aggregate_output_t *output, bson_t **documents,
                            size_t count, bson_error_t *error) TC_MUST_CHECK;

/* "$out" or "$merge". */
const char *aggregate_output_stage_name(const aggregate_output_t *output);

/* Safe on NULL. */
void aggregate_output_destroy(aggregate_output_t *output);

/* The document as insert stores it: _id first (an ObjectId when absent),
 * mongod's checks on _id and $-prefixed fields (cmd_write.c). out is
 * initialized here; the caller destroys it. */
bool command_prepare_insert_document(const bson_t *document, bson_t *out, bson_error_t *error) TC_MUST_CHECK;

/* --- views (views.c) ---------------------------------------------------------- */

/* create {viewOn, pipeline}: checks the definition and creates the view ns
 * (takes the catalog lock). Errors as mongod: TypeMismatch 14, InvalidOptions
 * 72 for a collection option, BadValue 2, OptionNotSupportedOnView 167 for
 * $out or $merge, the pipeline's own errors, GraphContainsCycle 5,
 * ViewDepthLimitExceeded 165, NamespaceExists 48. */
bool views_create(command_context_t *context, const char *ns, bson_error_t *error) TC_MUST_CHECK;

/* collMod of a view: viewOn and/or pipeline, checked as create checks them.
 * Call with the exclusive lock held. */
bool views_modify(command_context_t *context, view_t *view, bson_error_t *error) TC_MUST_CHECK;

/* The collection a read of ns reads (*out_source_ns, bson_free()) and the
 * pipeline of the views between (out_pipeline, initialized here: an array,
 * empty when ns is no view). Call with the lock held.
 * Errors: ViewDepthLimitExceeded 165. */
bool views_resolve(storage_t *storage, const char *ns, char **out_source_ns, bson_t *out_pipeline,
                   bson_error_t *error) TC_MUST_CHECK;

/* CommandNotSupportedOnView 166 "Namespace db.v is a view, not a collection"
 * when ns is a view. Call with the lock held. */
bool views_refuse(storage_t *storage, const char *ns, bson_error_t *error) TC_MUST_CHECK;

/* find, count or distinct (context->name) on a view: answered as mongod does,
 * through the aggregate it rewrites them into, and *out_handled set. On
 * anything but a view, *out_handled is false and nothing is done. */
bool views_answer_read(command_context_t *context, bson_t *reply, bool *out_handled, bson_error_t *error) TC_MUST_CHECK;

/* explain of find, count or distinct on a view: the explain of that aggregate. */
bool views_explain_read(command_context_t *context, bson_t *reply, bool *out_handled, bson_error_t *error) TC_MUST_CHECK;

/* explain's closing fields: command (the explained command) and serverInfo. */
void command_append_explain_server_info(const command_context_t *context, const bson_t *explained, bson_t *reply);

/* The write concern's j (or w: "majority" under --replSet, always journaled).
 * False for the commands of a transaction, whose writes reach the journal with
 * its commitTransaction. */
bool command_wants_durable_write(const command_context_t *context);

/* Makes what session committed durable before the client hears of it: at once
 * (oplog_sync_journal), or, when the context allows, by holding the reply until
 * the journal thread's next sync (journal_sync_wanted). */
bool command_sync_journal(command_context_t *context, storage_session_t *session, bson_error_t *error) TC_MUST_CHECK;

#endif
