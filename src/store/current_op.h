/* The store's table of operations in progress, mongod's registry behind
 * currentOp, $currentOp and killOp. Every connection holds one entry from its
 * first command until it closes; a command marks the entry active while it runs
 * (opid, command, start time) and idle again after, so the per-command cost is
 * two short critical sections under the table's one mutex and no allocation.
 * Readers walk the entries under that mutex: a running command's document stays
 * valid until its entry is marked idle. killOp sets the entry's flag, which the
 * command's scan loops read (storage_session_check_interrupt). */
#ifndef TC_STORE_CURRENT_OP_H
#define TC_STORE_CURRENT_OP_H

#include "common/error.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* mongod truncates a command larger than this in the currentOp command's reply. */
#define CURRENT_OP_MAX_COMMAND_BYTES 1000

typedef struct current_op_table current_op_table_t;

/* One client (a connection, or a command run outside any) and the command it
 * runs now. The caller owns the memory; the table links it while registered. */
typedef struct current_op_entry {
    struct current_op_entry *previous, *next; /* under the table's mutex */
    uint64_t connection_id;
    char *peer_address;       /* owned; "" outside a connection */
    bson_t *client_metadata;  /* hello's `client` document, owned; NULL before it */
    char *user_name;          /* the authenticated user, owned; NULL: none */
    char *user_database;
    /* The command running now; valid while active. */
    bool active;
    int64_t opid;
    const bson_t *command;
    uint32_t sequence_fields; /* command's last fields, from OP_MSG document sequences */
    const char *command_name;
    const char *database;
    int64_t started_us;       /* clock_monotonic_us */
    atomic_bool killed;       /* killOp: the command stops at its next check point */
} current_op_entry_t;

/* Free with current_op_table_destroy() once every entry is unregistered. */
current_op_table_t *current_op_table_new(void);
void current_op_table_destroy(current_op_table_t *table);

/* Links entry (zeroed by the caller) for connection_id and peer_address (copied). */
void current_op_register(current_op_table_t *table, current_op_entry_t *entry, uint64_t connection_id,
                         const char *peer_address);

/* Unlinks entry and frees what it owns. Safe on an entry never registered. */
void current_op_unregister(current_op_table_t *table, current_op_entry_t *entry);

/* hello's client metadata, kept from the first hello that has one (mongod
 * refuses to change it later). */
void current_op_set_client_metadata(current_op_table_t *table, current_op_entry_t *entry, const bson_t *metadata);

/* The connection's user now (name NULL: not authenticated); a no-op when unchanged. */
void current_op_set_user(current_op_table_t *table, current_op_entry_t *entry, const char *name,
                         const char *database);

/* A command starts on entry: a new opid, its document (borrowed until
 * current_op_end), of which the last sequence_fields fields came as OP_MSG
 * document sequences, name and database. Returns the kill flag it must watch. */
const atomic_bool *current_op_begin(current_op_table_t *table, current_op_entry_t *entry, const bson_t *command,
                                    uint32_t sequence_fields, const char *command_name, const char *database);
void current_op_end(current_op_table_t *table, current_op_entry_t *entry);

/* The running command's document moves from `from` (a bson_init'ed document,
 * left empty) to `to` (uninitialized) without a copy, under the table's
 * mutex so that no report reads it mid-move; the entry (NULL: none) then shows
 * `to`, its name and $db read from there. A durable write waiting for the
 * journal (slow_ops.h) keeps its command this way past its handler. */
void current_op_move_command(current_op_table_t *table, current_op_entry_t *entry, bson_t *from, bson_t *to);

/* killOp: marks the running operation opid killed; false when no operation
 * has that opid now (mongod answers ok all the same). With owner_name set, only
 * an operation of owner_name@owner_database is killed (a user without the
 * killop action kills only its own, as mongod's findOpForKilling). */
bool current_op_kill(current_op_table_t *table, int64_t opid, const char *owner_name, const char *owner_database);

/* What a report lists. */
typedef struct current_op_report_options {
    bool all_users;           /* false: only the requester's (below) */
    const char *user_name;    /* the requester; NULL: not authenticated */
    const char *user_database;
    bool auth_enabled;        /* without access control every operation is the requester's */
    bool idle_connections;    /* also connections running nothing */
    bool truncate_ops;        /* the currentOp command's 1000-byte limit on `command` */
    const char *host;         /* "hostname:port" */
} current_op_report_options_t;

/* Appends one document per operation (and idle connection) to array, keys
 * continuing from *count. */
void current_op_report(current_op_table_t *table, const current_op_report_options_t *options, bson_t *array,
                       uint32_t *count);

/* --- pure helpers, unit-tested -------------------------------------------------- */

/* The `command` field as mongod reports it: the OP_MSG body, so the document
 * less its last sequence_fields fields (an insert's documents sent as a
 * sequence are not shown), or past max_bytes (0: no limit) {$truncated: "<its
 * first max_bytes characters as text, ending ...>", comment} as mongod's
 * appendAsObjOrString. */
void current_op_append_command(bson_t *out, const bson_t *command, uint32_t sequence_fields, size_t max_bytes);

/* op and ns as mongod reports them: find "query", insert "insert", update
 * "update", delete "remove", getMore "getmore", anything else "command"; ns
 * "db.coll" for a command on a collection, "db.$cmd.aggregate" for
 * {aggregate: 1}, else "db.$cmd". Caller bson_free()s *out_ns. */
const char *current_op_kind(const char *command_name);
char *current_op_namespace(const bson_t *command, const char *command_name, const char *database);

/* The currentOp command's match filter: its fields less currentOp, $all,
 * $ownOps and the generic arguments (out initialized here). */
void current_op_command_filter(const bson_t *command, bson_t *out);

/* "2026-12-01T21:40:00.123+00:00", mongod's currentOpTime. */
void current_op_format_time(int64_t wall_ms, char *buffer, size_t size);

/* Whether two optional names (a user's, its database's; NULL: none) are equal. */
bool current_op_same_name(const char *left, const char *right);

/* Appends the element key = array element count: the next index of an array. */
void current_op_array_append(bson_t *array, uint32_t *count, const bson_t *document);

#endif
