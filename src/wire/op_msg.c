/* OP_MSG (opcode 2013): parsing with mongod's OpMsg::parse rules and error codes,
 * merging document sequences into the command, finding the body for the proxy,
 * and building messages with an optional CRC-32C checksum. */
#include "wire/wire_private.h"

#include <stdio.h>

#define SECTION_KIND_BODY 0
#define SECTION_KIND_DOCUMENT_SEQUENCE 1
#define CHECKSUM_SIZE 4

#define KNOWN_FLAGS                                                                          \
    (WIRE_MSG_FLAG_CHECKSUM_PRESENT | WIRE_MSG_FLAG_MORE_TO_COME | WIRE_MSG_FLAG_EXHAUST_ALLOWED)
/* The low 16 flag bits are required: a receiver that does not know one must refuse
 * the message. The high 16 are optional and may be ignored. */
#define REQUIRED_FLAGS_MASK 0xFFFFu

static bool expect_op_msg(const uint8_t *message, size_t length, wire_header_t *out_header,
                          bson_error_t *error)
{
    if (!wire_header_parse(message, length, out_header, error)) {
        return false;
    }
    if (out_header->opcode != WIRE_OP_MSG) {
        return tc_error_set(error, TC_ERR_ILLEGAL_OPERATION,
                            "Message type %d is not an OP_MSG (%d)", (int)out_header->opcode,
                            WIRE_OP_MSG);
    }
    return true;
}

/* Reads the flags and narrows reader->end to exclude a checksum, as mongod does
 * before looking at any section. */
static bool read_flags(wire_reader_t *reader, uint32_t *out_flags, bson_error_t *error)
{
    int32_t raw_flags = 0;
    if (!wire_reader_int32(reader, "OP_MSG flagBits", TC_ERR_OVERFLOW, &raw_flags, error)) {
        return false;
    }
    uint32_t flags = (uint32_t)raw_flags;
    if (flags & ~KNOWN_FLAGS & REQUIRED_FLAGS_MASK) {
        char bits[33];
        for (int bit = 0; bit < 32; bit++) {
            bits[bit] = (flags & (1u << (31 - bit))) ? '1' : '0';
        }
        bits[32] = '\0';
        /* "Ob" (letter O) is mongod's own spelling. */
        return tc_error_set(error, TC_ERR_ILLEGAL_OP_MSG_FLAG,
                            "Message contains illegal flags value: Ob%s", bits);
    }
    if (flags & WIRE_MSG_FLAG_CHECKSUM_PRESENT) {
        if (wire_reader_remaining(reader) <= CHECKSUM_SIZE) {
            return tc_error_set(error, TC_ERR_LOCATION_OP_MSG_CHECKSUM_SIZE,
                                "Invalid message size for an OpMsg containing a checksum");
        }
        reader->end -= CHECKSUM_SIZE;
    }
    *out_flags = flags;
    return true;
}

/* Positions sequence_reader over one kind-1 section whose size field is next in
 * reader, and moves reader past the section. */
static bool open_sequence_section(wire_reader_t *reader, wire_reader_t *sequence_reader,
                                  bson_error_t *error)
{
    size_t section_start = reader->position;
    int32_t section_size = 0;
    if (!wire_reader_int32(reader, "OP_MSG document sequence size", TC_ERR_OVERFLOW,
                           &section_size, error)) {
        return false;
    }
    /* The size counts its own 4 bytes. */
    if (section_size < 4 || (size_t)section_size - 4 > wire_reader_remaining(reader)) {
        return tc_error_set(error, TC_ERR_OVERFLOW,
                            "Message is truncated: document sequence at offset %zu declares %d "
                            "bytes but only %zu remain",
                            section_start, (int)section_size,
                            wire_reader_remaining(reader) + 4);
    }
    sequence_reader->message = reader->message;
    sequence_reader->position = reader->position;
    sequence_reader->end = section_start + (size_t)section_size;
    reader->position = sequence_reader->end;
    return true;
}

/* mongod's extractElementAtPathOrArrayAlongPath: a dotted path is present when it
 * reaches a field, or an array anywhere along the way. */
static bool body_has_path(const bson_t *body, const char *path)
{
    bson_iter_t iter;
    if (!bson_iter_init(&iter, body)) {
        return false;
    }
    const char *component = path;
    for (;;) {
        const char *dot = strchr(component, '.');
        size_t component_length = dot ? (size_t)(dot - component) : strlen(component);
        if (component_length > INT32_MAX ||
            !bson_iter_find_w_len(&iter, component, (int)component_length)) {
            return false;
        }
        if (dot == NULL || BSON_ITER_HOLDS_ARRAY(&iter)) {
            return true;
        }
        bson_iter_t child;
        if (!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &child)) {
            return false;
        }
        iter = child;
        component = dot + 1;
    }
}

static bool parse_sequence(wire_reader_t *reader, wire_op_msg_t *out_message, bson_error_t *error)
{
    if (out_message->sequence_count >= WIRE_MAX_DOCUMENT_SEQUENCES) {
        return tc_error_set(error, TC_ERR_TOO_MANY_DOCUMENT_SEQUENCES,
                            "Too many document sequences in OP_MSG");
    }
    wire_reader_t sequence_reader;
    if (!open_sequence_section(reader, &sequence_reader, error)) {
        return false;
    }
    const char *identifier = NULL;
    if (!wire_reader_cstring(&sequence_reader, "OP_MSG document sequence identifier",
                             TC_ERR_OVERFLOW, &identifier, error)) {
        return false;
    }
    /* It becomes a field name of the command (wire_op_msg_command), and those are UTF-8. */
    if (!bson_utf8_validate(identifier, strlen(identifier), false)) {
        return tc_error_set(error, TC_ERR_INVALID_BSON, "OP_MSG document sequence identifier is not valid UTF-8");
    }
    for (size_t i = 0; i < out_message->sequence_count; i++) {
        if (strcmp(out_message->sequences[i].identifier, identifier) == 0) {
            return tc_error_set(error, TC_ERR_LOCATION_DUPLICATE_DOCUMENT_SEQUENCE,
                                "Duplicate document sequence: %s", identifier);
        }
    }
    wire_document_sequence_t *sequence = &out_message->sequences[out_message->sequence_count];
    sequence->identifier = identifier;
    sequence->documents.data = sequence_reader.message + sequence_reader.position;
    sequence->documents.length = wire_reader_remaining(&sequence_reader);
    sequence->documents.count = 0;
    while (wire_reader_remaining(&sequence_reader) > 0) {
        bson_t document;
        if (!wire_reader_document(&sequence_reader, &document, error)) {
            return false;
        }
        sequence->documents.count++;
    }
    out_message->sequence_count++;
    return true;
}

bool wire_op_msg_parse(const uint8_t *message, size_t length, wire_op_msg_t *out_message,
                       bson_error_t *error)
{
    memset(out_message, 0, sizeof *out_message);
    if (!expect_op_msg(message, length, &out_message->header, error)) {
        return false;
    }
    wire_reader_t reader = {.message = message, .position = WIRE_HEADER_SIZE, .end = length};
    if (!read_flags(&reader, &out_message->flags, error)) {
        return false;
    }

    bool have_body = false;
    while (wire_reader_remaining(&reader) > 0) {
        uint8_t kind = message[reader.position++];
        switch (kind) {
        case SECTION_KIND_BODY:
            if (have_body) {
                return tc_error_set(error, TC_ERR_LOCATION_MULTIPLE_BODIES,
                                    "Multiple body sections in message");
            }
            have_body = true;
            if (!wire_reader_document(&reader, &out_message->body, error)) {
                return false;
            }
            break;
        case SECTION_KIND_DOCUMENT_SEQUENCE:
            if (!parse_sequence(&reader, out_message, error)) {
                return false;
            }
            break;
        default:
            return tc_error_set(error, TC_ERR_LOCATION_UNKNOWN_SECTION_KIND,
                                "Unknown section kind %u", (unsigned)kind);
        }
    }
    if (!have_body) {
        return tc_error_set(error, TC_ERR_LOCATION_OP_MSG_NO_BODY,
                            "OP_MSG messages must have a body");
    }
    for (size_t i = 0; i < out_message->sequence_count; i++) {
        if (body_has_path(&out_message->body, out_message->sequences[i].identifier)) {
            return tc_error_set(error, TC_ERR_LOCATION_DUPLICATE_BODY_FIELD,
                                "Duplicate field between body and document sequence %s",
                                out_message->sequences[i].identifier);
        }
    }
    /* Checked last, as mongod does: a structural fault is reported as such. */
    if (out_message->flags & WIRE_MSG_FLAG_CHECKSUM_PRESENT) {
        uint32_t stored = (uint32_t)wire_load_int32(message + length - CHECKSUM_SIZE);
        if (stored != wire_crc32c(message, length - CHECKSUM_SIZE)) {
            return tc_error_set(error, TC_ERR_CHECKSUM_MISMATCH,
                                "OP_MSG checksum does not match contents");
        }
    }
    return true;
}

static bool append_sequence_array(bson_t *command, const wire_document_sequence_t *sequence)
{
    bson_t array;
    if (!bson_append_array_begin(command, sequence->identifier, -1, &array)) {
        return false;
    }
    wire_documents_iter_t iter;
    wire_documents_iter_init(&iter, &sequence->documents);
    bson_t document;
    uint32_t index = 0;
    bool ok = true;
    while (ok && wire_documents_iter_next(&iter, &document)) {
        char key_buffer[16];
        const char *key;
        size_t key_length = bson_uint32_to_string(index++, &key, key_buffer, sizeof key_buffer);
        ok = bson_append_document(&array, key, (int)key_length, &document);
    }
    return bson_append_array_end(command, &array) && ok;
}

bool wire_op_msg_command(const wire_op_msg_t *message, bson_t *out_command, bson_error_t *error)
{
    bson_init(out_command);
    if (!bson_concat(out_command, &message->body)) {
        return tc_error_set(error, TC_ERR_INTERNAL, "Could not copy the OP_MSG body");
    }
    for (size_t i = 0; i < message->sequence_count; i++) {
        if (!append_sequence_array(out_command, &message->sequences[i])) {
            return tc_error_set(error, TC_ERR_LOCATION_BSON_TOO_LARGE,
                                "The command with its document sequence '%s' is too large to "
                                "assemble",
                                message->sequences[i].identifier);
        }
    }
    return true;
}

bool wire_op_msg_find_body(const uint8_t *message, size_t length, bson_t *out_body,
                           bson_error_t *error)
{
    wire_header_t header;
    if (!expect_op_msg(message, length, &header, error)) {
        return false;
    }
    wire_reader_t reader = {.message = message, .position = WIRE_HEADER_SIZE, .end = length};
    uint32_t flags = 0;
    if (!read_flags(&reader, &flags, error)) {
        return false;
    }
    while (wire_reader_remaining(&reader) > 0) {
        uint8_t kind = message[reader.position++];
        if (kind == SECTION_KIND_BODY) {
            return wire_reader_document(&reader, out_body, error);
        }
        if (kind != SECTION_KIND_DOCUMENT_SEQUENCE) {
            return tc_error_set(error, TC_ERR_LOCATION_UNKNOWN_SECTION_KIND,
                                "Unknown section kind %u", (unsigned)kind);
        }
        wire_reader_t skipped;
        if (!open_sequence_section(&reader, &skipped, error)) {
            return false;
        }
    }
    return tc_error_set(error, TC_ERR_LOCATION_OP_MSG_NO_BODY, "OP_MSG messages must have a body");
}

bool wire_op_msg_peek_body(const uint8_t *message, size_t length, bson_t *out_body,
                           bson_error_t *error)
{
    wire_header_t header;
    if (!expect_op_msg(message, length, &header, error)) {
        return false;
    }
    size_t position = WIRE_HEADER_SIZE + 4;
    while (position < length) {
        uint8_t kind = message[position++];
        if (length - position < 4) {
            break;
        }
        uint32_t section_length = (uint32_t)wire_load_int32(message + position);
        if (section_length < 5 || section_length > length - position) {
            break;
        }
        if (kind == SECTION_KIND_BODY) {
            if (!bson_init_static(out_body, message + position, section_length)) {
                break;
            }
            return true;
        }
        if (kind != SECTION_KIND_DOCUMENT_SEQUENCE) {
            break;
        }
        position += section_length;
    }
    return tc_error_set(error, TC_ERR_INVALID_BSON, "malformed OP_MSG body in a reply");
}

void wire_op_msg_checksum_refresh(uint8_t *message, size_t length)
{
    if (length < WIRE_HEADER_SIZE + 4 + CHECKSUM_SIZE ||
        wire_message_opcode(message) != WIRE_OP_MSG) {
        return;
    }
    uint32_t flags = (uint32_t)wire_load_int32(message + WIRE_HEADER_SIZE);
    if (flags & WIRE_MSG_FLAG_CHECKSUM_PRESENT) {
        uint32_t checksum = wire_crc32c(message, length - CHECKSUM_SIZE);
        wire_store_int32(message + length - CHECKSUM_SIZE, (int32_t)checksum);
    }
}

static size_t sequence_section_size(const wire_sequence_input_t *sequence)
{
    size_t size = 4 + strlen(sequence->identifier) + 1;
    for (size_t i = 0; i < sequence->document_count; i++) {
        size += sequence->documents[i]->len;
    }
    return size;
}

bool wire_op_msg_build(int32_t request_id, int32_t response_to, uint32_t flags,
                       const bson_t *body, const wire_sequence_input_t *sequences,
                       size_t sequence_count, uint8_t **out_message, size_t *out_length,
                       bson_error_t *error)
{
    size_t size = WIRE_HEADER_SIZE + 4;
    for (size_t i = 0; i < sequence_count; i++) {
        size += 1 + sequence_section_size(&sequences[i]);
    }
    size += 1 + body->len;
    if (flags & WIRE_MSG_FLAG_CHECKSUM_PRESENT) {
        size += CHECKSUM_SIZE;
    }
    /* mongod's OpMsgBuilder caps replies at 16 MB + 16 KB; requests carrying
     * sequences may use the whole message size. */
    size_t limit = sequence_count == 0 ? WIRE_MAX_BSON_INTERNAL_SIZE : WIRE_MAX_MESSAGE_SIZE;
    if (size > limit) {
        return tc_error_set(error, TC_ERR_LOCATION_BSON_TOO_LARGE,
                            "BSON size limit hit while building Message. Size: %zu (0x%zX); "
                            "maxSize: %zu(%zuMB)",
                            size, size, limit, limit / (1024 * 1024));
    }

    uint8_t *message = bson_malloc(size);
    wire_header_t header = {.message_length = (int32_t)size,
                            .request_id = request_id,
                            .response_to = response_to,
                            .opcode = WIRE_OP_MSG};
    wire_store_header(message, &header);
    size_t position = WIRE_HEADER_SIZE;
    wire_store_int32(message + position, (int32_t)flags);
    position += 4;
    for (size_t i = 0; i < sequence_count; i++) {
        message[position++] = SECTION_KIND_DOCUMENT_SEQUENCE;
        wire_store_int32(message + position, (int32_t)sequence_section_size(&sequences[i]));
        position += 4;
        size_t identifier_size = strlen(sequences[i].identifier) + 1;
        memcpy(message + position, sequences[i].identifier, identifier_size);
        position += identifier_size;
        for (size_t d = 0; d < sequences[i].document_count; d++) {
            const bson_t *document = sequences[i].documents[d];
            memcpy(message + position, bson_get_data(document), document->len);
            position += document->len;
        }
    }
    message[position++] = SECTION_KIND_BODY;
    memcpy(message + position, bson_get_data(body), body->len);
    position += body->len;
    if (flags & WIRE_MSG_FLAG_CHECKSUM_PRESENT) {
        wire_store_int32(message + position, (int32_t)wire_crc32c(message, position));
        position += CHECKSUM_SIZE;
    }
    BSON_ASSERT(position == size);
    *out_message = message;
    *out_length = size;
    return true;
}
