/* Server-side cursors: the table that maps cursor ids to the state a getMore
 * resumes (a find plan, or documents already computed), with mongod's rules:
 * ids are random positive int64, a cursor belongs to one namespace, is used by one
 * operation at a time (CursorInUse), and dies after 10 idle minutes (mongod's
 * cursorTimeoutMillis, which setParameter changes at runtime). */
#ifndef TC_STORE_CURSORS_H
#define TC_STORE_CURSORS_H

#include "store/find.h"

#define CURSOR_DEFAULT_IDLE_TIMEOUT_MS (10 * 60 * 1000)

typedef struct cursor_table cursor_table_t;

typedef struct store_cursor {
    int64_t id;
    char *ns;
    find_plan_t *plan;      /* a find's plan, or NULL */
    void *stream;           /* or a streaming source (an aggregation), destroyed with: */
    void (*stream_destroy)(void *stream);
    bson_t **documents;     /* otherwise: results computed up front (list*) */
    size_t document_count;
    size_t next_document;
    bool no_timeout;
    uint64_t transaction_id; /* opened in this multi-document transaction (0: none) */
    int64_t txn_number;      /* its txnNumber, for error messages */
    bool tailable;
    bool await_data;
    int64_t last_used_ms;
    bool in_use;
    /* For $currentOp's idleCursors. */
    int64_t created_wall_ms;
    int64_t last_access_wall_ms;
    bson_t *originating_command; /* the find or aggregate that opened it; owned */
    int64_t documents_returned;  /* by command_fill_batch */
    int64_t batches_returned;
} store_cursor_t;

cursor_table_t *cursor_table_new(void);
void cursor_table_destroy(cursor_table_t *table);

/* Takes ownership of cursor, assigns its id and leaves it checked out (in use)
 * by the caller, who must cursor_table_release() it. originating_command (the
 * command that opened it) is copied for $currentOp. */
void cursor_table_add(cursor_table_t *table, store_cursor_t *cursor, const bson_t *originating_command);

/* Checks out the cursor for a getMore on ns. Errors: CursorNotFound 43,
 * CursorInUse 179, Unauthorized 13 when ns differs. */
bool cursor_table_checkout(cursor_table_t *table, int64_t id, const char *ns, store_cursor_t **out_cursor,
                           bson_error_t *error) TC_MUST_CHECK;

/* Returns a checked-out cursor; destroy_it when it is exhausted or failed. */
void cursor_table_release(cursor_table_t *table, store_cursor_t *cursor, bool destroy_it);

/* killCursors: true if id existed (and was killed, or marked to die when released). */
bool cursor_table_kill(cursor_table_t *table, int64_t id, const char *ns);

/* Kills the cursors opened in the transaction (it ended), as killCursors would. */
void cursor_table_kill_transaction(cursor_table_t *table, uint64_t transaction_id);

/* Destroys cursors idle longer than the table's timeout (unless noCursorTimeout). */
void cursor_table_reap(cursor_table_t *table, int64_t now_ms);

/* cursorTimeoutMillis: CURSOR_DEFAULT_IDLE_TIMEOUT_MS until set. */
int64_t cursor_table_timeout_ms(cursor_table_t *table);
void cursor_table_set_timeout_ms(cursor_table_t *table, int64_t timeout_ms);

size_t cursor_table_count(cursor_table_t *table);

/* $currentOp's idleCursors: appends one {type: "idleCursor", host, ns, lsid,
 * cursor: {cursorId, createdDate, lastAccessDate, nDocsReturned,
 * nBatchesReturned, noCursorTimeout, tailable, awaitData, originatingCommand}}
 * per cursor no getMore is using, keys
 * continuing from *count. */
void cursor_table_report_idle(cursor_table_t *table, const char *host, bson_t *array, uint32_t *count);

store_cursor_t *store_cursor_new(const char *ns);
void store_cursor_destroy(store_cursor_t *cursor);

#endif
