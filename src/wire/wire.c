/* Framing, headers, in-place header patching, iteration over borrowed documents
 * and the bounds-checked reader every message parser in this folder builds on. */
#include "wire/wire_private.h"

#include <stdlib.h>

bool wire_frame_check(const uint8_t first_four_bytes[4], size_t *out_message_length,
                      bson_error_t *error)
{
    int32_t declared = wire_load_int32(first_four_bytes);
    /* mongod reads the length into a size_t, so a negative one prints as huge. */
    size_t message_length = (size_t)(int64_t)declared;
    if (declared < WIRE_HEADER_SIZE || declared > WIRE_MAX_MESSAGE_SIZE) {
        return tc_error_set(error, TC_ERR_PROTOCOL_ERROR,
                            "recv(): message msgLen %zu is invalid. Min %d Max: %d",
                            message_length, WIRE_HEADER_SIZE, WIRE_MAX_MESSAGE_SIZE);
    }
    *out_message_length = message_length;
    return true;
}

bool wire_header_parse(const uint8_t *message, size_t length, wire_header_t *out_header,
                       bson_error_t *error)
{
    if (length < WIRE_HEADER_SIZE) {
        return tc_error_set(error, TC_ERR_PROTOCOL_ERROR,
                            "Message of %zu bytes is shorter than the %d-byte header", length,
                            WIRE_HEADER_SIZE);
    }
    size_t message_length = 0;
    if (!wire_frame_check(message, &message_length, error)) {
        return false;
    }
    if (message_length != length) {
        return tc_error_set(error, TC_ERR_PROTOCOL_ERROR,
                            "Message header declares %zu bytes but %zu were given",
                            message_length, length);
    }
    out_header->message_length = wire_load_int32(message);
    out_header->request_id = wire_load_int32(message + 4);
    out_header->response_to = wire_load_int32(message + 8);
    out_header->opcode = wire_load_int32(message + 12);
    return true;
}

bool wire_opcode_is_request(int32_t opcode)
{
    switch (opcode) {
    case WIRE_OP_UPDATE:
    case WIRE_OP_INSERT:
    case WIRE_OP_QUERY:
    case WIRE_OP_GET_MORE:
    case WIRE_OP_DELETE:
    case WIRE_OP_KILL_CURSORS:
    case WIRE_OP_COMPRESSED:
    case WIRE_OP_MSG:
        return true;
    default:
        return false;
    }
}

bool wire_request_header_parse(const uint8_t *message, size_t length, wire_header_t *out_header,
                               bson_error_t *error)
{
    if (!wire_header_parse(message, length, out_header, error)) {
        return false;
    }
    if (!wire_opcode_is_request(out_header->opcode)) {
        return tc_error_set(error, TC_ERR_ILLEGAL_OPERATION, "Message type %d is not supported.",
                            (int)out_header->opcode);
    }
    return true;
}

int32_t wire_message_request_id(const uint8_t *message)
{
    return wire_load_int32(message + 4);
}

int32_t wire_message_response_to(const uint8_t *message)
{
    return wire_load_int32(message + 8);
}

int32_t wire_message_opcode(const uint8_t *message)
{
    return wire_load_int32(message + 12);
}

void wire_append_hello_limits(bson_t *reply)
{
    BSON_APPEND_INT32(reply, "maxBsonObjectSize", WIRE_MAX_BSON_OBJECT_SIZE);
    BSON_APPEND_INT32(reply, "maxMessageSizeBytes", WIRE_MAX_MESSAGE_SIZE);
    BSON_APPEND_INT32(reply, "maxWriteBatchSize", WIRE_MAX_WRITE_BATCH_SIZE);
}

int64_t wire_cursor_id_random(int64_t now_ms)
{
    int64_t cursor_id;
    do {
        uint64_t random_id = ((uint64_t)(uint32_t)rand() << 32) ^ ((uint64_t)(uint32_t)rand() << 1) ^ (uint64_t)now_ms;
        cursor_id = (int64_t)(random_id & INT64_MAX);
    } while (cursor_id == 0);
    return cursor_id;
}

void wire_message_set_request_id(uint8_t *message, size_t length, int32_t request_id)
{
    BSON_ASSERT(length >= WIRE_HEADER_SIZE);
    wire_store_int32(message + 4, request_id);
    wire_op_msg_checksum_refresh(message, length);
}

void wire_message_set_response_to(uint8_t *message, size_t length, int32_t response_to)
{
    BSON_ASSERT(length >= WIRE_HEADER_SIZE);
    wire_store_int32(message + 8, response_to);
    wire_op_msg_checksum_refresh(message, length);
}

void wire_documents_iter_init(wire_documents_iter_t *iter, const wire_documents_t *documents)
{
    iter->position = documents->data;
    iter->end = documents->data ? documents->data + documents->length : NULL;
}

bool wire_documents_iter_next(wire_documents_iter_t *iter, bson_t *out_document)
{
    if (iter->position == NULL || iter->end - iter->position < 5) {
        return false;
    }
    /* The parser validated these documents, so their lengths can be trusted. */
    int32_t length = wire_load_int32(iter->position);
    if (length < 5 || length > iter->end - iter->position ||
        !bson_init_static(out_document, iter->position, (size_t)length)) {
        return false;
    }
    iter->position += length;
    return true;
}

static bool reader_truncated(const wire_reader_t *reader, const char *what, size_t needed,
                             int32_t code, bson_error_t *error)
{
    return tc_error_set(error, code,
                        "Message is truncated: %s needs %zu bytes at offset %zu but only %zu "
                        "remain",
                        what, needed, reader->position, wire_reader_remaining(reader));
}

bool wire_reader_int32(wire_reader_t *reader, const char *what, int32_t code, int32_t *out_value,
                       bson_error_t *error)
{
    if (wire_reader_remaining(reader) < 4) {
        return reader_truncated(reader, what, 4, code, error);
    }
    *out_value = wire_load_int32(reader->message + reader->position);
    reader->position += 4;
    return true;
}

bool wire_reader_int64(wire_reader_t *reader, const char *what, int32_t code, int64_t *out_value,
                       bson_error_t *error)
{
    if (wire_reader_remaining(reader) < 8) {
        return reader_truncated(reader, what, 8, code, error);
    }
    *out_value = wire_load_int64(reader->message + reader->position);
    reader->position += 8;
    return true;
}

bool wire_reader_cstring(wire_reader_t *reader, const char *what, int32_t code,
                         const char **out_string, bson_error_t *error)
{
    const char *start = (const char *)reader->message + reader->position;
    size_t length = strnlen(start, wire_reader_remaining(reader));
    if (length == wire_reader_remaining(reader)) {
        return tc_error_set(error, code,
                            "Message is truncated: %s at offset %zu has no terminating NUL",
                            what, reader->position);
    }
    *out_string = start;
    reader->position += length + 1;
    return true;
}

bool wire_reader_document(wire_reader_t *reader, bson_t *out_document, bson_error_t *error)
{
    size_t length = 0;
    if (!wire_document_load(reader->message + reader->position, wire_reader_remaining(reader),
                            out_document, &length, error)) {
        return false;
    }
    reader->position += length;
    return true;
}
