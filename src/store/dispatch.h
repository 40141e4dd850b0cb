/* The store's request entry point: one wire message in, one reply out. */
#ifndef TC_STORE_DISPATCH_H
#define TC_STORE_DISPATCH_H

#include "store/commands.h"
#include "store/slow_ops.h"

/* Decodes request, runs its command, encodes the reply into out_reply (data
 * NULL for moreToCome; close_after for a message that cannot be answered). */
void dispatch_message(store_t *store, storage_session_t *session, const server_request_t *request,
                      server_reply_t *out_reply);

/* How the reply to one command goes out (see server_reply_t). */
typedef struct dispatch_control {
    uint32_t attempt;  /* in: 0, or how many times the request was run again */
    uint32_t delay_ms; /* out: hold the reply this long (awaitable hello); with
                        * run_again, wait this long before running it again */
    bool run_again;    /* out: reply nothing yet, run the command again (a change
                        * stream's getMore waiting for events); reply is empty */
    void **connection_data; /* in: the connection's state slot
                             * (server_request_t.connection_data), or NULL */
    int64_t submitted_us;   /* in: when it was queued for a worker (server_request_t), 0: now */
    bool internal;          /* in: the store's own work (the TTL monitor): no access check */
    uint32_t sequence_fields; /* in: the command's last fields, which came as OP_MSG document
                               * sequences (currentOp shows the body without them, as mongod) */
    bool journal_sync_deferrable; /* in: a durable write's sync may be left to the reply */
    bool journal_sync_wanted;     /* out: the reply must wait for the journal's next sync */
    slow_op_held_t *held_operation; /* out, with journal_sync_wanted: the command's slow line,
                                     * latency and currentOp entry (still active, showing the
                                     * command document, which must live until the caller gives
                                     * it to slow_op_adopt_command), for slow_op_end_wait and
                                     * slow_op_release once the sync has ended */
} dispatch_control_t;

/* On the server's loop thread (server.h's handle_inline): runs request and
 * answers into out_reply when it is a point read (dispatch_is_point_read) of a
 * collection, and no DDL holds the catalog, and no point read here read a data
 * file in the last second; else returns false and a worker runs it. */
bool dispatch_point_read_on_loop(store_t *store, storage_session_t *session, const server_request_t *request,
                                 server_reply_t *out_reply);

/* Whether a find command's body is a point read: {_id: scalar} or {_id: {$in:
 * [at most 8 scalars]}} as its filter, and no field that may make it scan or
 * wait (hint, collation, a transaction's fields...). Fills out_ns with
 * "database.collection". Pure. */
bool dispatch_is_point_read(const bson_t *body, char *out_ns, size_t ns_size);

/* A connection is gone (the server's connection_close): frees its state
 * (store_connection_t) and takes it out of the table of operations. */
void dispatch_connection_close(store_t *store, void *connection_data);

/* Runs one command document (with $db) and fills reply with its fields and ok
 * (or the error fields), then, under --replSet, $clusterTime and operationTime. */
void dispatch_command(store_t *store, storage_session_t *session, const bson_t *command, uint64_t connection_id,
                      const char *peer_address, bson_t *reply, dispatch_control_t *control);

#endif
