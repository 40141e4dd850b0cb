/* From wire message to reply: decompress, parse OP_MSG or a legacy OP_QUERY
 * command, find the handler, run it inside the catalog lock's rules, and encode
 * the reply in the request's own format (and compressor). Also the small helpers
 * every handler uses to read command fields the way mongod validates them. */
#include "store/dispatch.h"
#include "store/command_collation.h"
#include "store/slow_ops.h"
#include "store/auth.h"
#include "store/change_stream.h"
#include "store/oplog.h"
#include "store/transactions.h"
#include "store/validation.h"
#include "query/value_format.h"
#include "common/clock.h"
#include "common/log.h"
#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

static const command_definition_t *const command_tables[] = {
    admin_commands, catalog_commands, coll_mod_commands, rename_commands, write_commands, read_commands, aggregate_commands,
    auth_commands,
    transaction_commands, current_op_commands,
};

static const command_definition_t *find_command(const char *name)
{
    for (size_t t = 0; t < sizeof command_tables / sizeof command_tables[0]; t++) {
        for (const command_definition_t *definition = command_tables[t]; definition->name != NULL; definition++) {
            if (strcmp(definition->name, name) == 0) {
                return definition;
            }
        }
    }
    return NULL;
}

/* --- field helpers ------------------------------------------------------------ */


bool command_namespace(const command_context_t *context, char **out_ns, bson_error_t *error)
{
    bson_iter_t iter;
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter);
    if (!BSON_ITER_HOLDS_UTF8(&iter)) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE,
                            "collection name has invalid type %s", value_type_name(bson_iter_type(&iter)));
    }
    const char *collection = bson_iter_utf8(&iter, NULL);
    if (collection[0] == '\0') {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "Invalid namespace specified '%s.'", context->database);
    }
    *out_ns = bson_strdup_printf("%s.%s", context->database, collection);
    return true;
}

bool command_get_document(const command_context_t *context, const char *field, bson_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    static const uint8_t empty[5] = {5, 0, 0, 0, 0};
    bson_init_static(out, empty, sizeof empty);
    if (!bson_iter_init_find(&iter, context->command, field) || BSON_ITER_HOLDS_NULL(&iter)) {
        return true;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '%s.%s' is the wrong type '%s', expected type 'object'",
                            context->name, field, value_type_name(bson_iter_type(&iter)));
    }
    uint32_t length;
    const uint8_t *data;
    bson_iter_document(&iter, &length, &data);
    bson_init_static(out, data, length);
    return true;
}

bool command_get_int64(const command_context_t *context, const char *field, int64_t default_value, int64_t *out,
                       bson_error_t *error)
{
    bson_iter_t iter;
    *out = default_value;
    if (!bson_iter_init_find(&iter, context->command, field) || BSON_ITER_HOLDS_NULL(&iter)) {
        return true;
    }
    if (!BSON_ITER_HOLDS_NUMBER(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field '%s.%s' is the wrong type '%s', expected types '[long, int, decimal, double]'",
                            context->name, field, value_type_name(bson_iter_type(&iter)));
    }
    if (BSON_ITER_HOLDS_DOUBLE(&iter)) {
        double value = bson_iter_double(&iter);
        if (value != (double)(int64_t)value) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Expected an integer for '%s.%s': %g", context->name,
                                field, value);
        }
    }
    *out = bson_iter_as_int64(&iter);
    return true;
}

bool command_get_bool(const command_context_t *context, const char *field, bool default_value, bool *out,
                      bson_error_t *error)
{
    bson_iter_t iter;
    *out = default_value;
    if (!bson_iter_init_find(&iter, context->command, field) || BSON_ITER_HOLDS_NULL(&iter)) {
        return true;
    }
    if (!BSON_ITER_HOLDS_BOOL(&iter) && !BSON_ITER_HOLDS_NUMBER(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '%s.%s' is the wrong type '%s', expected type 'bool'",
                            context->name, field, value_type_name(bson_iter_type(&iter)));
    }
    *out = bson_iter_as_bool(&iter);
    return true;
}

bool command_require_admin_database(const command_context_t *context, bson_error_t *error)
{
    if (strcmp(context->database, "admin") != 0) {
        return tc_error_set(error, TC_ERR_UNAUTHORIZED, "%s may only be run against the admin database.",
                            context->name);
    }
    return true;
}

bool command_get_required_string(const command_context_t *context, const char *field, const char **out,
                                 bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, context->command, field)) {
        return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD, "BSON field '%s.%s' is missing but a required field",
                            context->name, field);
    }
    if (!BSON_ITER_HOLDS_UTF8(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '%s.%s' is the wrong type '%s', expected type 'string'",
                            context->name, field, value_type_name(bson_iter_type(&iter)));
    }
    *out = bson_iter_utf8(&iter, NULL);
    return true;
}

bool command_is_generic_argument(const char *field)
{
    static const char *const generic_arguments[] = {
        "$db", "lsid", "txnNumber", "autocommit", "startTransaction", "$clusterTime", "$readPreference",
        "readConcern", "writeConcern", "maxTimeMS", "comment", "apiVersion", "apiStrict", "apiDeprecationErrors",
        "$audit", "$client", "databaseVersion", "shardVersion", "$configServerState", "$gleStats",
        "mayBypassWriteBlocking", "$configTime", "$topologyTime", "clientOperationKey", "$queryOptions", NULL,
    };
    for (const char *const *name = generic_arguments; *name != NULL; name++) {
        if (strcmp(*name, field) == 0) {
            return true;
        }
    }
    return false;
}

bool command_wants_durable_write(const command_context_t *context)
{
    bson_iter_t iter, concern;
    if (context->transaction != NULL && strcmp(context->name, "commitTransaction") != 0) {
        return false;
    }
    if (bson_iter_init_find(&iter, context->command, "writeConcern") && BSON_ITER_HOLDS_DOCUMENT(&iter) &&
        bson_iter_recurse(&iter, &concern)) {
        while (bson_iter_next(&concern)) {
            const char *key = bson_iter_key(&concern);
            if ((strcmp(key, "j") == 0 || strcmp(key, "fsync") == 0) && bson_iter_as_bool(&concern)) {
                return true;
            }
            if (strcmp(key, "w") == 0 && BSON_ITER_HOLDS_UTF8(&concern) &&
                strcmp(bson_iter_utf8(&concern, NULL), "majority") == 0 && context->store->options.replica_set) {
                return true;
            }
        }
        return false;
    }
    /* Under --replSet the default write concern is majority, journaled. */
    return context->store->options.replica_set != NULL;
}

bool command_sync_journal(command_context_t *context, storage_session_t *session, bson_error_t *error)
{
    if (context->journal_sync_wanted != NULL) {
        *context->journal_sync_wanted = true;
        return true;
    }
    return oplog_sync_journal(session, error);
}

/* --- batches ------------------------------------------------------------------ */

/* Room left under the 16 MiB reply for the cursor envelope and other fields. */
#define BATCH_MAX_BYTES (WIRE_MAX_BSON_OBJECT_SIZE - 64 * 1024)

bool batch_builder_emit(void *context, const bson_t *document, int64_t record_id)
{
    batch_builder_t *batch = context;
    (void)record_id;
    if (batch->limit > 0 && batch->count >= batch->limit) {
        return false;
    }
    /* The first document always goes in, as mongod returns an oversized one alone. */
    if (batch->count > 0 && batch->bytes + document->len + 16 > BATCH_MAX_BYTES) {
        return false;
    }
    char key[16];
    const char *key_string;
    bson_uint32_to_string(batch->count, &key_string, key, sizeof key);
    bson_append_document(&batch->array, key_string, -1, document);
    batch->count++;
    batch->bytes += document->len + 16;
    return true;
}

static bool fill_from_cursor(command_context_t *context, store_cursor_t *cursor, collection_t *collection,
                             batch_builder_t *batch, bool *out_exhausted, bson_error_t *error)
{
    if (cursor->plan != NULL) {
        if (!storage_begin(context->session, error)) {
            return false;
        }
        bool ok = find_plan_run(cursor->plan, context->session, collection, batch_builder_emit, batch, out_exhausted,
                                error);
        storage_rollback(context->session); /* read-only: nothing to commit */
        return ok;
    }
    if (cursor->stream != NULL) {
        return aggregation_fill_batch(context, cursor->stream, collection, batch, out_exhausted, error);
    }
    while (cursor->next_document < cursor->document_count) {
        if (!batch_builder_emit(batch, cursor->documents[cursor->next_document], 0)) {
            break;
        }
        bson_destroy(cursor->documents[cursor->next_document]);
        cursor->documents[cursor->next_document] = NULL;
        cursor->next_document++;
    }
    *out_exhausted = cursor->next_document >= cursor->document_count;
    return true;
}

bool command_fill_batch(command_context_t *context, store_cursor_t *cursor, collection_t *collection,
                        batch_builder_t *batch, bool *out_exhausted, bson_error_t *error)
{
    uint32_t count_before = batch->count;
    bool ok = fill_from_cursor(context, cursor, collection, batch, out_exhausted, error);
    cursor->documents_returned += batch->count - count_before; /* $currentOp's idle cursors show them */
    cursor->batches_returned++;
    return ok;
}

/* --- dispatch ------------------------------------------------------------------ */

static void count_operation(store_t *store, const char *name)
{
    if (strcmp(name, "insert") == 0) {
        return; /* counted per document by the handler */
    }
    if (strcmp(name, "find") == 0) {
        atomic_fetch_add(&store->opcounters.query, 1);
    } else if (strcmp(name, "getMore") == 0) {
        atomic_fetch_add(&store->opcounters.getmore, 1);
    } else if (strcmp(name, "update") != 0 && strcmp(name, "delete") != 0) {
        atomic_fetch_add(&store->opcounters.command, 1);
    }
}

/* What a replica set member adds to every reply: $clusterTime (unsigned: the
 * zero signature of a deployment without keyFile) and operationTime. */
/* errorLabels, as mongod's ErrorLabelBuilder gives them: the ones drivers act on
 * (retry the transaction, do not resume the change stream). */
static void append_error_labels(const bson_t *command, const bson_error_t *error, bson_t *reply)
{
    const char *labels[] = {transaction_error_label(command, error), change_stream_error_label(error)};
    bson_t array;
    uint32_t count = 0;
    for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++) {
        if (labels[i] == NULL) {
            continue;
        }
        if (count == 0) {
            BSON_APPEND_ARRAY_BEGIN(reply, "errorLabels", &array);
        }
        char key[16];
        const char *key_string;
        bson_uint32_to_string(count++, &key_string, key, sizeof key);
        BSON_APPEND_UTF8(&array, key_string, labels[i]);
    }
    if (count > 0) {
        bson_append_array_end(reply, &array);
    }
}

static void append_cluster_time(storage_session_t *session, bson_t *reply)
{
    static const uint8_t zero_hash[20] = {0};
    oplog_t *oplog = oplog_for(storage_session_storage(session));
    if (oplog == NULL) {
        return;
    }
    uint64_t operation_time = oplog_session_operation_time(session);
    uint64_t cluster_time = oplog_cluster_time(oplog);
    if (cluster_time < operation_time) {
        cluster_time = operation_time;
    }
    bson_t cluster, signature;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "$clusterTime", &cluster);
    BSON_APPEND_TIMESTAMP(&cluster, "clusterTime", OPLOG_TIME_SECONDS(cluster_time),
                          OPLOG_TIME_INCREMENT(cluster_time));
    BSON_APPEND_DOCUMENT_BEGIN(&cluster, "signature", &signature);
    BSON_APPEND_BINARY(&signature, "hash", BSON_SUBTYPE_BINARY, zero_hash, sizeof zero_hash);
    BSON_APPEND_INT64(&signature, "keyId", 0);
    bson_append_document_end(&cluster, &signature);
    bson_append_document_end(reply, &cluster);
    BSON_APPEND_TIMESTAMP(reply, "operationTime", OPLOG_TIME_SECONDS(operation_time),
                          OPLOG_TIME_INCREMENT(operation_time));
}

/* The commands whose `let` defines variables for their expressions, as in
 * MongoDB 6.0; the others refuse the field as unknown. */
static bool takes_let(const char *name)
{
    static const char *const names[] = {"find", "aggregate", "update", "delete", "findAndModify", "findandmodify"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(name, names[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* One $$NOW for the whole command, and its let variables evaluated once. */
static bool read_expression_context(command_context_t *context, expression_context_t *out_context,
                                    bson_t *out_values, bson_error_t *error)
{
    bson_iter_t iter;
    expression_context_init(out_context);
    context->expression_context = out_context;
    if (!takes_let(context->name) || !bson_iter_init_find(&iter, context->command, "let")) {
        return true;
    }
    bson_destroy(out_values);
    return expression_evaluate_let(bson_iter_value(&iter), out_context, out_values, error);
}

/* The connection's state, made on its first command; NULL outside a connection. */
static store_connection_t *connection_get(store_t *store, void **connection_data, uint64_t connection_id,
                                          const char *peer_address)
{
    if (connection_data == NULL) {
        return NULL;
    }
    if (*connection_data == NULL) {
        store_connection_t *connection = bson_malloc0(sizeof *connection);
        current_op_register(store->operations, &connection->operation, connection_id, peer_address);
        *connection_data = connection;
    }
    return *connection_data;
}

void dispatch_connection_close(store_t *store, void *connection_data)
{
    store_connection_t *connection = connection_data;
    if (connection == NULL) {
        return;
    }
    current_op_unregister(store->operations, &connection->operation);
    auth_session_destroy(connection->auth);
    bson_free(connection);
}

/* The command enters the table of operations in progress (its connection's
 * entry, or local_entry outside one), its lsid the session cache. */
static void begin_operation(command_context_t *context, current_op_entry_t *local_entry, uint32_t sequence_fields)
{
    store_t *store = context->store;
    const privileges_user_t *user = auth_connection_user(context->connection);
    const char *user_name = user != NULL ? user->name : NULL;
    const char *user_database = user != NULL ? user->database : NULL;
    if (context->connection != NULL) {
        context->operation = &context->connection->operation;
    } else {
        context->operation = local_entry;
        current_op_register(store->operations, local_entry, context->connection_id, context->peer_address);
    }
    current_op_set_user(store->operations, context->operation, user_name, user_database);
    session_cache_note_command(store->sessions, context->command, user_name, user_database);
    current_op_begin(store->operations, context->operation, context->command, sequence_fields, context->name,
                     context->database);
}

static void end_operation(command_context_t *context)
{
    if (context->operation == NULL) {
        return;
    }
    current_op_end(context->store->operations, context->operation);
    if (context->connection == NULL) {
        current_op_unregister(context->store->operations, context->operation);
    }
    context->operation = NULL;
}

void dispatch_command(store_t *store, storage_session_t *session, const bson_t *command, uint64_t connection_id,
                      const char *peer_address, bson_t *reply, dispatch_control_t *control)
{
    bson_error_t error = {0};
    bson_iter_t iter;
    bson_t error_info = BSON_INITIALIZER; /* a validation failure's (validation.h) */
    command_context_t context = {
        .store = store,
        .session = session,
        .command = command,
        .connection_id = connection_id,
        .peer_address = peer_address,
        .attempt = control->attempt,
        .connection = connection_get(store, control->connection_data, connection_id, peer_address),
        .error_info = &error_info,
        .journal_sync_wanted = control->journal_sync_deferrable ? &control->journal_sync_wanted : NULL,
    };
    current_op_entry_t local_entry = {0}; /* the table's entry of a command outside a connection */
    transaction_command_t transaction;
    bson_t duplicate_key = BSON_INITIALIZER; /* read before a transaction's session is given back */
    bson_t let_values = BSON_INITIALIZER;
    expression_context_t expression_context;
    const collation_t *collation = NULL; /* the command's, held until the reply */
    bool ok = false;
    int64_t handler_started_us = 0;
    slow_op_watch_t watch;
    slow_op_start(&watch, control->submitted_us);

    if (!bson_iter_init(&iter, command) || !bson_iter_next(&iter)) {
        tc_error_set(&error, TC_ERR_FAILED_TO_PARSE, "Empty command: a command document needs a command name");
        goto done;
    }
    context.name = bson_iter_key(&iter);
    if (!bson_iter_init_find(&iter, command, "$db") || !BSON_ITER_HOLDS_UTF8(&iter)) {
        tc_error_set(&error, TC_ERR_FAILED_TO_PARSE, "Missing or invalid '$db' field in command %s", context.name);
        goto done;
    }
    context.database = bson_iter_utf8(&iter, NULL);
    if (context.database[0] == '\0' || strchr(context.database, '.') != NULL ||
        strchr(context.database, ' ') != NULL) {
        tc_error_set(&error, TC_ERR_INVALID_NAMESPACE, "Invalid database name: '%s'", context.database);
        goto done;
    }
    begin_operation(&context, &local_entry, control->sequence_fields);
    const command_definition_t *definition = find_command(context.name);
    if (definition == NULL) {
        tc_error_set(&error, TC_ERR_COMMAND_NOT_FOUND, "no such command: '%s'", context.name);
        goto done;
    }
    if (!control->internal && !auth_check_command(&context, &error)) {
        goto done;
    }
    if (!read_expression_context(&context, &expression_context, &let_values, &error)) {
        goto done;
    }
    if (!command_collation_resolve(&context, &expression_context, &collation, &error)) {
        goto done;
    }
    if (!transaction_begin_command(&context, &transaction, &error)) {
        goto done;
    }
    if (context.attempt == 0) {
        count_operation(store, context.name); /* a request run again counts once */
    }
    oplog_session_begin_command(session);
    handler_started_us = clock_monotonic_us();
    storage_session_t *watched_session = context.session; /* the handler's scans read its kill flag */
    storage_session_set_interrupt(watched_session, &context.operation->killed);
    ok = definition->handler(&context, reply, &error);
    storage_session_set_interrupt(watched_session, NULL);
    if (storage_in_transaction(context.session)) {
        storage_rollback(context.session); /* a handler that failed mid-write (a held transaction stays) */
    }
    if (!ok && error.domain == TC_ERROR_DOMAIN && error.code == TC_ERR_DUPLICATE_KEY) {
        storage_append_duplicate_key(context.session, &duplicate_key);
    }
    transaction_end_command(&context, &transaction, ok);
    if (ok && context.rerun_after_ms > 0) {
        bson_reinit(reply);
        control->run_again = true;
        control->delay_ms = context.rerun_after_ms;
        bson_destroy(&duplicate_key);
        bson_destroy(&error_info);
        bson_destroy(&let_values);
        collation_release(collation);
        end_operation(&context);
        return;
    }
    if (!control->journal_sync_wanted) { /* else with the wait for the journal, in slow_op_release */
        op_latency_record(&store->latencies, context.name, (uint64_t)(clock_monotonic_us() - handler_started_us));
    }
    if (ok) {
        auth_after_command(&context, reply);
    }
done:
    if (ok) {
        BSON_APPEND_DOUBLE(reply, "ok", 1.0);
    } else {
        bson_reinit(reply);
        tc_error_append_reply(&error, reply);
        bson_concat(reply, &duplicate_key);
        validation_append_error_info(&context, &error, reply);
        append_error_labels(command, &error, reply);
        TC_LOG_ATTRS(TC_LOG_DEBUG, "COMMAND", connection_id, "{command} failed: {error}",
                     TC_ATTR_STR("command", context.name ? context.name : "?"), TC_ATTR_STR("error", error.message),
                     TC_ATTR_INT("code", error.code));
    }
    append_cluster_time(session, reply);
    control->run_again = false;
    control->delay_ms = context.reply_delay_ms;
    if (control->journal_sync_wanted) {
        /* A connection's operation stays in currentOp while its reply waits for the journal, as on mongod. */
        current_op_entry_t *waiting = context.connection != NULL ? context.operation : NULL;
        control->held_operation = slow_op_hold(&watch, store, context.name, context.database, reply,
                                               ok ? NULL : &error, connection_id, handler_started_us, waiting);
        if (waiting != NULL) {
            context.operation = NULL; /* the held operation ends it */
        }
    } else {
        slow_op_finish(&watch, store, session, context.name, context.database, command, reply,
                       ok ? NULL : &error, connection_id);
    }
    end_operation(&context);
    bson_destroy(&duplicate_key);
    bson_destroy(&error_info);
    bson_destroy(&let_values);
    collation_release(collation);
}

static bool is_never_compressed(const bson_t *command)
{
    /* The compression spec: handshake and authentication are never compressed. */
    static const char *const names[] = {"hello", "isMaster", "ismaster", "saslStart", "saslContinue",
                                        "getnonce", "authenticate", "createUser", "updateUser",
                                        "copydbSaslStart", "copydbgetnonce", "copydb"};
    bson_iter_t iter;
    if (!bson_iter_init(&iter, command) || !bson_iter_next(&iter)) {
        return false;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(bson_iter_key(&iter), names[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* A durable write's reply and operation, waiting for the journal. */
typedef struct journaled_reply {
    server_held_reply_t *reply;
    slow_op_held_t *operation;
} journaled_reply_t;

/* A held reply's journal sync has ended: the reply goes out, or, when the sync
 * failed, the connection closes with the write unacknowledged. The operation's
 * latency counts the wait before the reply goes; its slow line is written after,
 * so that no other reply of the sync waits for a log line. */
static void release_when_journaled(void *argument, bool synced, storage_session_t *session)
{
    journaled_reply_t *journaled = argument;
    if (!synced) {
        TC_LOG(TC_LOG_WARNING, "STORAGE", 0, "closing a connection whose write the journal could not sync");
    }
    slow_op_end_wait(journaled->operation, synced);
    server_release_reply(journaled->reply, synced);
    slow_op_release(journaled->operation, session);
    bson_free(journaled);
}

/* The reply to a durable write waits for the journal's next sync, and the
 * command's latency, slow line and currentOp entry with it. The held operation
 * takes the command's document (left empty). */
static void hold_until_journaled(store_t *store, bson_t *command, server_reply_t *out_reply,
                                 dispatch_control_t *control)
{
    journaled_reply_t *journaled = bson_malloc(sizeof *journaled);
    slow_op_adopt_command(control->held_operation, command);
    *journaled = (journaled_reply_t){.reply = server_hold_reply(out_reply), .operation = control->held_operation};
    control->held_operation = NULL;
    oplog_after_journal_sync(store->storage, release_when_journaled, journaled);
}

void dispatch_message(store_t *store, storage_session_t *session, const server_request_t *request,
                      server_reply_t *out_reply)
{
    bson_error_t error = {0};
    wire_header_t header;
    uint8_t *decompressed = NULL;
    const uint8_t *message = request->message;
    size_t length = request->length;
    uint8_t compressor = 0;
    bool compressed = false;
    bson_t command = BSON_INITIALIZER;
    bson_t reply = BSON_INITIALIZER;
    bool legacy = false;
    bool more_to_come = false;
    dispatch_control_t control = {
        .attempt = request->attempt, .connection_data = request->connection_data, .submitted_us = request->submitted_us};
    uint8_t *encoded = NULL;
    size_t encoded_length = 0;

    memset(out_reply, 0, sizeof *out_reply);
    if (!wire_request_header_parse(message, length, &header, &error)) {
        goto refuse;
    }
    if (header.opcode == WIRE_OP_COMPRESSED) {
        size_t decompressed_length;
        if (!wire_decompress(message, length, &decompressed, &decompressed_length, &compressor, &error)) {
            goto refuse;
        }
        compressed = true;
        message = decompressed;
        length = decompressed_length;
        if (!wire_request_header_parse(message, length, &header, &error)) {
            goto refuse;
        }
    }
    if (header.opcode == WIRE_OP_MSG) {
        wire_op_msg_t parsed;
        bson_destroy(&command);
        if (!wire_op_msg_parse(message, length, &parsed, &error)) {
            bson_init(&command);
            goto error_reply;
        }
        more_to_come = (parsed.flags & WIRE_MSG_FLAG_MORE_TO_COME) != 0;
        if (!wire_op_msg_command(&parsed, &command, &error)) {
            goto error_reply;
        }
        control.sequence_fields = (uint32_t)parsed.sequence_count;
    } else if (header.opcode == WIRE_OP_QUERY) {
        wire_op_query_t query;
        legacy = true;
        bool parsed = wire_op_query_parse(message, length, &query, &error);
        if (wire_op_query_is_removed(&query)) {
            /* A legacy find: mongod answers it from the namespace alone. */
            if (!wire_op_query_removed_reply_build(0, header.request_id, &encoded, &encoded_length, &error)) {
                goto refuse;
            }
            goto compress;
        }
        if (!parsed) {
            goto error_reply;
        }
        bson_destroy(&command);
        if (!wire_op_query_command(&query, &command, &error) || !wire_op_query_check_command(&command, &error)) {
            goto error_reply;
        }
    } else {
        tc_error_set(&error, TC_ERR_ILLEGAL_OPERATION,
                     "Opcode %d is no longer supported: MongoDB 6.0 accepts only OP_MSG (and OP_QUERY commands "
                     "for the handshake)",
                     header.opcode);
        legacy = true;
        goto error_reply;
    }
    control.journal_sync_deferrable = !more_to_come;
    dispatch_command(store, session, &command, request->connection_id, request->peer_address, &reply, &control);
    if (control.run_again) {
        out_reply->run_again = true;
        out_reply->delay_ms = control.delay_ms;
        goto done;
    }
    goto encode;

error_reply:
    bson_reinit(&reply);
    tc_error_append_reply(&error, &reply);
    TC_LOG_ATTRS(TC_LOG_INFO, "NETWORK", request->connection_id, "bad message from {remote}: {error}",
                 TC_ATTR_STR("remote", request->peer_address), TC_ATTR_STR("error", error.message));
encode:
    if (more_to_come) {
        goto done; /* the client asked for no reply */
    }
    if (legacy) {
        if (!wire_op_reply_command_build(0, header.request_id, &reply, &encoded, &encoded_length, &error)) {
            goto refuse;
        }
    } else if (!wire_op_msg_build(0, header.request_id, 0, &reply, NULL, 0, &encoded, &encoded_length, &error)) {
        bson_t too_large = BSON_INITIALIZER;
        tc_error_append_reply(&error, &too_large);
        bool built = wire_op_msg_build(0, header.request_id, 0, &too_large, NULL, 0, &encoded, &encoded_length, &error);
        bson_destroy(&too_large);
        if (!built) {
            goto refuse;
        }
    }
compress:
    if (compressed && !is_never_compressed(&command)) {
        uint8_t *recompressed;
        size_t recompressed_length;
        if (wire_compress(encoded, encoded_length, compressor, &recompressed, &recompressed_length, &error)) {
            bson_free(encoded);
            encoded = recompressed;
            encoded_length = recompressed_length;
        }
    }
    out_reply->data = encoded;
    out_reply->length = encoded_length;
    out_reply->delay_ms = control.delay_ms;
    encoded = NULL;
    if (control.journal_sync_wanted) {
        hold_until_journaled(store, &command, out_reply, &control);
    }
    goto done;

refuse:
    /* Framing we cannot answer in kind: log and close, as mongod does. */
    TC_LOG_ATTRS(TC_LOG_INFO, "NETWORK", request->connection_id, "closing connection from {remote}: {reason}",
                 TC_ATTR_STR("remote", request->peer_address), TC_ATTR_STR("reason", error.message));
    out_reply->close_after = true;
done:
    if (control.held_operation != NULL) { /* a reply that could not be encoded */
        slow_op_adopt_command(control.held_operation, &command);
        slow_op_end_wait(control.held_operation, true);
        slow_op_release(control.held_operation, NULL);
    }
    bson_free(encoded);
    bson_free(decompressed);
    bson_destroy(&command);
    bson_destroy(&reply);
}
