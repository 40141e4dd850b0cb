/* Helpers the wire files share and nobody else should call: little-endian field
 * access, a bounds-checked reader over a message, the BSON validator and the two
 * CRC-32C implementations (exposed so tests can check both). */
#ifndef TC_WIRE_WIRE_PRIVATE_H
#define TC_WIRE_WIRE_PRIVATE_H

#include "wire/wire.h"

#include <string.h>

/* Wire integers are little-endian and may sit at any alignment: memcpy, never casts. */
static inline int32_t wire_load_int32(const uint8_t *bytes)
{
    uint32_t value;
    memcpy(&value, bytes, sizeof value);
    return (int32_t)BSON_UINT32_FROM_LE(value);
}

static inline int64_t wire_load_int64(const uint8_t *bytes)
{
    uint64_t value;
    memcpy(&value, bytes, sizeof value);
    return (int64_t)BSON_UINT64_FROM_LE(value);
}

static inline void wire_store_int32(uint8_t *bytes, int32_t value)
{
    uint32_t little_endian = BSON_UINT32_TO_LE((uint32_t)value);
    memcpy(bytes, &little_endian, sizeof little_endian);
}

static inline void wire_store_int64(uint8_t *bytes, int64_t value)
{
    uint64_t little_endian = BSON_UINT64_TO_LE((uint64_t)value);
    memcpy(bytes, &little_endian, sizeof little_endian);
}

static inline void wire_store_header(uint8_t *message, const wire_header_t *header)
{
    wire_store_int32(message, header->message_length);
    wire_store_int32(message + 4, header->request_id);
    wire_store_int32(message + 8, header->response_to);
    wire_store_int32(message + 12, header->opcode);
}

/* A cursor over message[position, end); offsets are from the message start so
 * error messages can name them. */
typedef struct wire_reader {
    const uint8_t *message;
    size_t position;
    size_t end;
} wire_reader_t;

static inline size_t wire_reader_remaining(const wire_reader_t *reader)
{
    return reader->end - reader->position;
}

/* Each fails with code and a message naming what (e.g. "OP_MSG flags") when the
 * bytes are not there, and then leaves the reader unchanged. */
bool wire_reader_int32(wire_reader_t *reader, const char *what, int32_t code, int32_t *out_value,
                       bson_error_t *error) TC_MUST_CHECK;
bool wire_reader_int64(wire_reader_t *reader, const char *what, int32_t code, int64_t *out_value,
                       bson_error_t *error) TC_MUST_CHECK;
bool wire_reader_cstring(wire_reader_t *reader, const char *what, int32_t code,
                         const char **out_string, bson_error_t *error) TC_MUST_CHECK;
/* One BSON document (see wire_document_load); out_document borrows the message. */
bool wire_reader_document(wire_reader_t *reader, bson_t *out_document,
                          bson_error_t *error) TC_MUST_CHECK;

/* Checks that data (available bytes) starts with one well-formed BSON document the
 * way mongod's validateBSON does, iteratively (no recursion, so hostile nesting
 * cannot exhaust the stack) and refusing nesting deeper than WIRE_MAX_BSON_DEPTH
 * (Overflow 15). Other faults are InvalidBSON (22). Stores the document's length. */
bool wire_bson_check(const uint8_t *data, size_t available, size_t *out_length,
                     bson_error_t *error) TC_MUST_CHECK;

/* wire_bson_check, then mongod's 16 MB + 16 KB object bound (BSONObjectTooLarge),
 * then bson_init_static (the check covered all that libbson's iterator checks).
 * out_document borrows data. */
bool wire_document_load(const uint8_t *data, size_t available, bson_t *out_document,
                        size_t *out_length, bson_error_t *error) TC_MUST_CHECK;

uint32_t wire_crc32c_software(const uint8_t *data, size_t length);
/* False, leaving *out_crc alone, when the CPU has no SSE4.2 CRC instruction. */
bool wire_crc32c_hardware(const uint8_t *data, size_t length, uint32_t *out_crc);

/* Recomputes the trailing checksum of an OP_MSG with checksumPresent; no-op for
 * any other message. */
void wire_op_msg_checksum_refresh(uint8_t *message, size_t length);

#endif
