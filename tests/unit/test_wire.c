/* Unit tests for src/wire: every builder round-tripped through its parser, document
 * sequences merged into the command, checksums, OP_QUERY upconversion,
 * OP_COMPRESSED with each compressor, and a long list of malformed inputs that must
 * fail cleanly with mongod's error codes (run under AddressSanitizer: an
 * out-of-bounds read is a failure even when the result looks right). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "wire/wire.h"
#include "wire/wire_private.h"

/* ---- A growable byte buffer for hand-made (often malformed) messages ----------- */

typedef struct raw {
    uint8_t *data;
    size_t length;
    size_t capacity;
} raw_t;

static void raw_bytes(raw_t *raw, const void *bytes, size_t count)
{
    if (raw->length + count > raw->capacity) {
        raw->capacity = (raw->length + count) * 2 + 64;
        raw->data = realloc(raw->data, raw->capacity);
        assert_non_null(raw->data);
    }
    memcpy(raw->data + raw->length, bytes, count);
    raw->length += count;
}

static void raw_byte(raw_t *raw, uint8_t byte)
{
    raw_bytes(raw, &byte, 1);
}

static void raw_int32(raw_t *raw, int32_t value)
{
    uint8_t bytes[4];
    wire_store_int32(bytes, value);
    raw_bytes(raw, bytes, 4);
}

static void raw_int64(raw_t *raw, int64_t value)
{
    uint8_t bytes[8];
    wire_store_int64(bytes, value);
    raw_bytes(raw, bytes, 8);
}

static void raw_cstring(raw_t *raw, const char *text)
{
    raw_bytes(raw, text, strlen(text) + 1);
}

static void raw_document(raw_t *raw, const bson_t *document)
{
    raw_bytes(raw, bson_get_data(document), document->len);
}

/* Starts a message: 16 header bytes patched by raw_finish. */
static void raw_begin(raw_t *raw)
{
    memset(raw, 0, sizeof *raw);
    uint8_t header[WIRE_HEADER_SIZE] = {0};
    raw_bytes(raw, header, sizeof header);
}

static void raw_finish(raw_t *raw, int32_t request_id, int32_t response_to, int32_t opcode)
{
    wire_header_t header = {(int32_t)raw->length, request_id, response_to, opcode};
    wire_store_header(raw->data, &header);
}

/* Finishes an OP_MSG and appends its CRC-32C over everything before it. */
static void raw_finish_with_checksum(raw_t *raw, int32_t request_id, int32_t response_to)
{
    wire_header_t header = {(int32_t)raw->length + 4, request_id, response_to, WIRE_OP_MSG};
    wire_store_header(raw->data, &header);
    raw_int32(raw, (int32_t)wire_crc32c(raw->data, raw->length));
}

/* Opens a kind-1 section; returns where its size goes for raw_end_sequence. */
static size_t raw_begin_sequence(raw_t *raw, const char *identifier)
{
    raw_byte(raw, 1);
    size_t size_at = raw->length;
    raw_int32(raw, 0);
    raw_cstring(raw, identifier);
    return size_at;
}

static void raw_end_sequence(raw_t *raw, size_t size_at)
{
    wire_store_int32(raw->data + size_at, (int32_t)(raw->length - size_at));
}

static void raw_free(raw_t *raw)
{
    free(raw->data);
    memset(raw, 0, sizeof *raw);
}

/* An exact-size heap copy, so AddressSanitizer catches any read past length. */
static uint8_t *exact_copy(const uint8_t *data, size_t length)
{
    uint8_t *copy = malloc(length ? length : 1);
    assert_non_null(copy);
    if (length) {
        memcpy(copy, data, length);
    }
    return copy;
}

static void assert_error(const bson_error_t *error, int32_t code, const char *fragment)
{
    if (error->domain != TC_ERROR_DOMAIN || (int32_t)error->code != code ||
        (fragment && strstr(error->message, fragment) == NULL)) {
        fail_msg("expected code %d containing \"%s\", got domain %u code %u: \"%s\"", code,
                 fragment ? fragment : "", error->domain, error->code, error->message);
    }
}

/* Parses with every parser that applies; each must fail or succeed, never crash. */
static bool parse_any(const uint8_t *message, size_t length, bson_error_t *error)
{
    wire_header_t header;
    if (!wire_header_parse(message, length, &header, error)) {
        return false;
    }
    switch (header.opcode) {
    case WIRE_OP_MSG: {
        wire_op_msg_t parsed;
        bson_t body;
        bool found = wire_op_msg_find_body(message, length, &body, error);
        bool ok = wire_op_msg_parse(message, length, &parsed, error);
        if (ok) {
            assert_true(found);
            bson_t command;
            assert_true(wire_op_msg_command(&parsed, &command, error));
            /* What the walk accepts, libbson's own full validation accepts too. */
            assert_true(bson_validate(&parsed.body, BSON_VALIDATE_NONE, NULL));
            assert_true(bson_validate(&command, BSON_VALIDATE_NONE, NULL));
            bson_destroy(&command);
        }
        return ok;
    }
    case WIRE_OP_QUERY: {
        wire_op_query_t query;
        bool ok = wire_op_query_parse(message, length, &query, error);
        if (ok) {
            bson_t command;
            bson_error_t ignored;
            if (wire_op_query_command(&query, &command, &ignored)) {
                assert_true(bson_has_field(&command, "$db"));
            }
            bson_destroy(&command);
        }
        return ok;
    }
    case WIRE_OP_REPLY: {
        wire_op_reply_t reply;
        return wire_op_reply_parse(message, length, &reply, error);
    }
    case WIRE_OP_COMPRESSED: {
        uint8_t *original = NULL;
        size_t original_length = 0;
        bool ok = wire_decompress(message, length, &original, &original_length, NULL, error);
        bson_free(original);
        return ok;
    }
    default:
        return wire_request_header_parse(message, length, &header, error);
    }
}

/* Every proper prefix of message, with the header's length patched to match (and
 * left alone), must be refused with a clean error. allowed_valid_length, when not
 * zero, is a prefix that is itself a valid message. */
static void assert_every_truncation_fails(const uint8_t *message, size_t length,
                                          size_t allowed_valid_length)
{
    for (size_t cut = 0; cut < length; cut++) {
        uint8_t *copy = exact_copy(message, cut);
        bson_error_t error = {0};
        assert_false(parse_any(copy, cut, &error));
        assert_int_equal(error.domain, TC_ERROR_DOMAIN);
        assert_int_not_equal(error.code, 0);
        if (cut >= WIRE_HEADER_SIZE) {
            wire_store_int32(copy, (int32_t)cut);
            memset(&error, 0, sizeof error);
            bool ok = parse_any(copy, cut, &error);
            if (ok) {
                if (cut != allowed_valid_length) {
                    fail_msg("prefix of %zu of %zu bytes parsed as valid", cut, length);
                }
            } else {
                assert_int_equal(error.domain, TC_ERROR_DOMAIN);
                assert_int_not_equal(error.code, 0);
            }
        }
        free(copy);
    }
}

/* Overwrites each byte with a few values and parses: any result, no crash. */
static void assert_byte_corruption_is_safe(const uint8_t *message, size_t length)
{
    static const uint8_t values[] = {0x00, 0x01, 0x7F, 0x80, 0xFF};
    for (size_t position = 0; position < length; position++) {
        for (size_t v = 0; v < sizeof values; v++) {
            uint8_t *copy = exact_copy(message, length);
            copy[position] = values[v];
            bson_error_t error = {0};
            if (!parse_any(copy, length, &error)) {
                assert_int_equal(error.domain, TC_ERROR_DOMAIN);
            }
            free(copy);
        }
    }
}

/* ---- CRC-32C ---------------------------------------------------------------------- */

static void test_crc32c_vectors(void **state)
{
    (void)state;
    const uint8_t *check = (const uint8_t *)"123456789";
    assert_int_equal(wire_crc32c(check, 9), 0xE3069283u);
    assert_int_equal(wire_crc32c_software(check, 9), 0xE3069283u);
    assert_int_equal(wire_crc32c(check, 0), 0);

    /* RFC 3720 (iSCSI) appendix B.4 vectors. */
    uint8_t zeros[32] = {0}, ones[32], ascending[32], descending[32];
    for (int i = 0; i < 32; i++) {
        ones[i] = 0xFF;
        ascending[i] = (uint8_t)i;
        descending[i] = (uint8_t)(31 - i);
    }
    assert_int_equal(wire_crc32c(zeros, 32), 0x8A9136AAu);
    assert_int_equal(wire_crc32c(ones, 32), 0x62A8AB43u);
    assert_int_equal(wire_crc32c(ascending, 32), 0x46DD794Eu);
    assert_int_equal(wire_crc32c(descending, 32), 0x113FDB5Cu);
    assert_int_equal(wire_crc32c_software(descending, 32), 0x113FDB5Cu);
}

static void test_crc32c_hardware_matches_software(void **state)
{
    (void)state;
    uint8_t data[300];
    for (size_t i = 0; i < sizeof data; i++) {
        data[i] = (uint8_t)(i * 131 + 7);
    }
    uint32_t hardware;
    if (!wire_crc32c_hardware(data, 9, &hardware)) {
        skip();
    }
    /* Every start alignment and tail length the 8/4/1-byte loops can meet. */
    for (size_t offset = 0; offset < 9; offset++) {
        for (size_t length = 0; length + offset <= sizeof data; length += 7) {
            assert_true(wire_crc32c_hardware(data + offset, length, &hardware));
            assert_int_equal(hardware, wire_crc32c_software(data + offset, length));
        }
    }
}

/* ---- Framing and headers -------------------------------------------------------- */

static void test_frame_check(void **state)
{
    (void)state;
    uint8_t prefix[4];
    size_t length = 0;
    bson_error_t error;

    wire_store_int32(prefix, 16);
    assert_true(wire_frame_check(prefix, &length, &error));
    assert_int_equal(length, 16);
    wire_store_int32(prefix, WIRE_MAX_MESSAGE_SIZE);
    assert_true(wire_frame_check(prefix, &length, &error));
    assert_int_equal(length, WIRE_MAX_MESSAGE_SIZE);

    wire_store_int32(prefix, 15);
    assert_false(wire_frame_check(prefix, &length, &error));
    assert_error(&error, TC_ERR_PROTOCOL_ERROR,
                 "recv(): message msgLen 15 is invalid. Min 16 Max: 48000000");
    wire_store_int32(prefix, 0);
    assert_false(wire_frame_check(prefix, &length, &error));
    assert_error(&error, 17, "msgLen 0 is invalid");
    wire_store_int32(prefix, WIRE_MAX_MESSAGE_SIZE + 1);
    assert_false(wire_frame_check(prefix, &length, &error));
    assert_error(&error, 17, "msgLen 48000001 is invalid");
    wire_store_int32(prefix, 100 * 1024 * 1024);
    assert_false(wire_frame_check(prefix, &length, &error));
    assert_error(&error, 17, "msgLen 104857600 is invalid");
    wire_store_int32(prefix, -1);
    assert_false(wire_frame_check(prefix, &length, &error));
    assert_error(&error, 17, "msgLen 18446744073709551615 is invalid");
    wire_store_int32(prefix, INT32_MIN);
    assert_false(wire_frame_check(prefix, &length, &error));
    assert_error(&error, 17, "is invalid");
}

static void test_header_parse(void **state)
{
    (void)state;
    raw_t raw;
    raw_begin(&raw);
    raw_int32(&raw, 0);
    raw_finish(&raw, 0x01020304, -7, 1234);
    wire_header_t header;
    bson_error_t error;

    assert_true(wire_header_parse(raw.data, raw.length, &header, &error));
    assert_int_equal(header.message_length, 20);
    assert_int_equal(header.request_id, 0x01020304);
    assert_int_equal(header.response_to, -7);
    assert_int_equal(header.opcode, 1234);
    /* Little-endian on the wire whatever the host. */
    assert_int_equal(raw.data[4], 0x04);
    assert_int_equal(raw.data[7], 0x01);

    assert_false(wire_request_header_parse(raw.data, raw.length, &header, &error));
    assert_error(&error, TC_ERR_ILLEGAL_OPERATION, "Message type 1234 is not supported.");
    raw_finish(&raw, 1, 0, WIRE_OP_REPLY);
    assert_false(wire_request_header_parse(raw.data, raw.length, &header, &error));
    assert_error(&error, 20, "Message type 1 is not supported.");
    raw_finish(&raw, 1, 0, WIRE_OP_MSG);
    assert_true(wire_request_header_parse(raw.data, raw.length, &header, &error));

    /* The buffer must be exactly the declared message. */
    assert_false(wire_header_parse(raw.data, raw.length - 1, &header, &error));
    assert_error(&error, 17, "declares 20 bytes but 19 were given");
    assert_false(wire_header_parse(raw.data, 15, &header, &error));
    assert_error(&error, 17, "shorter than the 16-byte header");
    assert_false(wire_header_parse(raw.data, 0, &header, &error));
    assert_error(&error, 17, NULL);

    assert_true(wire_opcode_is_request(WIRE_OP_INSERT));
    assert_true(wire_opcode_is_request(WIRE_OP_COMPRESSED));
    assert_false(wire_opcode_is_request(WIRE_OP_REPLY));
    assert_false(wire_opcode_is_request(2010));
    raw_free(&raw);
}

/* ---- OP_MSG --------------------------------------------------------------------- */

static void test_op_msg_round_trip(void **state)
{
    (void)state;
    bson_t *body = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    uint8_t *message = NULL;
    size_t length = 0;
    bson_error_t error;
    assert_true(wire_op_msg_build(42, 7, 0, body, NULL, 0, &message, &length, &error));
    assert_int_equal(length, 16 + 4 + 1 + body->len);

    wire_op_msg_t parsed;
    assert_true(wire_op_msg_parse(message, length, &parsed, &error));
    assert_int_equal(parsed.header.message_length, (int32_t)length);
    assert_int_equal(parsed.header.request_id, 42);
    assert_int_equal(parsed.header.response_to, 7);
    assert_int_equal(parsed.header.opcode, WIRE_OP_MSG);
    assert_int_equal(parsed.flags, 0);
    assert_int_equal(parsed.sequence_count, 0);
    assert_true(bson_equal(&parsed.body, body));

    bson_t command;
    assert_true(wire_op_msg_command(&parsed, &command, &error));
    assert_true(bson_equal(&command, body));
    bson_destroy(&command);

    bson_t found;
    assert_true(wire_op_msg_find_body(message, length, &found, &error));
    assert_true(bson_equal(&found, body));

    assert_int_equal(wire_message_request_id(message), 42);
    assert_int_equal(wire_message_response_to(message), 7);
    assert_int_equal(wire_message_opcode(message), WIRE_OP_MSG);
    wire_message_set_request_id(message, length, 1000);
    wire_message_set_response_to(message, length, -5);
    assert_true(wire_op_msg_parse(message, length, &parsed, &error));
    assert_int_equal(parsed.header.request_id, 1000);
    assert_int_equal(parsed.header.response_to, -5);

    bson_free(message);
    bson_destroy(body);
}

static void test_op_msg_flags_round_trip(void **state)
{
    (void)state;
    bson_t *body = BCON_NEW("hello", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    uint32_t flags = WIRE_MSG_FLAG_MORE_TO_COME | WIRE_MSG_FLAG_EXHAUST_ALLOWED;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    assert_true(wire_op_msg_build(1, 0, flags, body, NULL, 0, &message, &length, &error));
    wire_op_msg_t parsed;
    assert_true(wire_op_msg_parse(message, length, &parsed, &error));
    assert_int_equal(parsed.flags, flags);
    bson_free(message);
    bson_destroy(body);
}

static void test_op_msg_sequences_merge_into_command(void **state)
{
    (void)state;
    bson_t *body = BCON_NEW("insert", BCON_UTF8("people"), "ordered", BCON_BOOL(false), "$db",
                            BCON_UTF8("test"));
    bson_t *first = BCON_NEW("_id", BCON_INT32(1), "name", BCON_UTF8("ada"));
    bson_t *second = BCON_NEW("_id", BCON_INT32(2), "tags", "[", BCON_UTF8("x"), "]");
    bson_t *note = BCON_NEW("n", BCON_DOUBLE(1.5));
    const bson_t *documents[] = {first, second};
    const bson_t *notes[] = {note};
    wire_sequence_input_t sequences[] = {{"documents", documents, 2}, {"notes", notes, 1}};

    uint8_t *message;
    size_t length;
    bson_error_t error;
    assert_true(wire_op_msg_build(5, 0, 0, body, sequences, 2, &message, &length, &error));

    wire_op_msg_t parsed;
    assert_true(wire_op_msg_parse(message, length, &parsed, &error));
    assert_int_equal(parsed.sequence_count, 2);
    assert_string_equal(parsed.sequences[0].identifier, "documents");
    assert_int_equal(parsed.sequences[0].documents.count, 2);
    assert_string_equal(parsed.sequences[1].identifier, "notes");
    assert_int_equal(parsed.sequences[1].documents.count, 1);
    assert_true(bson_equal(&parsed.body, body));

    wire_documents_iter_t iter;
    bson_t document;
    wire_documents_iter_init(&iter, &parsed.sequences[0].documents);
    assert_true(wire_documents_iter_next(&iter, &document));
    assert_true(bson_equal(&document, first));
    assert_true(wire_documents_iter_next(&iter, &document));
    assert_true(bson_equal(&document, second));
    assert_false(wire_documents_iter_next(&iter, &document));

    bson_t command;
    assert_true(wire_op_msg_command(&parsed, &command, &error));
    bson_t *expected = BCON_NEW("insert", BCON_UTF8("people"), "ordered", BCON_BOOL(false), "$db",
                                BCON_UTF8("test"), "documents", "[", BCON_DOCUMENT(first),
                                BCON_DOCUMENT(second), "]", "notes", "[", BCON_DOCUMENT(note),
                                "]");
    if (!bson_equal(&command, expected)) {
        char *got = bson_as_canonical_extended_json(&command, NULL);
        fail_msg("merged command was %s", got);
    }
    /* The merged arrays are real arrays with keys "0", "1". */
    bson_iter_t field;
    assert_true(bson_iter_init_find(&field, &command, "documents"));
    assert_true(BSON_ITER_HOLDS_ARRAY(&field));
    bson_destroy(&command);

    /* The body is found even when sequences precede it. */
    bson_t found;
    assert_true(wire_op_msg_find_body(message, length, &found, &error));
    assert_true(bson_equal(&found, body));

    bson_free(message);
    bson_destroy(expected);
    bson_destroy(note);
    bson_destroy(second);
    bson_destroy(first);
    bson_destroy(body);
}

static void test_op_msg_empty_sequence(void **state)
{
    (void)state;
    bson_t *body = BCON_NEW("insert", BCON_UTF8("c"), "$db", BCON_UTF8("test"));
    wire_sequence_input_t sequence = {"documents", NULL, 0};
    uint8_t *message;
    size_t length;
    bson_error_t error;
    assert_true(wire_op_msg_build(1, 0, 0, body, &sequence, 1, &message, &length, &error));
    wire_op_msg_t parsed;
    assert_true(wire_op_msg_parse(message, length, &parsed, &error));
    assert_int_equal(parsed.sequences[0].documents.count, 0);
    bson_t command;
    assert_true(wire_op_msg_command(&parsed, &command, &error));
    bson_iter_t field;
    assert_true(bson_iter_init_find(&field, &command, "documents"));
    assert_true(BSON_ITER_HOLDS_ARRAY(&field));
    bson_destroy(&command);
    bson_free(message);
    bson_destroy(body);
}

static void test_op_msg_checksum(void **state)
{
    (void)state;
    bson_t *body = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    uint8_t *message;
    size_t length;
    bson_error_t error;
    assert_true(wire_op_msg_build(9, 3, WIRE_MSG_FLAG_CHECKSUM_PRESENT, body, NULL, 0, &message,
                                  &length, &error));
    assert_int_equal(length, 16 + 4 + 1 + body->len + 4);
    assert_int_equal((uint32_t)wire_load_int32(message + length - 4),
                     wire_crc32c(message, length - 4));

    wire_op_msg_t parsed;
    assert_true(wire_op_msg_parse(message, length, &parsed, &error));
    assert_true(bson_equal(&parsed.body, body));
    assert_int_equal(parsed.flags, WIRE_MSG_FLAG_CHECKSUM_PRESENT);

    /* Patching the header recomputes the checksum that covers it. */
    wire_message_set_request_id(message, length, 77);
    wire_message_set_response_to(message, length, 78);
    assert_true(wire_op_msg_parse(message, length, &parsed, &error));
    assert_int_equal(parsed.header.request_id, 77);
    assert_int_equal(parsed.header.response_to, 78);

    /* Still valid BSON, different value: only the checksum can tell. The int32 1
     * of "ping" sits after kind byte, length, type byte and "ping\0". */
    uint8_t *copy = exact_copy(message, length);
    size_t value_at = 16 + 4 + 1 + 4 + 1 + 5;
    assert_int_equal(copy[value_at], 1);
    copy[value_at] = 2;
    assert_false(wire_op_msg_parse(copy, length, &parsed, &error));
    assert_error(&error, TC_ERR_CHECKSUM_MISMATCH, "OP_MSG checksum does not match contents");
    free(copy);

    copy = exact_copy(message, length);
    copy[length - 1] ^= 0x01;
    assert_false(wire_op_msg_parse(copy, length, &parsed, &error));
    assert_error(&error, 288, NULL);
    /* find_body does not verify the checksum: that is the parser's job. */
    bson_t found;
    assert_true(wire_op_msg_find_body(copy, length, &found, &error));
    free(copy);

    /* A changed header byte is covered too. */
    copy = exact_copy(message, length);
    copy[8] ^= 0x40;
    assert_false(wire_op_msg_parse(copy, length, &parsed, &error));
    assert_error(&error, 288, NULL);
    free(copy);

    assert_every_truncation_fails(message, length, 0);
    assert_byte_corruption_is_safe(message, length);
    bson_free(message);
    bson_destroy(body);
}

static void test_op_msg_checksum_needs_room(void **state)
{
    (void)state;
    bson_error_t error;
    wire_op_msg_t parsed;
    /* Flags say checksum, and only 4 bytes follow them: no room for a section. */
    raw_t raw;
    raw_begin(&raw);
    raw_int32(&raw, (int32_t)WIRE_MSG_FLAG_CHECKSUM_PRESENT);
    raw_int32(&raw, 0);
    raw_finish(&raw, 1, 0, WIRE_OP_MSG);
    assert_false(wire_op_msg_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, TC_ERR_LOCATION_OP_MSG_CHECKSUM_SIZE,
                 "Invalid message size for an OpMsg containing a checksum");
    raw_free(&raw);

    raw_begin(&raw);
    raw_int32(&raw, (int32_t)WIRE_MSG_FLAG_CHECKSUM_PRESENT);
    raw_finish(&raw, 1, 0, WIRE_OP_MSG);
    assert_false(wire_op_msg_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, 51251, NULL);
    raw_free(&raw);
}

static void test_op_msg_flag_bits(void **state)
{
    (void)state;
    bson_t *body = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    bson_error_t error;
    wire_op_msg_t parsed;
    struct {
        uint32_t flags;
        bool valid;
    } cases[] = {
        {0, true},
        {WIRE_MSG_FLAG_MORE_TO_COME, true},
        {WIRE_MSG_FLAG_EXHAUST_ALLOWED, true},
        {1u << 17, true}, /* unknown optional bits are ignored */
        {1u << 31, true},
        {1u << 2, false}, /* unknown required bits are refused */
        {1u << 15, false},
        {0xFFFFFFFFu, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        raw_t raw;
        raw_begin(&raw);
        raw_int32(&raw, (int32_t)(cases[i].flags & ~WIRE_MSG_FLAG_CHECKSUM_PRESENT));
        raw_byte(&raw, 0);
        raw_document(&raw, body);
        raw_finish(&raw, 1, 0, WIRE_OP_MSG);
        bool ok = wire_op_msg_parse(raw.data, raw.length, &parsed, &error);
        assert_int_equal(ok, cases[i].valid);
        if (!cases[i].valid) {
            assert_error(&error, TC_ERR_ILLEGAL_OP_MSG_FLAG,
                         "Message contains illegal flags value: Ob");
        }
        raw_free(&raw);
    }

    raw_t raw;
    raw_begin(&raw);
    raw_int32(&raw, 1 << 2);
    raw_byte(&raw, 0);
    raw_document(&raw, body);
    raw_finish(&raw, 1, 0, WIRE_OP_MSG);
    assert_false(wire_op_msg_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, 223,
                 "Message contains illegal flags value: Ob00000000000000000000000000000100");
    raw_free(&raw);
    bson_destroy(body);
}

/* Builds an OP_MSG from sections described by the caller, for malformed cases. */
typedef void (*sections_writer_t)(raw_t *raw, const bson_t *body);

static void assert_op_msg_fails(sections_writer_t writer, int32_t code, const char *fragment)
{
    bson_t *body = BCON_NEW("find", BCON_UTF8("c"), "$db", BCON_UTF8("test"));
    raw_t raw;
    raw_begin(&raw);
    raw_int32(&raw, 0);
    writer(&raw, body);
    raw_finish(&raw, 1, 0, WIRE_OP_MSG);
    uint8_t *copy = exact_copy(raw.data, raw.length);
    wire_op_msg_t parsed;
    bson_error_t error;
    assert_false(wire_op_msg_parse(copy, raw.length, &parsed, &error));
    assert_error(&error, code, fragment);
    free(copy);
    raw_free(&raw);
    bson_destroy(body);
}

static void write_two_bodies(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 0);
    raw_document(raw, body);
    raw_byte(raw, 0);
    raw_document(raw, body);
}

static void write_no_sections(raw_t *raw, const bson_t *body)
{
    (void)raw;
    (void)body;
}

static void write_only_a_sequence(raw_t *raw, const bson_t *body)
{
    size_t at = raw_begin_sequence(raw, "documents");
    raw_document(raw, body);
    raw_end_sequence(raw, at);
}

static void write_kind_two(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 0);
    raw_document(raw, body);
    raw_byte(raw, 2);
    raw_document(raw, body);
}

static void write_kind_255_first(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 255);
    raw_byte(raw, 0);
    raw_document(raw, body);
}

static void write_three_sequences(raw_t *raw, const bson_t *body)
{
    const char *names[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        size_t at = raw_begin_sequence(raw, names[i]);
        raw_end_sequence(raw, at);
    }
    raw_byte(raw, 0);
    raw_document(raw, body);
}

static void write_duplicate_sequences(raw_t *raw, const bson_t *body)
{
    for (int i = 0; i < 2; i++) {
        size_t at = raw_begin_sequence(raw, "documents");
        raw_end_sequence(raw, at);
    }
    raw_byte(raw, 0);
    raw_document(raw, body);
}

static void write_sequence_shadowing_body(raw_t *raw, const bson_t *body)
{
    (void)body;
    bson_t *shadowing = BCON_NEW("insert", BCON_UTF8("c"), "documents", "[", "]", "$db",
                                 BCON_UTF8("test"));
    raw_byte(raw, 0);
    raw_document(raw, shadowing);
    size_t at = raw_begin_sequence(raw, "documents");
    raw_end_sequence(raw, at);
    bson_destroy(shadowing);
}

static void write_dotted_sequence_in_body(raw_t *raw, const bson_t *body)
{
    (void)body;
    bson_t *nested = BCON_NEW("a", "{", "b", BCON_INT32(1), "}", "$db", BCON_UTF8("test"));
    raw_byte(raw, 0);
    raw_document(raw, nested);
    size_t at = raw_begin_sequence(raw, "a.b");
    raw_end_sequence(raw, at);
    bson_destroy(nested);
}

static void write_dotted_sequence_through_array(raw_t *raw, const bson_t *body)
{
    (void)body;
    bson_t *with_array = BCON_NEW("a", "[", BCON_INT32(1), "]", "$db", BCON_UTF8("test"));
    raw_byte(raw, 0);
    raw_document(raw, with_array);
    size_t at = raw_begin_sequence(raw, "a.b.c");
    raw_end_sequence(raw, at);
    bson_destroy(with_array);
}

static void write_sequence_size_below_four(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 1);
    raw_int32(raw, 3);
    raw_byte(raw, 0);
    raw_document(raw, body);
}

static void write_sequence_size_negative(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 1);
    raw_int32(raw, -100);
    raw_byte(raw, 0);
    raw_document(raw, body);
}

static void write_sequence_size_100mb(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 0);
    raw_document(raw, body);
    raw_byte(raw, 1);
    raw_int32(raw, 100 * 1024 * 1024);
    raw_cstring(raw, "documents");
}

static void write_sequence_identifier_unterminated(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 0);
    raw_document(raw, body);
    raw_byte(raw, 1);
    raw_int32(raw, 4 + 3);
    raw_bytes(raw, "abc", 3);
}

static void write_sequence_identifier_not_utf8(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 0);
    raw_document(raw, body);
    size_t at = raw_begin_sequence(raw, "\x80pdates");
    raw_document(raw, body);
    raw_end_sequence(raw, at);
}

static void write_sequence_document_overruns_section(raw_t *raw, const bson_t *body)
{
    size_t at = raw_begin_sequence(raw, "documents");
    raw_document(raw, body);
    raw_end_sequence(raw, at);
    /* Claim one byte less: the document crosses the section's end. */
    wire_store_int32(raw->data + at, wire_load_int32(raw->data + at) - 1);
    raw_byte(raw, 0);
    raw_document(raw, body);
}

static void write_body_truncated_length(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 0);
    raw_int32(raw, (int32_t)body->len + 1);
    raw_bytes(raw, bson_get_data(body) + 4, body->len - 4);
}

static void write_body_length_100mb(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 0);
    raw_int32(raw, 100 * 1024 * 1024);
    raw_bytes(raw, bson_get_data(body) + 4, body->len - 4);
}

static void write_body_length_four(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 0);
    raw_int32(raw, 4);
    raw_bytes(raw, bson_get_data(body) + 4, body->len - 4);
}

static void write_body_without_eoo(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 0);
    raw_bytes(raw, bson_get_data(body), body->len - 1);
    raw_byte(raw, 7);
}

static void write_body_tiny(raw_t *raw, const bson_t *body)
{
    (void)body;
    raw_byte(raw, 0);
    raw_bytes(raw, "\x05\x00\x00", 3);
}

static void write_body_bad_type(raw_t *raw, const bson_t *body)
{
    (void)body;
    /* {"x": <type 0x20>} */
    static const uint8_t bad[] = {9, 0, 0, 0, 0x20, 'x', 0, 0, 0};
    raw_byte(raw, 0);
    raw_bytes(raw, bad, sizeof bad);
}

static void write_body_bad_bool(raw_t *raw, const bson_t *body)
{
    (void)body;
    static const uint8_t bad[] = {9, 0, 0, 0, 0x08, 'x', 0, 2, 0};
    raw_byte(raw, 0);
    raw_bytes(raw, bad, sizeof bad);
}

static void write_body_string_overrun(raw_t *raw, const bson_t *body)
{
    (void)body;
    /* {"s": string of declared length 1000} */
    static const uint8_t bad[] = {14, 0, 0, 0, 0x02, 's', 0, 0xE8, 0x03, 0, 0, 'h', 0, 0};
    raw_byte(raw, 0);
    raw_bytes(raw, bad, sizeof bad);
}

static void write_body_string_unterminated(raw_t *raw, const bson_t *body)
{
    (void)body;
    static const uint8_t bad[] = {15, 0, 0, 0, 0x02, 's', 0, 2, 0, 0, 0, 'h', 'i', 0, 0};
    raw_byte(raw, 0);
    raw_bytes(raw, bad, sizeof bad);
}

static void write_body_nested_length_lies(raw_t *raw, const bson_t *body)
{
    (void)body;
    /* {"d": {}} with the inner length claiming 6. */
    static const uint8_t bad[] = {13, 0, 0, 0, 0x03, 'd', 0, 6, 0, 0, 0, 0, 0};
    raw_byte(raw, 0);
    raw_bytes(raw, bad, sizeof bad);
}

static void write_body_nested_length_small(raw_t *raw, const bson_t *body)
{
    (void)body;
    static const uint8_t bad[] = {13, 0, 0, 0, 0x03, 'd', 0, 4, 0, 0, 0, 0, 0};
    raw_byte(raw, 0);
    raw_bytes(raw, bad, sizeof bad);
}

static void write_body_name_not_utf8(raw_t *raw, const bson_t *body)
{
    (void)body;
    /* {"\xff": 1}: libbson's visitors stop at such a name. */
    static const uint8_t bad[] = {12, 0, 0, 0, 0x10, 0xff, 0, 1, 0, 0, 0, 0};
    raw_byte(raw, 0);
    raw_bytes(raw, bad, sizeof bad);
}

static void write_body_old_binary_length_lies(raw_t *raw, const bson_t *body)
{
    (void)body;
    /* {"b": BinData(2, "abcd")} whose inner length says 5 where 4 follows. */
    static const uint8_t bad[] = {21, 0, 0, 0, 0x05, 'b', 0, 8, 0, 0, 0, 2, 5, 0, 0, 0, 'a', 'b', 'c', 'd', 0};
    raw_byte(raw, 0);
    raw_bytes(raw, bad, sizeof bad);
}

static void write_body_old_binary_too_short(raw_t *raw, const bson_t *body)
{
    (void)body;
    /* {"b": BinData(2, ...)} of 3 bytes: no room for the inner length. */
    static const uint8_t bad[] = {16, 0, 0, 0, 0x05, 'b', 0, 3, 0, 0, 0, 2, 'a', 'b', 'c', 0};
    raw_byte(raw, 0);
    raw_bytes(raw, bad, sizeof bad);
}

static void write_trailing_byte_after_body(raw_t *raw, const bson_t *body)
{
    raw_byte(raw, 0);
    raw_document(raw, body);
    raw_byte(raw, 0);
}

static void test_op_msg_malformed(void **state)
{
    (void)state;
    assert_op_msg_fails(write_two_bodies, TC_ERR_LOCATION_MULTIPLE_BODIES,
                        "Multiple body sections in message");
    assert_op_msg_fails(write_no_sections, TC_ERR_LOCATION_OP_MSG_NO_BODY,
                        "OP_MSG messages must have a body");
    assert_op_msg_fails(write_only_a_sequence, 40587, NULL);
    assert_op_msg_fails(write_kind_two, TC_ERR_LOCATION_UNKNOWN_SECTION_KIND,
                        "Unknown section kind 2");
    assert_op_msg_fails(write_kind_255_first, 40432, "Unknown section kind 255");
    assert_op_msg_fails(write_three_sequences, TC_ERR_TOO_MANY_DOCUMENT_SEQUENCES,
                        "Too many document sequences in OP_MSG");
    assert_op_msg_fails(write_duplicate_sequences, TC_ERR_LOCATION_DUPLICATE_DOCUMENT_SEQUENCE,
                        "Duplicate document sequence: documents");
    assert_op_msg_fails(write_sequence_shadowing_body, TC_ERR_LOCATION_DUPLICATE_BODY_FIELD,
                        "Duplicate field between body and document sequence documents");
    assert_op_msg_fails(write_dotted_sequence_in_body, 40433, "document sequence a.b");
    assert_op_msg_fails(write_dotted_sequence_through_array, 40433, "a.b.c");
    assert_op_msg_fails(write_sequence_size_below_four, TC_ERR_OVERFLOW, "declares 3 bytes");
    assert_op_msg_fails(write_sequence_size_negative, TC_ERR_OVERFLOW, "declares -100 bytes");
    assert_op_msg_fails(write_sequence_size_100mb, TC_ERR_OVERFLOW, "declares 104857600 bytes");
    assert_op_msg_fails(write_sequence_identifier_unterminated, TC_ERR_OVERFLOW,
                        "identifier at offset");
    assert_op_msg_fails(write_sequence_document_overruns_section, TC_ERR_INVALID_BSON,
                        "Incorrect BSON length");
    assert_op_msg_fails(write_body_truncated_length, TC_ERR_INVALID_BSON,
                        "Incorrect BSON length");
    assert_op_msg_fails(write_body_length_100mb, 22, "Incorrect BSON length");
    assert_op_msg_fails(write_body_length_four, 22, "BSON data has to be at least 5 bytes");
    assert_op_msg_fails(write_body_without_eoo, 22, "BSON object not terminated with EOO");
    assert_op_msg_fails(write_body_tiny, 22, "at least 5 bytes");
    assert_op_msg_fails(write_body_bad_type, 22, "Unrecognized BSON type 32");
    assert_op_msg_fails(write_body_bad_bool, 22, "BSON bool is neither false nor true");
    assert_op_msg_fails(write_body_string_overrun, 22, "BSON size is larger than buffer size");
    assert_op_msg_fails(write_body_string_unterminated, 22, "Not null terminated string");
    assert_op_msg_fails(write_body_nested_length_lies, 22, "incorrect BSON length");
    assert_op_msg_fails(write_body_nested_length_small, 22,
                        "Nested BSON object has to be at least 5 bytes");
    assert_op_msg_fails(write_body_name_not_utf8, 22, "Field name is not valid UTF-8");
    assert_op_msg_fails(write_sequence_identifier_not_utf8, 22, "identifier is not valid UTF-8");
    assert_op_msg_fails(write_body_old_binary_length_lies, 22, "deprecated subtype 2");
    assert_op_msg_fails(write_body_old_binary_too_short, 22, "deprecated subtype 2");
    assert_op_msg_fails(write_trailing_byte_after_body, 40430, NULL);
}

static void test_op_msg_sequence_path_not_shadowed(void **state)
{
    (void)state;
    /* "a.b" is not in {a: 1}: a scalar along the path ends the search. */
    bson_t *body = BCON_NEW("a", BCON_INT32(1), "$db", BCON_UTF8("test"));
    bson_t *item = BCON_NEW("x", BCON_INT32(1));
    const bson_t *items[] = {item};
    wire_sequence_input_t sequence = {"a.b", items, 1};
    uint8_t *message;
    size_t length;
    bson_error_t error;
    assert_true(wire_op_msg_build(1, 0, 0, body, &sequence, 1, &message, &length, &error));
    wire_op_msg_t parsed;
    assert_true(wire_op_msg_parse(message, length, &parsed, &error));
    bson_free(message);
    bson_destroy(item);
    bson_destroy(body);
}

static void test_op_msg_wrong_opcode(void **state)
{
    (void)state;
    bson_t *body = BCON_NEW("ping", BCON_INT32(1));
    raw_t raw;
    raw_begin(&raw);
    raw_int32(&raw, 0);
    raw_byte(&raw, 0);
    raw_document(&raw, body);
    raw_finish(&raw, 1, 0, WIRE_OP_QUERY);
    wire_op_msg_t parsed;
    bson_t found;
    bson_error_t error;
    assert_false(wire_op_msg_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, TC_ERR_ILLEGAL_OPERATION, "is not an OP_MSG");
    assert_false(wire_op_msg_find_body(raw.data, raw.length, &found, &error));
    assert_error(&error, 20, NULL);
    raw_free(&raw);
    bson_destroy(body);
}

static void test_op_msg_find_body_skips_sequences(void **state)
{
    (void)state;
    bson_t *body = BCON_NEW("insert", BCON_UTF8("c"), "$db", BCON_UTF8("test"));
    raw_t raw;
    raw_begin(&raw);
    raw_int32(&raw, 0);
    /* A sequence whose "document" is garbage: find_body does not look inside. */
    size_t at = raw_begin_sequence(&raw, "documents");
    raw_bytes(&raw, "\xFF\xFF\xFF\xFF\x00", 5);
    raw_end_sequence(&raw, at);
    raw_byte(&raw, 0);
    raw_document(&raw, body);
    raw_finish(&raw, 1, 0, WIRE_OP_MSG);
    bson_t found;
    bson_error_t error;
    assert_true(wire_op_msg_find_body(raw.data, raw.length, &found, &error));
    assert_true(bson_equal(&found, body));
    wire_op_msg_t parsed;
    assert_false(wire_op_msg_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, TC_ERR_INVALID_BSON, NULL);
    raw_free(&raw);

    raw_begin(&raw);
    raw_int32(&raw, 0);
    at = raw_begin_sequence(&raw, "documents");
    raw_end_sequence(&raw, at);
    raw_finish(&raw, 1, 0, WIRE_OP_MSG);
    assert_false(wire_op_msg_find_body(raw.data, raw.length, &found, &error));
    assert_error(&error, 40587, NULL);
    raw_free(&raw);
    bson_destroy(body);
}

/* A document nested depth levels deep: {a: {a: ... {} ...}}; caller frees. */
static uint8_t *make_nested(size_t depth, size_t *out_length)
{
    size_t length = 8 * depth + 5;
    uint8_t *data = calloc(1, length);
    assert_non_null(data);
    for (size_t level = 0; level < depth; level++) {
        size_t at = 7 * level;
        wire_store_int32(data + at, (int32_t)(5 + 8 * (depth - level)));
        data[at + 4] = BSON_TYPE_DOCUMENT;
        data[at + 5] = 'a';
    }
    wire_store_int32(data + 7 * depth, 5);
    *out_length = length;
    return data;
}

static bool parse_body_bytes(const uint8_t *document, size_t document_length, bson_error_t *error)
{
    raw_t raw;
    raw_begin(&raw);
    raw_int32(&raw, 0);
    raw_byte(&raw, 0);
    raw_bytes(&raw, document, document_length);
    raw_finish(&raw, 1, 0, WIRE_OP_MSG);
    wire_op_msg_t parsed;
    bool ok = wire_op_msg_parse(raw.data, raw.length, &parsed, error);
    raw_free(&raw);
    return ok;
}

static void test_op_msg_nesting_depth(void **state)
{
    (void)state;
    size_t length;
    bson_error_t error;
    uint8_t *nested = make_nested(WIRE_MAX_BSON_DEPTH, &length);
    assert_true(parse_body_bytes(nested, length, &error));
    free(nested);

    nested = make_nested(WIRE_MAX_BSON_DEPTH + 1, &length);
    assert_false(parse_body_bytes(nested, length, &error));
    assert_error(&error, TC_ERR_OVERFLOW, "BSONObj exceeds maximum nested object depth");
    free(nested);

    /* Deep enough to overflow a recursive validator's stack. */
    nested = make_nested(1000000, &length);
    assert_false(parse_body_bytes(nested, length, &error));
    assert_error(&error, TC_ERR_OVERFLOW, NULL);
    free(nested);
}

static void test_op_msg_every_bson_type(void **state)
{
    (void)state;
    bson_t body = BSON_INITIALIZER;
    bson_oid_t oid;
    bson_oid_init_from_string(&oid, "5f1e0a0b0c0d0e0f10111213");
    bson_decimal128_t decimal;
    bson_decimal128_from_string("1.5", &decimal);
    bson_t *scope = BCON_NEW("x", BCON_INT32(1));
    bson_t *inner = BCON_NEW("y", "[", BCON_INT64(2), "]");
    const uint8_t binary[] = {1, 2, 3};
    BSON_APPEND_DOUBLE(&body, "double", 1.25);
    BSON_APPEND_UTF8(&body, "string", "héllo");
    BSON_APPEND_DOCUMENT(&body, "document", inner);
    BSON_APPEND_BINARY(&body, "binary", BSON_SUBTYPE_UUID, binary, 3);
    BSON_APPEND_BINARY(&body, "old binary", BSON_SUBTYPE_BINARY_DEPRECATED, binary, 3);
    BSON_APPEND_UNDEFINED(&body, "undefined");
    BSON_APPEND_OID(&body, "oid", &oid);
    BSON_APPEND_BOOL(&body, "true", true);
    BSON_APPEND_BOOL(&body, "false", false);
    BSON_APPEND_DATE_TIME(&body, "date", 1234567890123);
    BSON_APPEND_NULL(&body, "null");
    BSON_APPEND_REGEX(&body, "regex", "^a.*b$", "im");
    BSON_APPEND_DBPOINTER(&body, "dbpointer", "db.c", &oid);
    BSON_APPEND_CODE(&body, "code", "function() {}");
    BSON_APPEND_SYMBOL(&body, "symbol", "sym");
    BSON_APPEND_CODE_WITH_SCOPE(&body, "codewscope", "function() { return x; }", scope);
    BSON_APPEND_INT32(&body, "int32", -5);
    BSON_APPEND_TIMESTAMP(&body, "timestamp", 100, 1);
    BSON_APPEND_INT64(&body, "int64", INT64_MAX);
    BSON_APPEND_DECIMAL128(&body, "decimal", &decimal);
    BSON_APPEND_MINKEY(&body, "minkey");
    BSON_APPEND_MAXKEY(&body, "maxkey");
    BSON_APPEND_UTF8(&body, "$db", "test");

    uint8_t *message;
    size_t length;
    bson_error_t error;
    assert_true(wire_op_msg_build(1, 0, 0, &body, NULL, 0, &message, &length, &error));
    wire_op_msg_t parsed;
    if (!wire_op_msg_parse(message, length, &parsed, &error)) {
        fail_msg("valid body refused: %s", error.message);
    }
    assert_true(bson_equal(&parsed.body, &body));
    assert_byte_corruption_is_safe(message, length);
    bson_free(message);
    bson_destroy(inner);
    bson_destroy(scope);
    bson_destroy(&body);
}

static void test_op_msg_code_with_scope_size_lies(void **state)
{
    (void)state;
    bson_t *scope = BCON_NEW("x", BCON_INT32(1));
    bson_t body = BSON_INITIALIZER;
    BSON_APPEND_CODE_WITH_SCOPE(&body, "c", "f", scope);
    uint8_t *bytes = exact_copy(bson_get_data(&body), body.len);
    bson_error_t error;
    assert_true(parse_body_bytes(bytes, body.len, &error));
    /* The CodeWScope's own total length sits right after type byte and "c\0". */
    size_t total_at = 4 + 1 + 2;
    wire_store_int32(bytes + total_at, wire_load_int32(bytes + total_at) + 1);
    assert_false(parse_body_bytes(bytes, body.len, &error));
    assert_error(&error, TC_ERR_INVALID_BSON, "incorrect BSON length");
    free(bytes);
    bson_destroy(&body);
    bson_destroy(scope);
}

/* libbson appends code and DBPointer strings with strlen(): one holding a NUL
 * would be cut short the first time its document is rewritten (the fuzzers
 * found it), so such a string is refused at the door. Strings and symbols keep
 * their length and may hold NULs. */
static void test_op_msg_nul_inside_code_or_dbpointer(void **state)
{
    (void)state;
    for (size_t kind = 0; kind < 4; kind++) {
        bson_t body = BSON_INITIALIZER;
        bson_t *scope = BCON_NEW("x", BCON_INT32(1));
        bson_oid_t oid;
        bson_oid_init_from_string(&oid, "5f1e9d7c8a3b4c5d6e7f8091");
        if (kind == 0) {
            BSON_APPEND_CODE(&body, "c", "a_b");
        } else if (kind == 1) {
            BSON_APPEND_DBPOINTER(&body, "c", "a_b", &oid);
        } else if (kind == 2) {
            BSON_APPEND_CODE_WITH_SCOPE(&body, "c", "a_b", scope);
        } else {
            bson_append_utf8(&body, "c", 1, "a_b", 3);
        }
        uint8_t *bytes = exact_copy(bson_get_data(&body), body.len);
        bson_error_t error;
        assert_true(parse_body_bytes(bytes, body.len, &error));
        uint8_t *underscore = memchr(bytes, '_', body.len);
        assert_non_null(underscore);
        *underscore = 0;
        bool parsed = parse_body_bytes(bytes, body.len, &error);
        if (kind == 3) {
            assert_true(parsed);
        } else {
            assert_false(parsed);
            assert_error(&error, TC_ERR_INVALID_BSON, "holds a NUL byte");
        }
        free(bytes);
        bson_destroy(&body);
        bson_destroy(scope);
    }
}

static void test_op_msg_size_limits(void **state)
{
    (void)state;
    /* One document just over mongod's 16 MB + 16 KB object limit. */
    size_t payload = WIRE_MAX_BSON_INTERNAL_SIZE;
    uint8_t *filler = calloc(1, payload);
    assert_non_null(filler);
    bson_t big = BSON_INITIALIZER;
    assert_true(BSON_APPEND_BINARY(&big, "b", BSON_SUBTYPE_BINARY, filler, (uint32_t)payload));
    free(filler);
    assert_true(big.len > WIRE_MAX_BSON_INTERNAL_SIZE);

    bson_t *body = BCON_NEW("insert", BCON_UTF8("c"), "$db", BCON_UTF8("test"));
    uint8_t *message;
    size_t length;
    bson_error_t error;
    /* A reply (no sequences) is capped like mongod's OpMsgBuilder::finish. */
    assert_false(wire_op_msg_build(1, 0, 0, &big, NULL, 0, &message, &length, &error));
    assert_error(&error, TC_ERR_LOCATION_BSON_TOO_LARGE,
                 "BSON size limit hit while building Message");

    /* In a sequence the message is allowed, but the parser refuses the object. */
    const bson_t *documents[] = {&big};
    wire_sequence_input_t sequence = {"documents", documents, 1};
    assert_true(wire_op_msg_build(1, 0, 0, body, &sequence, 1, &message, &length, &error));
    wire_op_msg_t parsed;
    assert_false(wire_op_msg_parse(message, length, &parsed, &error));
    assert_error(&error, 10334, "is invalid. Size must be between 0 and 16793600(16MB)");
    bson_free(message);

    /* More than 48 MB of sequences cannot be built. */
    const bson_t *three[] = {&big, &big, &big};
    sequence.documents = three;
    sequence.document_count = 3;
    assert_false(wire_op_msg_build(1, 0, 0, body, &sequence, 1, &message, &length, &error));
    assert_error(&error, 10334, NULL);

    bson_destroy(body);
    bson_destroy(&big);
}

static void test_op_msg_truncations_and_corruption(void **state)
{
    (void)state;
    bson_t *body = BCON_NEW("update", BCON_UTF8("c"), "$db", BCON_UTF8("test"));
    bson_t *update = BCON_NEW("q", "{", "_id", BCON_INT32(1), "}", "u", "{", "$set", "{", "a",
                              BCON_INT32(2), "}", "}");
    const bson_t *updates[] = {update, update};
    wire_sequence_input_t sequence = {"updates", updates, 2};
    uint8_t *message;
    size_t length;
    bson_error_t error;
    assert_true(wire_op_msg_build(3, 0, 0, body, &sequence, 1, &message, &length, &error));
    assert_every_truncation_fails(message, length, 0);
    assert_byte_corruption_is_safe(message, length);

    /* Corrupted message lengths. */
    const int32_t lengths[] = {0, 15, 16, -1, INT32_MAX, INT32_MIN, 100 * 1024 * 1024,
                               (int32_t)length - 1, (int32_t)length + 1};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        uint8_t *copy = exact_copy(message, length);
        wire_store_int32(copy, lengths[i]);
        wire_op_msg_t parsed;
        assert_false(wire_op_msg_parse(copy, length, &parsed, &error));
        assert_error(&error, TC_ERR_PROTOCOL_ERROR, NULL);
        free(copy);
    }
    bson_free(message);
    bson_destroy(update);
    bson_destroy(body);
}

/* The builders lay bytes out exactly as the protocol documents them. */
static void test_builders_match_documented_layout(void **state)
{
    (void)state;
    bson_t *body = BCON_NEW("ok", BCON_DOUBLE(1));
    bson_t *item = BCON_NEW("_id", BCON_INT32(1));
    const bson_t *items[] = {item};
    wire_sequence_input_t sequence = {"documents", items, 1};
    uint8_t *built;
    size_t built_length;
    bson_error_t error;
    assert_true(wire_op_msg_build(-3, 99, WIRE_MSG_FLAG_CHECKSUM_PRESENT, body, &sequence, 1,
                                  &built, &built_length, &error));
    raw_t raw;
    raw_begin(&raw);
    raw_int32(&raw, (int32_t)WIRE_MSG_FLAG_CHECKSUM_PRESENT);
    size_t at = raw_begin_sequence(&raw, "documents");
    raw_document(&raw, item);
    raw_end_sequence(&raw, at);
    raw_byte(&raw, 0);
    raw_document(&raw, body);
    raw_finish_with_checksum(&raw, -3, 99);
    assert_int_equal(built_length, raw.length);
    assert_memory_equal(built, raw.data, raw.length);
    bson_free(built);
    raw_free(&raw);

    const bson_t *documents[] = {body, item};
    assert_true(wire_op_reply_build(7, 8, WIRE_REPLY_FLAG_QUERY_FAILURE, -2, 5, documents, 2,
                                    &built, &built_length, &error));
    raw_begin(&raw);
    raw_int32(&raw, WIRE_REPLY_FLAG_QUERY_FAILURE);
    raw_int64(&raw, -2);
    raw_int32(&raw, 5);
    raw_int32(&raw, 2);
    raw_document(&raw, body);
    raw_document(&raw, item);
    raw_finish(&raw, 7, 8, WIRE_OP_REPLY);
    assert_int_equal(built_length, raw.length);
    assert_memory_equal(built, raw.data, raw.length);
    bson_free(built);
    raw_free(&raw);
    bson_destroy(item);
    bson_destroy(body);
}

/* ---- OP_QUERY ------------------------------------------------------------------- */

static void build_op_query(raw_t *raw, int32_t flags, const char *name, int32_t skip,
                           int32_t number_to_return, const bson_t *query, const bson_t *selector)
{
    raw_begin(raw);
    raw_int32(raw, flags);
    raw_cstring(raw, name);
    raw_int32(raw, skip);
    raw_int32(raw, number_to_return);
    raw_document(raw, query);
    if (selector) {
        raw_document(raw, selector);
    }
    raw_finish(raw, 11, 0, WIRE_OP_QUERY);
}

/* Parses an OP_QUERY and upconverts it; returns whether the command was built. */
static bool query_command(int32_t flags, const char *name, int32_t number_to_return,
                          const bson_t *query, bson_t *out_command, bson_error_t *error)
{
    raw_t raw;
    build_op_query(&raw, flags, name, 0, number_to_return, query, NULL);
    wire_op_query_t parsed;
    assert_true(wire_op_query_parse(raw.data, raw.length, &parsed, error));
    bool ok = wire_op_query_command(&parsed, out_command, error);
    raw_free(&raw);
    return ok;
}

static void assert_command_is(const bson_t *command, const bson_t *expected)
{
    if (!bson_equal(command, expected)) {
        char *got = bson_as_canonical_extended_json(command, NULL);
        char *want = bson_as_canonical_extended_json(expected, NULL);
        fail_msg("command %s, expected %s", got, want);
    }
}

/* message is an OP_REPLY answering response_to with flags and exactly one
 * document, equal to expected. */
static void assert_one_document_reply(const uint8_t *message, size_t length, int32_t response_to, int32_t flags,
                                      const bson_t *expected)
{
    bson_error_t error;
    wire_op_reply_t reply;
    wire_documents_iter_t iter;
    bson_t document;
    assert_true(wire_op_reply_parse(message, length, &reply, &error));
    assert_int_equal(reply.header.response_to, response_to);
    assert_int_equal(reply.response_flags, flags);
    assert_int_equal(reply.cursor_id, 0);
    assert_int_equal(reply.starting_from, 0);
    assert_int_equal(reply.number_returned, 1);
    wire_documents_iter_init(&iter, &reply.documents);
    assert_true(wire_documents_iter_next(&iter, &document));
    assert_command_is(&document, expected);
    assert_false(wire_documents_iter_next(&iter, &document));
}

static void test_op_query_parse(void **state)
{
    (void)state;
    bson_t *query = BCON_NEW("isMaster", BCON_INT32(1), "helloOk", BCON_BOOL(true), "client", "{",
                             "driver", "{", "name", BCON_UTF8("test"), "}", "}");
    bson_t *selector = BCON_NEW("ismaster", BCON_INT32(1));
    raw_t raw;
    build_op_query(&raw, WIRE_QUERY_FLAG_SECONDARY_OK, "admin.$cmd", 2, -1, query, selector);
    wire_op_query_t parsed;
    bson_error_t error;
    assert_true(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_int_equal(parsed.header.request_id, 11);
    assert_int_equal(parsed.flags, WIRE_QUERY_FLAG_SECONDARY_OK);
    assert_string_equal(parsed.full_collection_name, "admin.$cmd");
    assert_int_equal(parsed.number_to_skip, 2);
    assert_int_equal(parsed.number_to_return, -1);
    assert_true(bson_equal(&parsed.query, query));
    assert_true(parsed.has_return_fields_selector);
    assert_true(bson_equal(&parsed.return_fields_selector, selector));
    /* Without the selector there is none; so the prefix ending at the query is valid. */
    size_t without_selector = raw.length - selector->len;
    assert_every_truncation_fails(raw.data, raw.length, without_selector);
    assert_byte_corruption_is_safe(raw.data, raw.length);
    raw_free(&raw);

    build_op_query(&raw, 0, "admin.$cmd", 0, 1, query, NULL);
    assert_true(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_false(parsed.has_return_fields_selector);
    raw_free(&raw);
    bson_destroy(selector);
    bson_destroy(query);
}

static void test_op_query_malformed(void **state)
{
    (void)state;
    bson_error_t error;
    wire_op_query_t parsed;
    raw_t raw;

    raw_begin(&raw);
    raw_int32(&raw, 0);
    raw_bytes(&raw, "admin.$cmd", 10); /* no NUL */
    raw_finish(&raw, 1, 0, WIRE_OP_QUERY);
    assert_false(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, TC_ERR_LOCATION_NAMESPACE_STRING, "fullCollectionName");
    raw_free(&raw);

    raw_begin(&raw);
    raw_int32(&raw, 0);
    raw_cstring(&raw, "admin.$cmd");
    raw_int32(&raw, 0);
    raw_bytes(&raw, "\x01\x00", 2);
    raw_finish(&raw, 1, 0, WIRE_OP_QUERY);
    assert_false(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, TC_ERR_LOCATION_NOT_ENOUGH_DATA, "numberToReturn");
    raw_free(&raw);

    raw_begin(&raw);
    raw_bytes(&raw, "\x00\x00", 2);
    raw_finish(&raw, 1, 0, WIRE_OP_QUERY);
    assert_false(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, 18634, "flags");
    raw_free(&raw);

    bson_t *query = BCON_NEW("ping", BCON_INT32(1));
    raw_begin(&raw);
    raw_int32(&raw, 0);
    raw_cstring(&raw, "admin.$cmd");
    raw_int32(&raw, 0);
    raw_int32(&raw, -1);
    raw_bytes(&raw, bson_get_data(query), 4);
    raw_finish(&raw, 1, 0, WIRE_OP_QUERY);
    assert_false(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, TC_ERR_INVALID_BSON,
                 "Client Error: Remaining data too small for BSON object");
    raw_free(&raw);

    /* Three stray bytes where a selector would start. */
    build_op_query(&raw, 0, "admin.$cmd", 0, -1, query, NULL);
    raw_bytes(&raw, "\x01\x02\x03", 3);
    raw_finish(&raw, 1, 0, WIRE_OP_QUERY);
    assert_false(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, 22, "Remaining data too small");
    raw_free(&raw);

    /* A corrupted query document. */
    build_op_query(&raw, 0, "admin.$cmd", 0, -1, query, NULL);
    raw.data[raw.length - 1] = 9;
    assert_false(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, 22, "Client Error: bad object in message: BSON object not terminated");
    raw_free(&raw);

    build_op_query(&raw, 0, "admin.$cmd", 0, -1, query, NULL);
    raw_finish(&raw, 1, 0, WIRE_OP_MSG);
    assert_false(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_error(&error, TC_ERR_ILLEGAL_OPERATION, "is not an OP_QUERY");
    raw_free(&raw);
    bson_destroy(query);
}

/* An OP_QUERY on a namespace other than "<db>.$cmd" (a legacy find) is answered as
 * mongod 6.0 does: QueryFailure and {$err, code: 5739101, ok: 0}, from the name
 * alone even when the rest of the message is bad. */
static void test_op_query_not_a_command_is_removed(void **state)
{
    (void)state;
    bson_t *query = BCON_NEW("a", BCON_INT32(1));
    raw_t raw;
    wire_op_query_t parsed;
    bson_error_t error;
    const char *removed[] = {"test.items", "test.items.$cmd", "items", "test.$cmdx"};
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) {
        build_op_query(&raw, 0, removed[i], 0, 0, query, NULL);
        assert_true(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
        assert_true(wire_op_query_is_removed(&parsed));
        raw_free(&raw);
    }
    build_op_query(&raw, 0, "admin.$cmd", 0, -1, query, NULL);
    assert_true(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_false(wire_op_query_is_removed(&parsed));
    raw_free(&raw);

    /* The name was read, then the message ran out. */
    raw_begin(&raw);
    raw_int32(&raw, 0);
    raw_cstring(&raw, "test.items");
    raw_finish(&raw, 1, 0, WIRE_OP_QUERY);
    assert_false(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_true(wire_op_query_is_removed(&parsed));
    raw_free(&raw);
    /* No name at all: nothing to tell. */
    raw_begin(&raw);
    raw_int32(&raw, 0);
    raw_bytes(&raw, "test.items", 10);
    raw_finish(&raw, 1, 0, WIRE_OP_QUERY);
    assert_false(wire_op_query_parse(raw.data, raw.length, &parsed, &error));
    assert_false(wire_op_query_is_removed(&parsed));
    raw_free(&raw);

    uint8_t *message;
    size_t length;
    assert_true(wire_op_query_removed_reply_build(0, 42, &message, &length, &error));
    bson_t *expected = BCON_NEW("$err", BCON_UTF8("OP_QUERY is no longer supported. The client driver may require an "
                                                  "upgrade. For more details see "
                                                  "https://dochub.mongodb.org/core/legacy-opcode-removal"),
                                "code", BCON_INT32(5739101), "ok", BCON_DOUBLE(0));
    assert_one_document_reply(message, length, 42, WIRE_REPLY_FLAG_QUERY_FAILURE, expected);
    bson_destroy(expected);
    bson_free(message);
    bson_destroy(query);
}

static void test_op_query_command_plain(void **state)
{
    (void)state;
    bson_t *query = BCON_NEW("isMaster", BCON_INT32(1), "helloOk", BCON_BOOL(true));
    bson_t command;
    bson_error_t error;
    assert_true(query_command(0, "admin.$cmd", -1, query, &command, &error));
    bson_t *expected = BCON_NEW("isMaster", BCON_INT32(1), "helloOk", BCON_BOOL(true), "$db",
                                BCON_UTF8("admin"));
    assert_command_is(&command, expected);
    bson_destroy(&command);
    bson_destroy(expected);

    /* numberToReturn 1 is accepted too. */
    assert_true(query_command(0, "test.$cmd", 1, query, &command, &error));
    bson_iter_t iter;
    assert_true(bson_iter_init_find(&iter, &command, "$db"));
    assert_string_equal(bson_iter_utf8(&iter, NULL), "test");
    bson_destroy(&command);
    bson_destroy(query);
}

static void test_op_query_command_unwraps_query(void **state)
{
    (void)state;
    bson_t *query = BCON_NEW("$query", "{", "count", BCON_UTF8("c"), "query", "{", "a",
                             BCON_INT32(1), "}", "}", "$readPreference", "{", "mode",
                             BCON_UTF8("primaryPreferred"), "}");
    bson_t command;
    bson_error_t error;
    assert_true(query_command(0, "test.$cmd", -1, query, &command, &error));
    bson_t *expected = BCON_NEW("count", BCON_UTF8("c"), "query", "{", "a", BCON_INT32(1), "}",
                                "$readPreference", "{", "mode", BCON_UTF8("primaryPreferred"),
                                "}", "$db", BCON_UTF8("test"));
    assert_command_is(&command, expected);
    bson_destroy(&command);
    bson_destroy(expected);
    bson_destroy(query);

    /* "query" (without $) wraps just the same; no read preference, none added. */
    query = BCON_NEW("query", "{", "ping", BCON_INT32(1), "}");
    assert_true(query_command(0, "admin.$cmd", -1, query, &command, &error));
    expected = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    assert_command_is(&command, expected);
    bson_destroy(&command);
    bson_destroy(expected);

    /* With secondaryOk and no read preference, secondaryPreferred is added. */
    assert_true(query_command(WIRE_QUERY_FLAG_SECONDARY_OK, "admin.$cmd", -1, query, &command,
                              &error));
    expected = BCON_NEW("ping", BCON_INT32(1), "$readPreference", "{", "mode",
                        BCON_UTF8("secondaryPreferred"), "}", "$db", BCON_UTF8("admin"));
    assert_command_is(&command, expected);
    bson_destroy(&command);
    bson_destroy(expected);
    bson_destroy(query);

    /* An explicit read preference wins over the flag. */
    query = BCON_NEW("ping", BCON_INT32(1), "$readPreference", "{", "mode", BCON_UTF8("nearest"),
                     "}");
    assert_true(query_command(WIRE_QUERY_FLAG_SECONDARY_OK, "admin.$cmd", -1, query, &command,
                              &error));
    expected = BCON_NEW("ping", BCON_INT32(1), "$readPreference", "{", "mode",
                        BCON_UTF8("nearest"), "}", "$db", BCON_UTF8("admin"));
    assert_command_is(&command, expected);
    bson_destroy(&command);
    bson_destroy(expected);
    bson_destroy(query);

    /* $queryOptions is lifted: its fields follow the command. */
    query = BCON_NEW("ping", BCON_INT32(1), "$queryOptions", "{", "$readPreference", "{", "mode",
                     BCON_UTF8("secondary"), "}", "}");
    assert_true(query_command(0, "admin.$cmd", -1, query, &command, &error));
    expected = BCON_NEW("ping", BCON_INT32(1), "$readPreference", "{", "mode",
                        BCON_UTF8("secondary"), "}", "$db", BCON_UTF8("admin"));
    assert_command_is(&command, expected);
    bson_destroy(&command);
    bson_destroy(expected);
    bson_destroy(query);
}

static void test_op_query_command_refusals(void **state)
{
    (void)state;
    bson_t command;
    bson_error_t error;
    bson_t *ping = BCON_NEW("ping", BCON_INT32(1));

    assert_false(query_command(WIRE_QUERY_FLAG_EXHAUST, "admin.$cmd", -1, ping, &command, &error));
    assert_error(&error, TC_ERR_LOCATION_EXHAUST_COMMAND,
                 "The 'exhaust' OP_QUERY flag is invalid for commands: admin.$cmd");
    bson_destroy(&command);

    assert_false(query_command(0, "test.people", -1, ping, &command, &error));
    assert_error(&error, TC_ERR_LOCATION_NOT_A_COMMAND_NAMESPACE,
                 "Trying to handle namespace test.people as a command");
    bson_destroy(&command);
    assert_false(query_command(0, "admin", -1, ping, &command, &error));
    assert_error(&error, 40473, NULL);
    bson_destroy(&command);
    assert_false(query_command(0, "a.b.$cmd", -1, ping, &command, &error));
    assert_error(&error, 40473, NULL);
    bson_destroy(&command);

    assert_false(query_command(0, "admin.$cmd", 0, ping, &command, &error));
    assert_error(&error, TC_ERR_LOCATION_BAD_COMMAND_NUMBER_TO_RETURN,
                 "Bad numberToReturn (0) for $cmd type ns - can only be 1 or -1");
    bson_destroy(&command);
    assert_false(query_command(0, "admin.$cmd", 2, ping, &command, &error));
    assert_error(&error, 16979, "(2)");
    bson_destroy(&command);

    assert_false(query_command(0, ".$cmd", -1, ping, &command, &error));
    assert_error(&error, TC_ERR_INVALID_NAMESPACE, NULL);
    bson_destroy(&command);

    bson_t *with_db = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    assert_false(query_command(0, "admin.$cmd", -1, with_db, &command, &error));
    assert_error(&error, TC_ERR_LOCATION_DB_IN_OP_QUERY, "$db is not allowed in OP_QUERY requests");
    bson_destroy(&command);
    bson_destroy(with_db);

    bson_t *max_time = BCON_NEW("$query", "{", "ping", BCON_INT32(1), "}", "$maxTimeMS",
                                BCON_INT32(10));
    assert_false(query_command(0, "admin.$cmd", -1, max_time, &command, &error));
    assert_error(&error, TC_ERR_INVALID_OPTIONS, "cannot use $maxTimeMS query option");
    bson_destroy(&command);
    bson_destroy(max_time);

    bson_t *scalar = BCON_NEW("$query", BCON_INT32(1));
    assert_false(query_command(0, "admin.$cmd", -1, scalar, &command, &error));
    assert_error(&error, TC_ERR_LOCATION_EXPECTED_OBJECT,
                 "invalid parameter: expected an object ($query)");
    bson_destroy(&command);
    bson_destroy(scalar);
    bson_destroy(ping);
}

/* ---- OP_REPLY ------------------------------------------------------------------- */

/* Only the handshake (and the commands mongod 6.0 still lets through) may come in
 * OP_QUERY; the rest is UnsupportedOpQueryCommand, answered as a command error in
 * an OP_REPLY flagged AwaitCapable, as mongod's LegacyReplyBuilder answers. */
static void test_op_query_check_command(void **state)
{
    (void)state;
    bson_error_t error;
    const char *allowed[] = {"hello",     "isMaster",  "ismaster",     "_isSelf",  "authenticate",
                             "buildinfo", "buildInfo", "saslContinue", "saslStart"};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        bson_t *query = BCON_NEW(allowed[i], BCON_INT32(1));
        bson_t command;
        assert_true(query_command(0, "admin.$cmd", -1, query, &command, &error));
        if (!wire_op_query_check_command(&command, &error)) {
            fail_msg("%s refused: %s", allowed[i], error.message);
        }
        bson_destroy(&command);
        bson_destroy(query);
    }
    /* Known commands, unknown ones, and near misses of the allowed names. */
    const char *refused[] = {"ping", "find", "insert", "logout", "noSuchCommand", "Hello", "ISMASTER", "isMaster2"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        bson_t *query = BCON_NEW("$query", "{", refused[i], BCON_INT32(1), "}");
        bson_t command;
        assert_true(query_command(0, "test.$cmd", -1, query, &command, &error));
        assert_false(wire_op_query_check_command(&command, &error));
        char expected[256];
        snprintf(expected, sizeof expected,
                 "Unsupported OP_QUERY command: %s. The client driver may require an upgrade. For more details see "
                 "https://dochub.mongodb.org/core/legacy-opcode-removal",
                 refused[i]);
        assert_error(&error, TC_ERR_UNSUPPORTED_OP_QUERY_COMMAND, NULL);
        assert_string_equal(error.message, expected);
        bson_destroy(&command);
        bson_destroy(query);
    }
    /* The name is the command's first field, wherever an allowed name appears later. */
    bson_t *later = BCON_NEW("ping", BCON_INT32(1), "isMaster", BCON_INT32(1));
    assert_false(wire_op_query_check_command(later, &error));
    assert_error(&error, 352, "command: ping.");
    bson_destroy(later);

    bson_t reply = BSON_INITIALIZER;
    tc_error_append_reply(&error, &reply);
    uint8_t *message;
    size_t length;
    assert_true(wire_op_reply_command_build(0, 77, &reply, &message, &length, &error));
    bson_t *expected = BCON_NEW("ok", BCON_DOUBLE(0), "errmsg",
                                BCON_UTF8("Unsupported OP_QUERY command: ping. The client driver may require an "
                                          "upgrade. For more details see "
                                          "https://dochub.mongodb.org/core/legacy-opcode-removal"),
                                "code", BCON_INT32(352), "codeName", BCON_UTF8("UnsupportedOpQueryCommand"));
    assert_one_document_reply(message, length, 77, WIRE_REPLY_FLAG_AWAIT_CAPABLE, expected);
    bson_destroy(expected);
    bson_free(message);
    bson_destroy(&reply);
}

/* A tier's OP_MSG reply to a forwarded OP_QUERY command goes back as the OP_REPLY
 * mongod would have sent: same body, same responseTo, AwaitCapable. */
static void test_op_reply_from_op_msg(void **state)
{
    (void)state;
    bson_t *body = BCON_NEW("version", BCON_UTF8("6.0.0"), "ok", BCON_DOUBLE(1));
    uint8_t *op_msg;
    size_t op_msg_length;
    bson_error_t error;
    assert_true(wire_op_msg_build(5, 31, 0, body, NULL, 0, &op_msg, &op_msg_length, &error));
    uint8_t *message;
    size_t length;
    assert_true(wire_op_reply_from_op_msg(op_msg, op_msg_length, &message, &length, &error));
    assert_int_equal(wire_message_opcode(message), WIRE_OP_REPLY);
    assert_one_document_reply(message, length, 31, WIRE_REPLY_FLAG_AWAIT_CAPABLE, body);
    bson_free(message);
    /* A cut reply is refused, not read past its end. */
    assert_false(wire_op_reply_from_op_msg(op_msg, op_msg_length - 1, &message, &length, &error));
    bson_free(op_msg);
    bson_destroy(body);
}

static void test_op_reply_round_trip(void **state)
{
    (void)state;
    bson_t *first = BCON_NEW("ismaster", BCON_BOOL(true), "ok", BCON_DOUBLE(1));
    bson_t *second = BCON_NEW("x", BCON_NULL);
    const bson_t *documents[] = {first, second};
    uint8_t *message;
    size_t length;
    bson_error_t error;
    assert_true(wire_op_reply_build(100, 11, WIRE_REPLY_FLAG_AWAIT_CAPABLE, 0x0102030405060708,
                                    3, documents, 2, &message, &length, &error));
    assert_int_equal(length, 36 + first->len + second->len);

    wire_op_reply_t reply;
    assert_true(wire_op_reply_parse(message, length, &reply, &error));
    assert_int_equal(reply.header.opcode, WIRE_OP_REPLY);
    assert_int_equal(reply.header.request_id, 100);
    assert_int_equal(reply.header.response_to, 11);
    assert_int_equal(reply.response_flags, WIRE_REPLY_FLAG_AWAIT_CAPABLE);
    assert_int_equal(reply.cursor_id, 0x0102030405060708);
    assert_int_equal(reply.starting_from, 3);
    assert_int_equal(reply.number_returned, 2);
    assert_int_equal(reply.documents.count, 2);
    wire_documents_iter_t iter;
    bson_t document;
    wire_documents_iter_init(&iter, &reply.documents);
    assert_true(wire_documents_iter_next(&iter, &document));
    assert_true(bson_equal(&document, first));
    assert_true(wire_documents_iter_next(&iter, &document));
    assert_true(bson_equal(&document, second));
    assert_false(wire_documents_iter_next(&iter, &document));

    assert_every_truncation_fails(message, length, 0);
    assert_byte_corruption_is_safe(message, length);

    /* numberReturned must match what is there. */
    wire_store_int32(message + 32, 3);
    assert_false(wire_op_reply_parse(message, length, &reply, &error));
    assert_error(&error, TC_ERR_PROTOCOL_ERROR, "numberReturned is 3 but the message holds 2");
    wire_store_int32(message + 32, -1);
    assert_false(wire_op_reply_parse(message, length, &reply, &error));
    assert_error(&error, 17, NULL);
    bson_free(message);

    assert_true(wire_op_reply_build(1, 2, 0, 0, 0, NULL, 0, &message, &length, &error));
    assert_int_equal(length, 36);
    assert_true(wire_op_reply_parse(message, length, &reply, &error));
    assert_int_equal(reply.documents.count, 0);
    wire_documents_iter_init(&iter, &reply.documents);
    assert_false(wire_documents_iter_next(&iter, &document));
    bson_free(message);
    bson_destroy(second);
    bson_destroy(first);
}

/* ---- OP_COMPRESSED --------------------------------------------------------------- */

static void build_sample_op_msg(uint8_t **out_message, size_t *out_length, uint32_t flags)
{
    bson_t *body = BCON_NEW("insert", BCON_UTF8("c"), "$db", BCON_UTF8("test"));
    bson_t *item = BCON_NEW("text", BCON_UTF8("compress me compress me compress me compress me"));
    const bson_t *items[] = {item, item, item};
    wire_sequence_input_t sequence = {"documents", items, 3};
    bson_error_t error;
    assert_true(
        wire_op_msg_build(21, 4, flags, body, &sequence, 1, out_message, out_length, &error));
    bson_destroy(item);
    bson_destroy(body);
}

static void test_compression_round_trip(void **state)
{
    (void)state;
    uint8_t *original;
    size_t original_length;
    build_sample_op_msg(&original, &original_length, WIRE_MSG_FLAG_CHECKSUM_PRESENT);
    const uint8_t compressors[] = {WIRE_COMPRESSOR_NOOP, WIRE_COMPRESSOR_SNAPPY,
                                   WIRE_COMPRESSOR_ZLIB};
    for (size_t i = 0; i < sizeof compressors; i++) {
        uint8_t *compressed;
        size_t compressed_length;
        bson_error_t error;
        assert_true(wire_compress(original, original_length, compressors[i], &compressed,
                                  &compressed_length, &error));
        wire_header_t header;
        assert_true(wire_request_header_parse(compressed, compressed_length, &header, &error));
        assert_int_equal(header.opcode, WIRE_OP_COMPRESSED);
        assert_int_equal(header.request_id, 21);
        assert_int_equal(header.response_to, 4);
        assert_int_equal(wire_load_int32(compressed + 16), WIRE_OP_MSG);
        assert_int_equal(wire_load_int32(compressed + 20), (int32_t)original_length - 16);
        assert_int_equal(compressed[24], compressors[i]);
        if (compressors[i] != WIRE_COMPRESSOR_NOOP) {
            assert_true(compressed_length < original_length);
        }

        uint8_t *restored;
        size_t restored_length;
        uint8_t used = 0xEE;
        assert_true(wire_decompress(compressed, compressed_length, &restored, &restored_length,
                                    &used, &error));
        assert_int_equal(used, compressors[i]);
        assert_int_equal(restored_length, original_length);
        assert_memory_equal(restored, original, original_length);
        wire_op_msg_t parsed;
        assert_true(wire_op_msg_parse(restored, restored_length, &parsed, &error));
        assert_int_equal(parsed.sequences[0].documents.count, 3);
        bson_free(restored);

        assert_every_truncation_fails(compressed, compressed_length, 0);
        assert_byte_corruption_is_safe(compressed, compressed_length);
        bson_free(compressed);
    }
    bson_free(original);
}

static void test_compression_of_op_reply_and_large_message(void **state)
{
    (void)state;
    /* A 1 MB repetitive reply shrinks a lot and survives the trip. */
    size_t size = 1024 * 1024;
    char *text = malloc(size + 1);
    assert_non_null(text);
    for (size_t i = 0; i < size; i++) {
        text[i] = (char)('a' + i % 7);
    }
    text[size] = '\0';
    bson_t *document = BCON_NEW("text", BCON_UTF8(text));
    free(text);
    const bson_t *documents[] = {document};
    uint8_t *reply;
    size_t reply_length;
    bson_error_t error;
    assert_true(wire_op_reply_build(1, 2, 0, 0, 0, documents, 1, &reply, &reply_length, &error));
    const uint8_t compressors[] = {WIRE_COMPRESSOR_SNAPPY, WIRE_COMPRESSOR_ZLIB};
    for (size_t i = 0; i < sizeof compressors; i++) {
        uint8_t *compressed;
        size_t compressed_length;
        assert_true(wire_compress(reply, reply_length, compressors[i], &compressed,
                                  &compressed_length, &error));
        assert_true(compressed_length < reply_length / 10);
        uint8_t *restored;
        size_t restored_length;
        assert_true(wire_decompress(compressed, compressed_length, &restored, &restored_length,
                                    NULL, &error));
        assert_int_equal(restored_length, reply_length);
        assert_memory_equal(restored, reply, reply_length);
        bson_free(restored);
        bson_free(compressed);
    }
    bson_free(reply);
    bson_destroy(document);
}

/* Builds an OP_COMPRESSED around payload with the given declared fields. */
static void build_compressed(raw_t *raw, int32_t original_opcode, int32_t uncompressed_size,
                             uint8_t compressor_id, const void *payload, size_t payload_length)
{
    raw_begin(raw);
    raw_int32(raw, original_opcode);
    raw_int32(raw, uncompressed_size);
    raw_byte(raw, compressor_id);
    raw_bytes(raw, payload, payload_length);
    raw_finish(raw, 5, 0, WIRE_OP_COMPRESSED);
}

static void assert_decompress_fails(const raw_t *raw, int32_t code, const char *fragment)
{
    uint8_t *copy = exact_copy(raw->data, raw->length);
    uint8_t *restored = NULL;
    size_t restored_length = 0;
    bson_error_t error;
    assert_false(wire_decompress(copy, raw->length, &restored, &restored_length, NULL, &error));
    assert_null(restored);
    assert_error(&error, code, fragment);
    free(copy);
}

static void test_decompression_refusals(void **state)
{
    (void)state;
    uint8_t *original;
    size_t original_length;
    build_sample_op_msg(&original, &original_length, 0);
    const uint8_t *data = original + 16;
    size_t data_length = original_length - 16;
    raw_t raw;

    build_compressed(&raw, WIRE_OP_MSG, (int32_t)data_length, WIRE_COMPRESSOR_ZSTD, data,
                     data_length);
    assert_decompress_fails(&raw, TC_ERR_INTERNAL,
                            "Compression algorithm specified in message is not available");
    raw_free(&raw);
    build_compressed(&raw, WIRE_OP_MSG, (int32_t)data_length, 9, data, data_length);
    assert_decompress_fails(&raw, TC_ERR_INTERNAL, "not available");
    raw_free(&raw);

    const int32_t huge_sizes[] = {100 * 1024 * 1024, WIRE_MAX_MESSAGE_SIZE - 15, INT32_MAX, -1,
                                  INT32_MIN};
    for (size_t i = 0; i < sizeof huge_sizes / sizeof huge_sizes[0]; i++) {
        build_compressed(&raw, WIRE_OP_MSG, huge_sizes[i], WIRE_COMPRESSOR_NOOP, data,
                         data_length);
        assert_decompress_fails(&raw, TC_ERR_BAD_VALUE,
                                "Decompressed message would be larger than maximum message size");
        raw_free(&raw);
    }

    /* The declared size must be what decompression produces, for every compressor. */
    const uint8_t compressors[] = {WIRE_COMPRESSOR_NOOP, WIRE_COMPRESSOR_SNAPPY,
                                   WIRE_COMPRESSOR_ZLIB};
    for (size_t i = 0; i < sizeof compressors; i++) {
        uint8_t *compressed;
        size_t compressed_length;
        bson_error_t error;
        assert_true(wire_compress(original, original_length, compressors[i], &compressed,
                                  &compressed_length, &error));
        const int32_t deltas[] = {-1, 1, -(int32_t)data_length};
        for (size_t d = 0; d < sizeof deltas / sizeof deltas[0]; d++) {
            uint8_t *copy = exact_copy(compressed, compressed_length);
            wire_store_int32(copy + 20, (int32_t)data_length + deltas[d]);
            uint8_t *restored = NULL;
            size_t restored_length;
            assert_false(wire_decompress(copy, compressed_length, &restored, &restored_length,
                                         NULL, &error));
            assert_error(&error, TC_ERR_BAD_VALUE, NULL);
            free(copy);
        }
        bson_free(compressed);
    }

    /* Garbage instead of compressed data. */
    build_compressed(&raw, WIRE_OP_MSG, 100, WIRE_COMPRESSOR_SNAPPY, "\xFF\xFF\xFF\xFF", 4);
    assert_decompress_fails(&raw, TC_ERR_BAD_VALUE, "Compressed message was invalid or corrupted");
    raw_free(&raw);
    build_compressed(&raw, WIRE_OP_MSG, 100, WIRE_COMPRESSOR_ZLIB, "\x78\x9c\xFF\xFF", 4);
    assert_decompress_fails(&raw, TC_ERR_BAD_VALUE, "Compressed message was invalid or corrupted");
    raw_free(&raw);

    /* A compressed message may not hold another. */
    build_compressed(&raw, WIRE_OP_COMPRESSED, (int32_t)data_length, WIRE_COMPRESSOR_NOOP, data,
                     data_length);
    assert_decompress_fails(&raw, TC_ERR_ILLEGAL_OPERATION, "Message type 2012 is not supported.");
    raw_free(&raw);

    /* Too short for originalOpcode, uncompressedSize and compressorId. */
    raw_begin(&raw);
    raw_int32(&raw, WIRE_OP_MSG);
    raw_int32(&raw, 10);
    raw_finish(&raw, 1, 0, WIRE_OP_COMPRESSED);
    assert_decompress_fails(&raw, TC_ERR_BAD_VALUE, "Invalid compressed message header");
    raw_free(&raw);

    /* Not an OP_COMPRESSED at all. */
    raw_begin(&raw);
    raw_bytes(&raw, original + 16, original_length - 16);
    raw_finish(&raw, 1, 0, WIRE_OP_MSG);
    assert_decompress_fails(&raw, TC_ERR_ILLEGAL_OPERATION, "is not an OP_COMPRESSED");
    raw_free(&raw);

    /* An empty noop payload is a valid (if useless) zero-byte body. */
    build_compressed(&raw, WIRE_OP_MSG, 0, WIRE_COMPRESSOR_NOOP, "", 0);
    uint8_t *restored;
    size_t restored_length;
    bson_error_t error;
    assert_true(wire_decompress(raw.data, raw.length, &restored, &restored_length, NULL, &error));
    assert_int_equal(restored_length, 16);
    bson_free(restored);
    raw_free(&raw);
    bson_free(original);
}

static void test_compression_refusals(void **state)
{
    (void)state;
    uint8_t *original;
    size_t original_length;
    build_sample_op_msg(&original, &original_length, 0);
    uint8_t *compressed = NULL;
    size_t compressed_length;
    bson_error_t error;
    assert_false(wire_compress(original, original_length, WIRE_COMPRESSOR_ZSTD, &compressed,
                               &compressed_length, &error));
    assert_error(&error, TC_ERR_BAD_VALUE, "Compressor id 3 is not supported");
    assert_null(compressed);

    assert_true(wire_compress(original, original_length, WIRE_COMPRESSOR_ZLIB, &compressed,
                              &compressed_length, &error));
    uint8_t *twice = NULL;
    size_t twice_length;
    assert_false(wire_compress(compressed, compressed_length, WIRE_COMPRESSOR_ZLIB, &twice,
                               &twice_length, &error));
    assert_error(&error, TC_ERR_BAD_VALUE, "Cannot compress an OP_COMPRESSED message");
    assert_false(wire_compress(original, original_length - 1, WIRE_COMPRESSOR_ZLIB, &twice,
                               &twice_length, &error));
    assert_error(&error, TC_ERR_PROTOCOL_ERROR, NULL);
    bson_free(compressed);
    bson_free(original);
}

/* Cursor ids are positive and never 0, even when rand() and the clock would
 * combine to 0 or to a negative number. */
static void test_cursor_ids_are_positive(void **state)
{
    (void)state;
    for (int attempt = 0; attempt < 10000; attempt++) {
        int64_t now_ms = attempt % 2 == 0 ? INT64_MAX : attempt;
        assert_true(wire_cursor_id_random(now_ms) > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test(test_crc32c_hardware_matches_software),
        cmocka_unit_test(test_frame_check),
        cmocka_unit_test(test_header_parse),
        cmocka_unit_test(test_op_msg_round_trip),
        cmocka_unit_test(test_op_msg_flags_round_trip),
        cmocka_unit_test(test_op_msg_sequences_merge_into_command),
        cmocka_unit_test(test_op_msg_empty_sequence),
        cmocka_unit_test(test_op_msg_checksum),
        cmocka_unit_test(test_op_msg_checksum_needs_room),
        cmocka_unit_test(test_op_msg_flag_bits),
        cmocka_unit_test(test_op_msg_malformed),
        cmocka_unit_test(test_op_msg_sequence_path_not_shadowed),
        cmocka_unit_test(test_op_msg_wrong_opcode),
        cmocka_unit_test(test_op_msg_find_body_skips_sequences),
        cmocka_unit_test(test_op_msg_nesting_depth),
        cmocka_unit_test(test_op_msg_every_bson_type),
        cmocka_unit_test(test_op_msg_code_with_scope_size_lies),
        cmocka_unit_test(test_op_msg_nul_inside_code_or_dbpointer),
        cmocka_unit_test(test_op_msg_size_limits),
        cmocka_unit_test(test_op_msg_truncations_and_corruption),
        cmocka_unit_test(test_builders_match_documented_layout),
        cmocka_unit_test(test_op_query_parse),
        cmocka_unit_test(test_op_query_malformed),
        cmocka_unit_test(test_op_query_not_a_command_is_removed),
        cmocka_unit_test(test_op_query_command_plain),
        cmocka_unit_test(test_op_query_command_unwraps_query),
        cmocka_unit_test(test_op_query_command_refusals),
        cmocka_unit_test(test_op_query_check_command),
        cmocka_unit_test(test_op_reply_round_trip),
        cmocka_unit_test(test_op_reply_from_op_msg),
        cmocka_unit_test(test_compression_round_trip),
        cmocka_unit_test(test_compression_of_op_reply_and_large_message),
        cmocka_unit_test(test_decompression_refusals),
        cmocka_unit_test(test_compression_refusals),
        cmocka_unit_test(test_cursor_ids_are_positive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
