/* The legacy opcodes mongod 6.0 still speaks: OP_QUERY (drivers send their first
 * hello on "admin.$cmd" with it) turned into a command the way mongod upconverts
 * it, and OP_REPLY, the answer to an OP_QUERY. */
#include "wire/wire_private.h"
#include "common/bson_view.h"

/* mongod's DbMessage codes: "Failed to parse ns string", "Not enough data to read". */
#define LEGACY_NAMESPACE_CODE TC_ERR_LOCATION_NAMESPACE_STRING
#define LEGACY_TRUNCATED_CODE TC_ERR_LOCATION_NOT_ENOUGH_DATA

/* What mongod 6.0 adds to its refusals of legacy requests. */
#define LEGACY_UPGRADE_ADVICE                                            \
    "The client driver may require an upgrade. For more details see " \
    "https://dochub.mongodb.org/core/legacy-opcode-removal"

#define OP_REPLY_FIXED_SIZE (WIRE_HEADER_SIZE + 4 + 8 + 4 + 4)

/* mongod's DbMessage::nextJsObj, with its "Client Error" wording. */
static bool legacy_read_document(wire_reader_t *reader, bson_t *out_document,
                                 bson_error_t *error)
{
    if (wire_reader_remaining(reader) < 5) {
        return tc_error_set(error, TC_ERR_INVALID_BSON,
                            "Client Error: Remaining data too small for BSON object");
    }
    bson_error_t cause;
    if (!wire_reader_document(reader, out_document, &cause)) {
        if (cause.code == TC_ERR_LOCATION_BSON_TOO_LARGE) {
            *error = cause;
            return false;
        }
        return tc_error_set(error, TC_ERR_INVALID_BSON, "Client Error: bad object in message: %s",
                            cause.message);
    }
    return true;
}

bool wire_op_query_parse(const uint8_t *message, size_t length, wire_op_query_t *out_query,
                         bson_error_t *error)
{
    memset(out_query, 0, sizeof *out_query);
    if (!wire_header_parse(message, length, &out_query->header, error)) {
        return false;
    }
    if (out_query->header.opcode != WIRE_OP_QUERY) {
        return tc_error_set(error, TC_ERR_ILLEGAL_OPERATION,
                            "Message type %d is not an OP_QUERY (%d)",
                            (int)out_query->header.opcode, WIRE_OP_QUERY);
    }
    wire_reader_t reader = {.message = message, .position = WIRE_HEADER_SIZE, .end = length};
    if (!wire_reader_int32(&reader, "OP_QUERY flags", LEGACY_TRUNCATED_CODE, &out_query->flags,
                           error) ||
        !wire_reader_cstring(&reader, "OP_QUERY fullCollectionName", LEGACY_NAMESPACE_CODE,
                             &out_query->full_collection_name, error) ||
        !wire_reader_int32(&reader, "OP_QUERY numberToSkip", LEGACY_TRUNCATED_CODE,
                           &out_query->number_to_skip, error) ||
        !wire_reader_int32(&reader, "OP_QUERY numberToReturn", LEGACY_TRUNCATED_CODE,
                           &out_query->number_to_return, error) ||
        !legacy_read_document(&reader, &out_query->query, error)) {
        return false;
    }
    if (wire_reader_remaining(&reader) > 0) {
        if (!legacy_read_document(&reader, &out_query->return_fields_selector, error)) {
            return false;
        }
        out_query->has_return_fields_selector = true;
    }
    return true;
}

static bool append_secondary_preferred(bson_t *command)
{
    bson_t read_preference;
    return bson_append_document_begin(command, "$readPreference", -1, &read_preference) &&
           BSON_APPEND_UTF8(&read_preference, "mode", "secondaryPreferred") &&
           bson_append_document_end(command, &read_preference);
}

/* Points out_document at the object or array iter holds, as BSONElement::Obj()
 * does, which fails with 10065 for anything else. */
static bool element_object(const bson_iter_t *iter, bson_t *out_document, bson_error_t *error)
{
    if (!bson_view_of(iter, out_document)) {
        return tc_error_set(error, TC_ERR_LOCATION_EXPECTED_OBJECT,
                            "invalid parameter: expected an object (%s)", bson_iter_key(iter));
    }
    return true;
}

/* NamespaceString::isCommand: the collection part (after the first dot) is "$cmd". */
static bool is_command_namespace(const char *name)
{
    const char *dot = strchr(name, '.');
    return dot != NULL && strcmp(dot + 1, "$cmd") == 0;
}

bool wire_op_query_is_removed(const wire_op_query_t *query)
{
    return query->full_collection_name != NULL && !is_command_namespace(query->full_collection_name);
}

bool wire_op_query_removed_reply_build(int32_t request_id, int32_t response_to, uint8_t **out_message,
                                       size_t *out_length, bson_error_t *error)
{
    bson_t document = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&document, "$err", "OP_QUERY is no longer supported. " LEGACY_UPGRADE_ADVICE);
    BSON_APPEND_INT32(&document, "code", TC_ERR_LOCATION_OP_QUERY_REMOVED);
    BSON_APPEND_DOUBLE(&document, "ok", 0.0);
    const bson_t *documents[] = {&document};
    bool ok = wire_op_reply_build(request_id, response_to, WIRE_REPLY_FLAG_QUERY_FAILURE, 0, 0, documents, 1,
                                  out_message, out_length, error);
    bson_destroy(&document);
    return ok;
}

/* Namespace checks of mongod's opMsgRequestFromLegacyRequest; stores the database
 * name's length within full_collection_name. */
static bool check_command_namespace(const wire_op_query_t *query, size_t *out_database_length,
                                    bson_error_t *error)
{
    const char *name = query->full_collection_name;
    if (query->flags & WIRE_QUERY_FLAG_EXHAUST) {
        char *json = bson_as_relaxed_extended_json(&query->query, NULL);
        tc_error_set(error, TC_ERR_LOCATION_EXHAUST_COMMAND,
                     "The 'exhaust' OP_QUERY flag is invalid for commands: %s %s", name,
                     json ? json : "");
        bson_free(json);
        return false;
    }
    if (!is_command_namespace(name)) {
        return tc_error_set(error, TC_ERR_LOCATION_NOT_A_COMMAND_NAMESPACE,
                            "Trying to handle namespace %s as a command", name);
    }
    const char *dot = strchr(name, '.');
    if (query->number_to_return != 1 && query->number_to_return != -1) {
        return tc_error_set(error, TC_ERR_LOCATION_BAD_COMMAND_NUMBER_TO_RETURN,
                            "Bad numberToReturn (%d) for $cmd type ns - can only be 1 or -1",
                            (int)query->number_to_return);
    }
    if (dot == name) {
        return tc_error_set(error, TC_ERR_INVALID_NAMESPACE, "Invalid database name: ''");
    }
    *out_database_length = (size_t)(dot - name);
    return true;
}

/* A libbson append that fails here can only mean the result outgrew what libbson
 * can hold. */
#define APPEND_CHECK(expression)                                                         \
    do {                                                                                 \
        if (!(expression)) {                                                             \
            tc_error_set(error, TC_ERR_INTERNAL, "Could not assemble the command from "  \
                                                 "OP_QUERY");                            \
            goto done;                                                                   \
        }                                                                                \
    } while (0)

bool wire_op_query_command(const wire_op_query_t *query, bson_t *out_command,
                           bson_error_t *error)
{
    bson_init(out_command);
    size_t database_length = 0;
    if (!check_command_namespace(query, &database_length, error)) {
        return false;
    }

    /* Which document holds the command, which of its fields to leave out, and which
     * fields to add after it (the read preference container). */
    const bson_t *command = &query->query;
    bson_t unwrapped;
    bson_t read_preference_container = BSON_INITIALIZER;
    const char *skipped_field = NULL;
    bool ok = false;
    bson_iter_t iter;
    const char *first_field = "";
    if (bson_iter_init(&iter, &query->query) && bson_iter_next(&iter)) {
        first_field = bson_iter_key(&iter);
    }
    if (strcmp(first_field, "$query") == 0 || strcmp(first_field, "query") == 0) {
        /* Legacy drivers wrap the command to put $readPreference beside it. */
        if (bson_has_field(&query->query, "$maxTimeMS")) {
            tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                         "cannot use $maxTimeMS query option with commands; use maxTimeMS "
                         "command option instead");
            goto done;
        }
        bson_iter_t read_preference;
        if (bson_iter_init_find(&read_preference, &query->query, "$readPreference")) {
            APPEND_CHECK(bson_append_iter(&read_preference_container, NULL, 0, &read_preference));
        }
        TC_CHECK(element_object(&iter, &unwrapped, error));
        command = &unwrapped;
    } else if (bson_iter_init_find(&iter, &query->query, "$queryOptions")) {
        /* The form mongos forwards: read preference nested in $queryOptions. */
        bson_t options;
        TC_CHECK(element_object(&iter, &options, error));
        APPEND_CHECK(bson_concat(&read_preference_container, &options));
        skipped_field = "$queryOptions";
    }

    APPEND_CHECK(bson_iter_init(&iter, command));
    while (bson_iter_next(&iter)) {
        if (skipped_field == NULL || strcmp(bson_iter_key(&iter), skipped_field) != 0) {
            APPEND_CHECK(bson_append_iter(out_command, NULL, 0, &iter));
        }
    }
    if (!bson_empty(&read_preference_container)) {
        APPEND_CHECK(bson_concat(out_command, &read_preference_container));
    } else if ((query->flags & WIRE_QUERY_FLAG_SECONDARY_OK) &&
               !bson_has_field(out_command, "$readPreference")) {
        APPEND_CHECK(append_secondary_preferred(out_command));
    }
    if (bson_has_field(out_command, "$db")) {
        tc_error_set(error, TC_ERR_LOCATION_DB_IN_OP_QUERY,
                     "$db is not allowed in OP_QUERY requests");
        goto done;
    }
    APPEND_CHECK(bson_append_utf8(out_command, "$db", 3, query->full_collection_name,
                                  (int)database_length));
    ok = true;
done:
    bson_destroy(&read_preference_container);
    return ok;
}

bool wire_op_query_check_command(const bson_t *command, bson_error_t *error)
{
    /* The handshake's names, then those mongod 6.0 still lets through for old
     * drivers and 5.0 cluster members. */
    static const char *const allowed[] = {"hello",     "isMaster",  "ismaster",     "_isSelf",  "authenticate",
                                          "buildinfo", "buildInfo", "saslContinue", "saslStart"};
    const char *name = "";
    bson_iter_t iter;
    if (bson_iter_init(&iter, command) && bson_iter_next(&iter)) {
        name = bson_iter_key(&iter);
    }
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        if (strcmp(name, allowed[i]) == 0) {
            return true;
        }
    }
    return tc_error_set(error, TC_ERR_UNSUPPORTED_OP_QUERY_COMMAND,
                        "Unsupported OP_QUERY command: %s. " LEGACY_UPGRADE_ADVICE, name);
}

bool wire_op_reply_command_build(int32_t request_id, int32_t response_to, const bson_t *reply,
                                 uint8_t **out_message, size_t *out_length, bson_error_t *error)
{
    /* mongod's LegacyReplyBuilder marks every command reply, errors included,
     * AwaitCapable and nothing else. */
    const bson_t *documents[] = {reply};
    return wire_op_reply_build(request_id, response_to, WIRE_REPLY_FLAG_AWAIT_CAPABLE, 0, 0, documents, 1,
                               out_message, out_length, error);
}

bool wire_op_reply_from_op_msg(const uint8_t *message, size_t length, uint8_t **out_message, size_t *out_length,
                               bson_error_t *error)
{
    wire_header_t header;
    bson_t body;
    if (!wire_header_parse(message, length, &header, error) ||
        !wire_op_msg_peek_body(message, length, &body, error)) {
        return false;
    }
    return wire_op_reply_command_build(header.request_id, header.response_to, &body, out_message, out_length,
                                       error);
}

bool wire_op_reply_parse(const uint8_t *message, size_t length, wire_op_reply_t *out_reply,
                         bson_error_t *error)
{
    memset(out_reply, 0, sizeof *out_reply);
    if (!wire_header_parse(message, length, &out_reply->header, error)) {
        return false;
    }
    if (out_reply->header.opcode != WIRE_OP_REPLY) {
        return tc_error_set(error, TC_ERR_ILLEGAL_OPERATION,
                            "Message type %d is not an OP_REPLY (%d)",
                            (int)out_reply->header.opcode, WIRE_OP_REPLY);
    }
    wire_reader_t reader = {.message = message, .position = WIRE_HEADER_SIZE, .end = length};
    if (!wire_reader_int32(&reader, "OP_REPLY responseFlags", TC_ERR_OVERFLOW,
                           &out_reply->response_flags, error) ||
        !wire_reader_int64(&reader, "OP_REPLY cursorID", TC_ERR_OVERFLOW, &out_reply->cursor_id,
                           error) ||
        !wire_reader_int32(&reader, "OP_REPLY startingFrom", TC_ERR_OVERFLOW,
                           &out_reply->starting_from, error) ||
        !wire_reader_int32(&reader, "OP_REPLY numberReturned", TC_ERR_OVERFLOW,
                           &out_reply->number_returned, error)) {
        return false;
    }
    out_reply->documents.data = message + reader.position;
    out_reply->documents.length = wire_reader_remaining(&reader);
    while (wire_reader_remaining(&reader) > 0) {
        bson_t document;
        if (!wire_reader_document(&reader, &document, error)) {
            return false;
        }
        out_reply->documents.count++;
    }
    if (out_reply->number_returned < 0 ||
        (size_t)out_reply->number_returned != out_reply->documents.count) {
        return tc_error_set(error, TC_ERR_PROTOCOL_ERROR,
                            "OP_REPLY numberReturned is %d but the message holds %zu documents",
                            (int)out_reply->number_returned, out_reply->documents.count);
    }
    return true;
}

bool wire_op_reply_build(int32_t request_id, int32_t response_to, int32_t response_flags,
                         int64_t cursor_id, int32_t starting_from,
                         const bson_t *const *documents, size_t document_count,
                         uint8_t **out_message, size_t *out_length, bson_error_t *error)
{
    size_t size = OP_REPLY_FIXED_SIZE;
    for (size_t i = 0; i < document_count && size <= WIRE_MAX_MESSAGE_SIZE; i++) {
        size += documents[i]->len;
    }
    if (size > WIRE_MAX_MESSAGE_SIZE) {
        return tc_error_set(error, TC_ERR_LOCATION_BSON_TOO_LARGE,
                            "OP_REPLY of %zu or more bytes exceeds the maximum message size of "
                            "%d bytes",
                            size, WIRE_MAX_MESSAGE_SIZE);
    }
    uint8_t *message = bson_malloc(size);
    wire_header_t header = {.message_length = (int32_t)size,
                            .request_id = request_id,
                            .response_to = response_to,
                            .opcode = WIRE_OP_REPLY};
    wire_store_header(message, &header);
    wire_store_int32(message + 16, response_flags);
    wire_store_int64(message + 20, cursor_id);
    wire_store_int32(message + 28, starting_from);
    wire_store_int32(message + 32, (int32_t)document_count);
    size_t position = OP_REPLY_FIXED_SIZE;
    for (size_t i = 0; i < document_count; i++) {
        memcpy(message + position, bson_get_data(documents[i]), documents[i]->len);
        position += documents[i]->len;
    }
    BSON_ASSERT(position == size);
    *out_message = message;
    *out_length = size;
    return true;
}
