/* Multi-document transactions, as a replica-set mongod runs them: the table of
 * logical sessions (lsid -> active txnNumber and its state), one storage session
 * per open transaction holding its WiredTiger transaction across commands, the
 * rules of startTransaction / autocommit / txnNumber with mongod's errors, the
 * transactionLifetimeLimitSeconds reaper, and serverStatus().transactions.
 * dispatch.c brackets every command with transaction_begin_command() and
 * transaction_end_command(). */
#ifndef TC_STORE_TRANSACTIONS_H
#define TC_STORE_TRANSACTIONS_H

#include "store/commands.h"

#define TRANSACTION_DEFAULT_LIFETIME_SECONDS 60

/* Opens the table for store (its storage, cursors and options); registers the
 * catalog hook that aborts the transactions a DDL would undercut (none when the
 * DDL took transaction_lock_ddl). */
transaction_table_t *transaction_table_new(store_t *store);

/* Rolls back every open transaction. After the server has stopped. */
void transaction_table_destroy(transaction_table_t *table);

/* What transaction_begin_command() did, for transaction_end_command(). */
typedef struct transaction_command {
    struct transaction_session *transaction; /* checked out; NULL: not in a transaction */
    storage_session_t *worker_session;     /* the worker's own, given back at the end */
    bool locked;                           /* holds the catalog lock shared */
} transaction_command_t;

/* A DDL's exclusive lock on name ("db.coll", or "db" for the whole database)
 * and on second_name (NULL: none), as mongod's collection lock meets
 * transactions: first waits until every in-progress transaction that used it
 * has ended (committed, aborted, or reaped after transactionLifetimeLimitSeconds),
 * while a transaction's first use of it fails after 5 ms with LockTimeout 24;
 * then takes the catalog lock exclusive. transaction_unlock_ddl, with the same
 * names, gives both back. Not from a command inside a transaction. */
void transaction_lock_ddl(command_context_t *context, const char *name, const char *second_name);
void transaction_unlock_ddl(command_context_t *context, const char *name, const char *second_name);

/* Reads the command's session fields (lsid, txnNumber, autocommit,
 * startTransaction) and, for a command of a multi-document transaction, checks
 * it may run there, checks the transaction out and points context->session at
 * its storage session (context->transaction, context->transaction_id). Errors
 * as mongod's: IllegalOperation 20 for a transaction on a standalone store,
 * InvalidOptions 72, OperationNotSupportedInTransaction 263, TransactionTooOld
 * 225, NoSuchTransaction 251, TransactionCommitted 256, ConflictingOperation-
 * InProgress 117, LockTimeout 24 (transaction_lock_ddl). On failure nothing is left checked out. */
bool transaction_begin_command(command_context_t *context, transaction_command_t *state,
                               bson_error_t *error) TC_MUST_CHECK;

/* After the handler: a command that failed (ok false) or asked for it
 * (context->abort_transaction: a write error) aborts its transaction, as mongod
 * does; then gives the transaction back and context->session to the worker. */
void transaction_end_command(command_context_t *context, transaction_command_t *state, bool ok);

/* The errorLabel mongod adds to a failed command of a transaction:
 * "TransientTransactionError" for the errors after which the whole transaction
 * may be retried (WriteConflict, NoSuchTransaction, LockTimeout...), else NULL. */
const char *transaction_error_label(const bson_t *command, const bson_error_t *error);

/* commitTransaction and abortTransaction, run in the transaction they end.
 * Commit writes the transaction's applyOps oplog entry and commits, waiting for
 * the journal under the command's writeConcern; committing again answers ok. */
bool transaction_commit(command_context_t *context, bson_error_t *error) TC_MUST_CHECK;
bool transaction_abort(command_context_t *context, bson_error_t *error) TC_MUST_CHECK;

/* endSessions (forget: true): aborts the sessions' open transactions and forgets
 * them. killSessions (forget: false): aborts them, the sessions kept, as mongod
 * (which also interrupts their running commands; here a session a command has
 * checked out is left alone). */
void transaction_end_sessions(transaction_table_t *table, const bson_t *lsids, bool forget);

/* The janitor's tick: aborts transactions past transactionLifetimeLimitSeconds
 * and forgets sessions idle past logicalSessionTimeoutMinutes. */
void transaction_table_reap(transaction_table_t *table);

/* transactionLifetimeLimitSeconds, for transactions started from now on. */
int64_t transaction_lifetime_seconds(transaction_table_t *table);
void transaction_set_lifetime_seconds(transaction_table_t *table, int64_t seconds);

/* $currentOp's idleSessions: appends one {type: "idleSession", host, desc:
 * "inactive transaction", active: false, lsid, transaction: {parameters:
 * {txnNumber, autocommit}}} per open transaction no command is running in,
 * keys continuing from *count. */
void transaction_table_report_idle(transaction_table_t *table, const char *host, bson_t *array, uint32_t *count);

/* serverStatus().transactions. */
void transaction_append_statistics(transaction_table_t *table, bson_t *out);

#endif
