/* The table of operations in progress: an intrusive doubly-linked list of
 * entries (one per connection) under one mutex, and the documents mongod's
 * currentOp reports for them. */
#include "store/current_op.h"
#include "store/commands.h"
#include "store/session_cache.h"
#include "common/clock.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct current_op_table {
    pthread_mutex_t mutex;
    current_op_entry_t *first;
    int64_t last_opid;
};

current_op_table_t *current_op_table_new(void)
{
    current_op_table_t *table = BSON_ALIGNED_ALLOC0(current_op_table_t);
    pthread_mutex_init(&table->mutex, NULL);
    return table;
}

void current_op_table_destroy(current_op_table_t *table)
{
    if (table == NULL) {
        return;
    }
    pthread_mutex_destroy(&table->mutex);
    bson_free(table);
}

void current_op_register(current_op_table_t *table, current_op_entry_t *entry, uint64_t connection_id,
                         const char *peer_address)
{
    entry->connection_id = connection_id;
    entry->peer_address = bson_strdup(peer_address != NULL ? peer_address : "");
    atomic_init(&entry->killed, false);
    pthread_mutex_lock(&table->mutex);
    entry->previous = NULL;
    entry->next = table->first;
    if (table->first != NULL) {
        table->first->previous = entry;
    }
    table->first = entry;
    pthread_mutex_unlock(&table->mutex);
}

void current_op_unregister(current_op_table_t *table, current_op_entry_t *entry)
{
    if (entry->peer_address == NULL) {
        return; /* never registered */
    }
    pthread_mutex_lock(&table->mutex);
    if (entry->previous != NULL) {
        entry->previous->next = entry->next;
    } else {
        table->first = entry->next;
    }
    if (entry->next != NULL) {
        entry->next->previous = entry->previous;
    }
    pthread_mutex_unlock(&table->mutex);
    bson_free(entry->peer_address);
    entry->peer_address = NULL;
    if (entry->client_metadata != NULL) {
        bson_destroy(entry->client_metadata);
    }
    bson_free(entry->user_name);
    bson_free(entry->user_database);
}

void current_op_set_client_metadata(current_op_table_t *table, current_op_entry_t *entry, const bson_t *metadata)
{
    if (entry->client_metadata != NULL) {
        return;
    }
    bson_t *copy = bson_copy(metadata);
    pthread_mutex_lock(&table->mutex);
    entry->client_metadata = copy;
    pthread_mutex_unlock(&table->mutex);
}

bool current_op_same_name(const char *left, const char *right)
{
    return left == right || (left != NULL && right != NULL && strcmp(left, right) == 0);
}

void current_op_set_user(current_op_table_t *table, current_op_entry_t *entry, const char *name,
                         const char *database)
{
    if (current_op_same_name(entry->user_name, name) && current_op_same_name(entry->user_database, database)) {
        return;
    }
    char *new_name = name != NULL ? bson_strdup(name) : NULL;
    char *new_database = name != NULL && database != NULL ? bson_strdup(database) : NULL;
    pthread_mutex_lock(&table->mutex);
    char *old_name = entry->user_name, *old_database = entry->user_database;
    entry->user_name = new_name;
    entry->user_database = new_database;
    pthread_mutex_unlock(&table->mutex);
    bson_free(old_name);
    bson_free(old_database);
}

const atomic_bool *current_op_begin(current_op_table_t *table, current_op_entry_t *entry, const bson_t *command,
                                    uint32_t sequence_fields, const char *command_name, const char *database)
{
    int64_t started_us = clock_monotonic_us();
    pthread_mutex_lock(&table->mutex);
    entry->opid = ++table->last_opid;
    entry->command = command;
    entry->sequence_fields = sequence_fields;
    entry->command_name = command_name;
    entry->database = database;
    entry->started_us = started_us;
    atomic_store_explicit(&entry->killed, false, memory_order_relaxed);
    entry->active = true;
    pthread_mutex_unlock(&table->mutex);
    return &entry->killed;
}

void current_op_end(current_op_table_t *table, current_op_entry_t *entry)
{
    pthread_mutex_lock(&table->mutex);
    entry->active = false;
    entry->command = NULL;
    entry->sequence_fields = 0;
    entry->command_name = NULL;
    entry->database = NULL;
    pthread_mutex_unlock(&table->mutex);
}

void current_op_move_command(current_op_table_t *table, current_op_entry_t *entry, bson_t *from, bson_t *to)
{
    bson_iter_t iter;
    pthread_mutex_lock(&table->mutex);
    if (!bson_steal(to, from)) { /* only a bson_init_static document cannot be stolen */
        bson_copy_to(from, to);
        bson_destroy(from);
    }
    bson_init(from);
    if (entry != NULL && entry->active) {
        /* The name and $db where dispatch_command read them, now in `to`. */
        entry->command = to;
        if (bson_iter_init(&iter, to) && bson_iter_next(&iter)) {
            entry->command_name = bson_iter_key(&iter);
        }
        if (bson_iter_init_find(&iter, to, "$db") && BSON_ITER_HOLDS_UTF8(&iter)) {
            entry->database = bson_iter_utf8(&iter, NULL);
        }
    }
    pthread_mutex_unlock(&table->mutex);
}

bool current_op_kill(current_op_table_t *table, int64_t opid, const char *owner_name, const char *owner_database)
{
    bool found = false;
    pthread_mutex_lock(&table->mutex);
    for (current_op_entry_t *entry = table->first; entry != NULL; entry = entry->next) {
        bool owned = owner_name == NULL || (current_op_same_name(entry->user_name, owner_name) &&
                                            current_op_same_name(entry->user_database, owner_database));
        if (entry->active && entry->opid == opid && owned) {
            atomic_store(&entry->killed, true);
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&table->mutex);
    return found;
}

/* --- reports ----------------------------------------------------------------------- */

void current_op_array_append(bson_t *array, uint32_t *count, const bson_t *document)
{
    char key[16];
    const char *key_string;
    bson_uint32_to_string((*count)++, &key_string, key, sizeof key);
    BSON_APPEND_DOCUMENT(array, key_string, document);
}

void current_op_format_time(int64_t wall_ms, char *buffer, size_t size)
{
    time_t seconds = (time_t)(wall_ms / 1000);
    struct tm parts;
    char date[32];
    gmtime_r(&seconds, &parts);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &parts);
    snprintf(buffer, size, "%s.%03d+00:00", date, (int)(wall_ms % 1000));
}

static bool is_visible(const current_op_entry_t *entry, const current_op_report_options_t *options)
{
    if (options->all_users || !options->auth_enabled) {
        return true;
    }
    return options->user_name != NULL && current_op_same_name(entry->user_name, options->user_name) &&
           current_op_same_name(entry->user_database, options->user_database);
}

/* The fields an operation and an idle connection share: who and where. */
static void append_client(const current_op_entry_t *entry, const current_op_report_options_t *options,
                          int64_t now_wall_ms, bson_t *out)
{
    char text[64];
    BSON_APPEND_UTF8(out, "type", "op");
    BSON_APPEND_UTF8(out, "host", options->host);
    snprintf(text, sizeof text, "conn%llu", (unsigned long long)entry->connection_id);
    BSON_APPEND_UTF8(out, "desc", text);
    BSON_APPEND_INT64(out, "connectionId", (int64_t)entry->connection_id);
    BSON_APPEND_UTF8(out, "client", entry->peer_address);
    if (entry->client_metadata != NULL) {
        bson_iter_t iter, name;
        if (bson_iter_init(&iter, entry->client_metadata) &&
            bson_iter_find_descendant(&iter, "application.name", &name) && BSON_ITER_HOLDS_UTF8(&name)) {
            BSON_APPEND_UTF8(out, "appName", bson_iter_utf8(&name, NULL));
        }
        BSON_APPEND_DOCUMENT(out, "clientMetadata", entry->client_metadata);
    }
    BSON_APPEND_BOOL(out, "active", entry->active);
    current_op_format_time(now_wall_ms, text, sizeof text);
    BSON_APPEND_UTF8(out, "currentOpTime", text);
    if (entry->user_name != NULL) {
        bson_t users, user;
        BSON_APPEND_ARRAY_BEGIN(out, "effectiveUsers", &users);
        BSON_APPEND_DOCUMENT_BEGIN(&users, "0", &user);
        BSON_APPEND_UTF8(&user, "user", entry->user_name);
        BSON_APPEND_UTF8(&user, "db", entry->user_database != NULL ? entry->user_database : "");
        bson_append_document_end(&users, &user);
        bson_append_array_end(out, &users);
    }
    BSON_APPEND_BOOL(out, "threaded", true);
}

/* lsid as mongod shows it: the client's id and the uid of the session's user. */
static void append_lsid(const current_op_entry_t *entry, const bson_iter_t *lsid, bson_t *out)
{
    bson_t shown;
    bson_iter_t id;
    BSON_APPEND_DOCUMENT_BEGIN(out, "lsid", &shown);
    if (bson_iter_recurse(lsid, &id) && bson_iter_find(&id, "id")) {
        bson_append_iter(&shown, "id", 2, &id);
    }
    session_cache_append_uid(&shown, entry->user_name, entry->user_database);
    bson_append_document_end(out, &shown);
}

/* A multi-document transaction's parameters, as mongod's `transaction` field. */
static void append_transaction(const bson_t *command, bson_t *out)
{
    bson_iter_t number, autocommit;
    if (!bson_iter_init_find(&number, command, "txnNumber") ||
        !bson_iter_init_find(&autocommit, command, "autocommit")) {
        return;
    }
    bson_t transaction, parameters;
    BSON_APPEND_DOCUMENT_BEGIN(out, "transaction", &transaction);
    BSON_APPEND_DOCUMENT_BEGIN(&transaction, "parameters", &parameters);
    BSON_APPEND_INT64(&parameters, "txnNumber", bson_iter_as_int64(&number));
    BSON_APPEND_BOOL(&parameters, "autocommit", bson_iter_as_bool(&autocommit));
    bson_append_document_end(&transaction, &parameters);
    bson_append_document_end(out, &transaction);
}

static void append_operation(const current_op_entry_t *entry, const current_op_report_options_t *options,
                             int64_t now_us, bson_t *out)
{
    bson_iter_t lsid;
    bson_t empty = BSON_INITIALIZER;
    int64_t running_us = now_us - entry->started_us;
    BSON_APPEND_INT64(out, "opid", entry->opid);
    if (bson_iter_init_find(&lsid, entry->command, "lsid") && BSON_ITER_HOLDS_DOCUMENT(&lsid)) {
        append_lsid(entry, &lsid, out);
    }
    append_transaction(entry->command, out);
    BSON_APPEND_INT64(out, "secs_running", running_us / 1000000);
    BSON_APPEND_INT64(out, "microsecs_running", running_us);
    BSON_APPEND_UTF8(out, "op", current_op_kind(entry->command_name));
    char *ns = current_op_namespace(entry->command, entry->command_name, entry->database);
    BSON_APPEND_UTF8(out, "ns", ns);
    bson_free(ns);
    BSON_APPEND_BOOL(out, "redacted", false);
    current_op_append_command(out, entry->command, entry->sequence_fields,
                              options->truncate_ops ? CURRENT_OP_MAX_COMMAND_BYTES : 0);
    BSON_APPEND_INT64(out, "numYields", 0);
    BSON_APPEND_DOCUMENT(out, "locks", &empty);
    BSON_APPEND_BOOL(out, "waitingForLock", false);
    BSON_APPEND_DOCUMENT(out, "lockStats", &empty);
    BSON_APPEND_BOOL(out, "waitingForFlowControl", false);
    BSON_APPEND_DOCUMENT(out, "flowControlStats", &empty);
    if (atomic_load(&entry->killed)) {
        BSON_APPEND_BOOL(out, "killPending", true);
    }
}

void current_op_report(current_op_table_t *table, const current_op_report_options_t *options, bson_t *array,
                       uint32_t *count)
{
    int64_t now_us = clock_monotonic_us();
    int64_t now_wall_ms = clock_wall_ms();
    pthread_mutex_lock(&table->mutex);
    for (const current_op_entry_t *entry = table->first; entry != NULL; entry = entry->next) {
        if ((!entry->active && !options->idle_connections) || !is_visible(entry, options)) {
            continue;
        }
        bson_t document = BSON_INITIALIZER;
        append_client(entry, options, now_wall_ms, &document);
        if (entry->active) {
            append_operation(entry, options, now_us, &document);
        }
        current_op_array_append(array, count, &document);
        bson_destroy(&document);
    }
    pthread_mutex_unlock(&table->mutex);
}

/* --- pure helpers ------------------------------------------------------------------- */

/* Appends to body the command's fields less its last sequence_fields
 * (wire_op_msg_command appends the document sequences after the body's fields). */
static void append_body(const bson_t *command, uint32_t sequence_fields, bson_t *body)
{
    uint32_t fields = bson_count_keys(command);
    uint32_t body_fields = fields > sequence_fields ? fields - sequence_fields : 0;
    bson_iter_t iter;
    if (bson_iter_init(&iter, command)) {
        for (uint32_t i = 0; i < body_fields && bson_iter_next(&iter); i++) {
            bson_append_iter(body, NULL, 0, &iter);
        }
    }
}

void current_op_append_command(bson_t *out, const bson_t *command, uint32_t sequence_fields, size_t max_bytes)
{
    bson_t body = BSON_INITIALIZER;
    if (sequence_fields > 0) {
        append_body(command, sequence_fields, &body);
        command = &body;
    }
    if (max_bytes == 0 || command->len <= max_bytes) {
        BSON_APPEND_DOCUMENT(out, "command", command);
        goto done;
    }
    size_t length;
    char *text = bson_as_relaxed_extended_json(command, &length);
    if (text == NULL) {
        text = bson_strdup("{}");
        length = 2;
    }
    if (length > max_bytes) {
        memcpy(text + max_bytes - 3, "...", 3);
        length = max_bytes;
    }
    bson_t truncated;
    bson_iter_t comment;
    BSON_APPEND_DOCUMENT_BEGIN(out, "command", &truncated);
    bson_append_utf8(&truncated, "$truncated", -1, text, (int)length);
    if (bson_iter_init_find(&comment, command, "comment")) {
        bson_append_iter(&truncated, "comment", -1, &comment);
    }
    bson_append_document_end(out, &truncated);
    bson_free(text);
done:
    bson_destroy(&body);
}

const char *current_op_kind(const char *command_name)
{
    static const char *const kinds[][2] = {
        {"find", "query"}, {"insert", "insert"}, {"update", "update"}, {"delete", "remove"}, {"getMore", "getmore"},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strcmp(command_name, kinds[i][0]) == 0) {
            return kinds[i][1];
        }
    }
    return "command";
}

char *current_op_namespace(const bson_t *command, const char *command_name, const char *database)
{
    bson_iter_t iter;
    if (strcmp(command_name, "getMore") == 0 && bson_iter_init_find(&iter, command, "collection") &&
        BSON_ITER_HOLDS_UTF8(&iter)) {
        return bson_strdup_printf("%s.%s", database, bson_iter_utf8(&iter, NULL));
    }
    if (bson_iter_init(&iter, command) && bson_iter_next(&iter)) {
        if (BSON_ITER_HOLDS_UTF8(&iter) && bson_iter_utf8(&iter, NULL)[0] != '\0') {
            return bson_strdup_printf("%s.%s", database, bson_iter_utf8(&iter, NULL));
        }
        if (strcmp(command_name, "aggregate") == 0) {
            return bson_strdup_printf("%s.$cmd.aggregate", database);
        }
    }
    return bson_strdup_printf("%s.$cmd", database);
}

void current_op_command_filter(const bson_t *command, bson_t *out)
{
    bson_iter_t iter;
    bson_init(out);
    if (!bson_iter_init(&iter, command) || !bson_iter_next(&iter)) {
        return; /* the first field is the command's name */
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "$all") != 0 && strcmp(key, "$ownOps") != 0 && !command_is_generic_argument(key)) {
            bson_append_iter(out, key, -1, &iter);
        }
    }
}
