/* Helpers the libFuzzer targets share: cutting an input into BSON documents checked
 * the way the server checks every document it receives, a fixed set of awkward
 * documents to run compiled queries against, and the server's message dispatch
 * (framing, OP_COMPRESSED, OP_MSG, OP_QUERY) as one function. */
#ifndef TC_TESTS_FUZZ_COMMON_H
#define TC_TESTS_FUZZ_COMMON_H

/* The fuzzers feed the query engine only documents that passed the wire layer's
 * validator, as the server does; that validator is private to src/wire. */
#include "wire/wire_private.h"

#include <stdio.h>
#include <stdlib.h>

/* A fuzzer found a broken invariant: print why and abort, so libFuzzer keeps the
 * input as a crash. */
#define FUZZ_REQUIRE(condition, ...)                                                       \
    do {                                                                                   \
        if (!(condition)) {                                                                \
            fprintf(stderr, "fuzz invariant broken at %s:%d: %s: ", __FILE__, __LINE__,    \
                    #condition);                                                           \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* Documents cut from the front of an input. The bson_t values borrow the input. */
typedef struct fuzz_reader {
    const uint8_t *data;
    size_t remaining;
} fuzz_reader_t;

static inline void fuzz_reader_init(fuzz_reader_t *reader, const uint8_t *data, size_t size)
{
    reader->data = data;
    reader->remaining = size;
}

/* Takes the next document: its first 4 bytes (its BSON length) say where it ends.
 * False when the bytes there are not one valid document as the server would accept
 * it (the reader stays put then). */
static inline bool fuzz_reader_document(fuzz_reader_t *reader, bson_t *out_document)
{
    size_t length = 0;
    bson_error_t error;
    if (!wire_document_load(reader->data, reader->remaining, out_document, &length, &error)) {
        return false;
    }
    reader->data += length;
    reader->remaining -= length;
    return true;
}

/* Every document the code under test builds must pass the check the server applies
 * to what it receives (wire_bson_check: mongod's validateBSON, and UTF-8 field names,
 * which libbson's iterator needs): a field name made from a string value ($count,
 * includeArrayIndex, $setField, $rename) must be one the server would accept. */
static inline void fuzz_require_valid(const bson_t *document, const char *what)
{
    size_t length = 0;
    bson_error_t error;
    FUZZ_REQUIRE(wire_bson_check(bson_get_data(document), document->len, &length, &error) &&
                     length == document->len,
                 "%s is invalid BSON: %s", what, error.message);
}

/* Whether code that rebuilds a value from its parts (updates, index key values) can
 * give back the same bytes: libbson rewrites regex options when it appends a regex
 * (sorted, only "ilmsux"), and rebuilt arrays are named "0", "1", ... whatever the
 * original names were. Checks that compare such copies byte for byte, or rely on
 * array names, skip values that are not canonical in this sense. */
static inline bool fuzz_value_is_canonical(const bson_value_t *value)
{
    const uint8_t *data = NULL;
    uint32_t length = 0;
    bool is_array = value->value_type == BSON_TYPE_ARRAY;
    switch (value->value_type) {
    case BSON_TYPE_REGEX: {
        const char *options = value->value.v_regex.options ? value->value.v_regex.options : "";
        char canonical[8];
        size_t count = 0;
        for (const char *flag = "ilmsux"; *flag; flag++) {
            if (strchr(options, *flag)) {
                canonical[count++] = *flag;
            }
        }
        canonical[count] = '\0';
        return strcmp(options, canonical) == 0;
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        data = value->value.v_doc.data;
        length = value->value.v_doc.data_len;
        break;
    case BSON_TYPE_CODEWSCOPE:
        data = value->value.v_codewscope.scope_data;
        length = value->value.v_codewscope.scope_len;
        break;
    default:
        return true;
    }
    bson_iter_t iter;
    if (!bson_iter_init_from_data(&iter, data, length)) {
        return false;
    }
    for (uint32_t index = 0; bson_iter_next(&iter); index++) {
        char expected[16];
        snprintf(expected, sizeof expected, "%u", index);
        if ((is_array && strcmp(bson_iter_key(&iter), expected) != 0) ||
            !fuzz_value_is_canonical(bson_iter_value(&iter))) {
            return false;
        }
    }
    return true;
}

static inline bool fuzz_is_canonical(const bson_t *document)
{
    bson_value_t value = {.value_type = BSON_TYPE_DOCUMENT};
    value.value.v_doc.data = (uint8_t *)bson_get_data(document);
    value.value.v_doc.data_len = document->len;
    return fuzz_value_is_canonical(&value);
}

/* Awkward documents every compiled filter, update, pipeline and key pattern is also
 * run against: null and missing, nested arrays, every BSON type, numbers that are
 * equal across types, odd field names. Built once, kept for the process. */
static const char *const fuzz_fixed_json[] = {
    "{}",
    "{\"_id\": 1, \"a\": 1, \"b\": 2}",
    "{\"_id\": {\"$oid\": \"5f1e9d7c8a3b4c5d6e7f8091\"}, \"a\": null, \"b\": [null]}",
    "{\"a\": [1, 2, [3, 4], {\"b\": 5}], \"b\": [], \"c\": [[]]}",
    "{\"a\": {\"b\": {\"c\": [1, {\"d\": 2}, {\"d\": [3, null]}]}}, \"x\": {}}",
    "{\"a\": [{\"b\": 1, \"c\": [1, 2]}, {\"b\": [2, 3]}, {\"b\": null}, {}], \"b\": {\"0\": 7}}",
    ("{\"a\": \"abc\", \"b\": {\"$numberDecimal\": \"1.50\"}, \"c\": {\"$numberLong\": "
     "\"9007199254740993\"}, \"d\": {\"$numberDouble\": \"NaN\"}, \"e\": {\"$numberDouble\": "
     "\"-0.0\"}, \"f\": {\"$numberDouble\": \"Infinity\"}, \"g\": {\"$numberDecimal\": "
     "\"-Infinity\"}, \"h\": 2147483647, \"i\": {\"$numberLong\": \"-9223372036854775808\"}}"),
    ("{\"a\": {\"$date\": {\"$numberLong\": \"1700000000000\"}}, \"b\": true, \"c\": "
     "{\"$regularExpression\": {\"pattern\": \"^a.*b$\", \"options\": \"imsx\"}}, \"d\": "
     "{\"$binary\": {\"base64\": \"AAEC\", \"subType\": \"00\"}}, \"e\": {\"$minKey\": 1}, \"f\": "
     "{\"$maxKey\": 1}, \"g\": {\"$timestamp\": {\"t\": 1, \"i\": 2}}, \"h\": {\"$undefined\": "
     "true}, \"i\": {\"$code\": \"x\"}, \"j\": {\"$symbol\": \"s\"}, \"k\": {\"$binary\": "
     "{\"base64\": \"EjRWeBI0VniQq83vEjRWeA==\", \"subType\": \"04\"}}}"),
    "{\"0\": 1, \"a\": {\"0\": \"x\", \"1\": [\"y\", {\"0\": 2}]}, \"a.b\": 2, \"$x\": 3, \"\": 4}",
    ("{\"_id\": 7, \"items\": [{\"sku\": \"A\", \"qty\": 2, \"price\": 9.5}, {\"sku\": \"B\", "
     "\"qty\": 0}], \"status\": \"shipped\", \"tags\": [\"red\", \"blue\", \"red\"], "
     "\"customer\": {\"name\": \"Ann\", \"age\": 34}, \"total\": {\"$numberDecimal\": \"19.00\"}}"),
    ("{\"a\": [[1, 2], [3, [4, 5]]], \"b\": [{\"c\": [{\"d\": 1}]}, {\"c\": {\"d\": [2]}}], "
     "\"s\": \"\\u00e9t\\u00e9 \\ud83d\\ude00\"}"),
};

#define FUZZ_FIXED_COUNT (sizeof fuzz_fixed_json / sizeof fuzz_fixed_json[0])

static inline const bson_t *fuzz_fixed_document(size_t index)
{
    static bson_t *documents[FUZZ_FIXED_COUNT];
    if (documents[index] == NULL) {
        bson_error_t error;
        documents[index] =
            bson_new_from_json((const uint8_t *)fuzz_fixed_json[index], -1, &error);
        FUZZ_REQUIRE(documents[index] != NULL, "fixed document %zu: %s", index, error.message);
    }
    return documents[index];
}

/* ---- Messages, as the store's dispatch_message takes them apart ----------------- */

/* Parses an OP_MSG every way the store and the proxy do, and checks that building it
 * again gives a message that parses to the same command. */
static inline void fuzz_op_msg(const uint8_t *message, size_t length)
{
    bson_error_t error;
    bson_t body;
    bool found_body = wire_op_msg_find_body(message, length, &body, &error);

    wire_op_msg_t parsed;
    if (!wire_op_msg_parse(message, length, &parsed, &error)) {
        return;
    }
    FUZZ_REQUIRE(found_body, "the proxy's body lookup failed on a valid OP_MSG: %s",
                 error.message);
    FUZZ_REQUIRE(body.len == parsed.body.len &&
                     memcmp(bson_get_data(&body), bson_get_data(&parsed.body), body.len) == 0,
                 "the proxy found another body than the parser");

    bson_t command;
    bool merged = wire_op_msg_command(&parsed, &command, &error);
    if (merged) {
        fuzz_require_valid(&command, "OP_MSG command");
    }

    /* Rebuild: sequences first, body last, a fresh checksum when it had one. */
    wire_sequence_input_t sequences[WIRE_MAX_DOCUMENT_SEQUENCES];
    bson_t *documents[WIRE_MAX_DOCUMENT_SEQUENCES] = {NULL};
    const bson_t **pointers[WIRE_MAX_DOCUMENT_SEQUENCES] = {NULL};
    for (size_t i = 0; i < parsed.sequence_count; i++) {
        size_t count = parsed.sequences[i].documents.count;
        /* bson_t asks for 128-byte alignment, which malloc does not give. */
        documents[i] = bson_aligned_alloc0(BSON_ALIGNOF(bson_t), (count + 1) * sizeof(bson_t));
        pointers[i] = bson_malloc0((count + 1) * sizeof(bson_t *));
        wire_documents_iter_t iter;
        wire_documents_iter_init(&iter, &parsed.sequences[i].documents);
        size_t n = 0;
        while (n < count && wire_documents_iter_next(&iter, &documents[i][n])) {
            pointers[i][n] = &documents[i][n];
            n++;
        }
        FUZZ_REQUIRE(n == count && !wire_documents_iter_next(&iter, &documents[i][n]),
                     "sequence %zu: iterated %zu documents, parser counted %zu", i, n, count);
        sequences[i].identifier = parsed.sequences[i].identifier;
        sequences[i].documents = (const bson_t *const *)pointers[i];
        sequences[i].document_count = count;
    }
    uint8_t *rebuilt = NULL;
    size_t rebuilt_length = 0;
    if (wire_op_msg_build(parsed.header.request_id, parsed.header.response_to, parsed.flags,
                          &parsed.body, sequences, parsed.sequence_count, &rebuilt,
                          &rebuilt_length, &error)) {
        wire_op_msg_t reparsed;
        FUZZ_REQUIRE(wire_op_msg_parse(rebuilt, rebuilt_length, &reparsed, &error),
                     "a rebuilt OP_MSG does not parse: %s", error.message);
        bson_t command_again;
        bool merged_again = wire_op_msg_command(&reparsed, &command_again, &error);
        FUZZ_REQUIRE(merged == merged_again, "rebuilt OP_MSG merges differently");
        FUZZ_REQUIRE(!merged || bson_equal(&command, &command_again),
                     "rebuilt OP_MSG gives another command");
        bson_destroy(&command_again);

        /* The proxy renumbers requests in place; a checksum must follow. */
        int32_t renumbered = (int32_t)((uint32_t)parsed.header.request_id + 1);
        wire_message_set_request_id(rebuilt, rebuilt_length, renumbered);
        wire_message_set_response_to(rebuilt, rebuilt_length, 77);
        FUZZ_REQUIRE(wire_message_request_id(rebuilt) == renumbered &&
                         wire_message_response_to(rebuilt) == 77,
                     "header patch lost");
        FUZZ_REQUIRE(wire_op_msg_parse(rebuilt, rebuilt_length, &reparsed, &error),
                     "a renumbered OP_MSG does not parse: %s", error.message);
        bson_free(rebuilt);
    }
    for (size_t i = 0; i < parsed.sequence_count; i++) {
        bson_free(documents[i]);
        bson_free(pointers[i]);
    }
    bson_destroy(&command);
}

static inline void fuzz_op_query(const uint8_t *message, size_t length)
{
    bson_error_t error;
    wire_op_query_t query;
    if (!wire_op_query_parse(message, length, &query, &error)) {
        return;
    }
    bson_t command;
    if (wire_op_query_command(&query, &command, &error)) {
        fuzz_require_valid(&command, "OP_QUERY command");
        bson_iter_t iter;
        FUZZ_REQUIRE(bson_iter_init_find(&iter, &command, "$db") && BSON_ITER_HOLDS_UTF8(&iter),
                     "OP_QUERY command without $db");
    }
    bson_destroy(&command);
}

static inline void fuzz_op_reply(const uint8_t *message, size_t length)
{
    bson_error_t error;
    wire_op_reply_t reply;
    if (!wire_op_reply_parse(message, length, &reply, &error)) {
        return;
    }
    wire_documents_iter_t iter;
    wire_documents_iter_init(&iter, &reply.documents);
    bson_t document;
    size_t count = 0;
    while (wire_documents_iter_next(&iter, &document)) {
        count++;
    }
    FUZZ_REQUIRE(count == reply.documents.count, "OP_REPLY iterated %zu of %zu documents",
                 count, reply.documents.count);
}

/* One complete message (length as its header declares), the way the store's
 * dispatch_message takes it: header, then OP_COMPRESSED unwrapped once, then OP_MSG
 * or OP_QUERY. OP_REPLY, which only the proxy reads (from a server), too. */
static inline void fuzz_dispatch_message(const uint8_t *message, size_t length)
{
    bson_error_t error;
    wire_header_t header;
    if (length >= WIRE_HEADER_SIZE && wire_message_opcode(message) == WIRE_OP_REPLY) {
        fuzz_op_reply(message, length);
        return;
    }
    if (!wire_request_header_parse(message, length, &header, &error)) {
        return;
    }
    FUZZ_REQUIRE(wire_opcode_is_request(header.opcode) && (size_t)header.message_length == length,
                 "accepted header with opcode %d, length %d", header.opcode,
                 header.message_length);
    uint8_t *decompressed = NULL;
    if (header.opcode == WIRE_OP_COMPRESSED) {
        size_t decompressed_length = 0;
        uint8_t compressor = 0;
        if (!wire_decompress(message, length, &decompressed, &decompressed_length, &compressor,
                             &error)) {
            return;
        }
        message = decompressed;
        length = decompressed_length;
        if (!wire_request_header_parse(message, length, &header, &error)) {
            bson_free(decompressed);
            return;
        }
    }
    if (header.opcode == WIRE_OP_MSG) {
        fuzz_op_msg(message, length);
    } else if (header.opcode == WIRE_OP_QUERY) {
        fuzz_op_query(message, length);
    }
    bson_free(decompressed);
}

#endif
