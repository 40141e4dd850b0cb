/* The MongoDB wire protocol as pure functions on byte buffers, shared by the store
 * and the proxy: framing, header access, OP_MSG / OP_QUERY / OP_REPLY parsing and
 * building, CRC-32C checksums and OP_COMPRESSED. No sockets, no global state. */
#ifndef TC_WIRE_WIRE_H
#define TC_WIRE_WIRE_H

#include "common/error.h"

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits mongod advertises in hello and enforces. */
#define WIRE_MAX_BSON_OBJECT_SIZE 16777216
#define WIRE_MAX_MESSAGE_SIZE 48000000
#define WIRE_MAX_WRITE_BATCH_SIZE 100000
/* mongod's BSONObjMaxInternalSize (16 MB + 16 KB): the largest BSON object it will
 * load from a message, and the largest OP_MSG reply it will build. */
#define WIRE_MAX_BSON_INTERNAL_SIZE (16 * 1024 * 1024 + 16 * 1024)
/* mongod's BSONDepth::kDefaultMaxAllowableDepth: nesting deeper than this is refused. */
#define WIRE_MAX_BSON_DEPTH 200
/* mongod accepts at most this many kind-1 sections in one OP_MSG. */
#define WIRE_MAX_DOCUMENT_SEQUENCES 2

#define WIRE_HEADER_SIZE 16

enum {
    WIRE_OP_REPLY = 1,
    WIRE_OP_UPDATE = 2001,
    WIRE_OP_INSERT = 2002,
    WIRE_OP_QUERY = 2004,
    WIRE_OP_GET_MORE = 2005,
    WIRE_OP_DELETE = 2006,
    WIRE_OP_KILL_CURSORS = 2007,
    WIRE_OP_COMPRESSED = 2012,
    WIRE_OP_MSG = 2013,
};

/* OP_MSG flagBits. Bits 0-15 are "required": a receiver must refuse unknown ones. */
#define WIRE_MSG_FLAG_CHECKSUM_PRESENT (1u << 0)
#define WIRE_MSG_FLAG_MORE_TO_COME (1u << 1)
#define WIRE_MSG_FLAG_EXHAUST_ALLOWED (1u << 16)

/* OP_QUERY flags mongod looks at for commands. */
#define WIRE_QUERY_FLAG_SECONDARY_OK (1 << 2)
#define WIRE_QUERY_FLAG_EXHAUST (1 << 6)

/* OP_REPLY responseFlags. */
#define WIRE_REPLY_FLAG_CURSOR_NOT_FOUND (1 << 0)
#define WIRE_REPLY_FLAG_QUERY_FAILURE (1 << 1)
#define WIRE_REPLY_FLAG_AWAIT_CAPABLE (1 << 3)

/* OP_COMPRESSED compressorId. */
enum {
    WIRE_COMPRESSOR_NOOP = 0,
    WIRE_COMPRESSOR_SNAPPY = 1,
    WIRE_COMPRESSOR_ZLIB = 2,
    WIRE_COMPRESSOR_ZSTD = 3, /* recognised, never supported: refused */
};

typedef struct wire_header {
    int32_t message_length; /* header included */
    int32_t request_id;
    int32_t response_to;
    int32_t opcode;
} wire_header_t;

/* ---- Framing and headers ---------------------------------------------------- */

/* For the network layer: given the first 4 bytes of a message, stores its total
 * length if it lies in [WIRE_HEADER_SIZE, WIRE_MAX_MESSAGE_SIZE]; otherwise fails
 * with ProtocolError (17) as mongod does, and the connection should be closed. */
bool wire_frame_check(const uint8_t first_four_bytes[4], size_t *out_message_length,
                      bson_error_t *error) TC_MUST_CHECK;

/* Parses the header of one complete message: length must be exactly the
 * messageLength the header declares (and pass wire_frame_check). */
bool wire_header_parse(const uint8_t *message, size_t length, wire_header_t *out_header,
                       bson_error_t *error) TC_MUST_CHECK;

/* True for the opcodes mongod accepts from a client (OP_REPLY is not one). */
bool wire_opcode_is_request(int32_t opcode);

/* wire_header_parse plus "is this an opcode a client may send", failing with
 * IllegalOperation (20) "Message type N is not supported." as mongod does. */
bool wire_request_header_parse(const uint8_t *message, size_t length, wire_header_t *out_header,
                               bson_error_t *error) TC_MUST_CHECK;

/* ---- In-place access for the proxy (message must hold >= WIRE_HEADER_SIZE bytes) -- */

int32_t wire_message_request_id(const uint8_t *message);
int32_t wire_message_response_to(const uint8_t *message);
int32_t wire_message_opcode(const uint8_t *message);
/* Patch the header in place. If message is an OP_MSG with checksumPresent, its
 * checksum (which covers the header) is recomputed so the message stays valid;
 * length is the whole message's length. */
void wire_message_set_request_id(uint8_t *message, size_t length, int32_t request_id);
void wire_message_set_response_to(uint8_t *message, size_t length, int32_t response_to);

/* ---- Documents borrowed from a message ------------------------------------------ */

/* Consecutive BSON documents inside a parsed message, already validated. The
 * pointers borrow the message buffer: valid as long as it is. */
typedef struct wire_documents {
    const uint8_t *data;
    size_t length;
    size_t count;
} wire_documents_t;

typedef struct wire_documents_iter {
    const uint8_t *position;
    const uint8_t *end;
} wire_documents_iter_t;

void wire_documents_iter_init(wire_documents_iter_t *iter, const wire_documents_t *documents);
/* Points out_document (static, never bson_destroy'ed) at the next document;
 * false at the end. */
bool wire_documents_iter_next(wire_documents_iter_t *iter, bson_t *out_document);

/* ---- OP_MSG ------------------------------------------------------------------- */

typedef struct wire_document_sequence {
    const char *identifier; /* NUL-terminated, inside the message */
    wire_documents_t documents;
} wire_document_sequence_t;

/* A parsed OP_MSG. Every pointer and bson_t borrows the message buffer (nothing to
 * free); the bson_t values are static and must not be modified. Like any bson_t,
 * the struct must not be copied by value: parse again where another copy is needed. */
typedef struct wire_op_msg {
    wire_header_t header;
    uint32_t flags;
    bson_t body;
    size_t sequence_count;
    wire_document_sequence_t sequences[WIRE_MAX_DOCUMENT_SEQUENCES];
} wire_op_msg_t;

/* Parses and validates one complete OP_MSG as mongod's OpMsg::parse does: known
 * flags only, exactly one body, at most two uniquely named sequences none of which
 * shadows a body field, every document valid BSON, and the CRC-32C checksum when
 * checksumPresent. Errors carry mongod's codes (IllegalOpMsgFlag 223, 40430,
 * 40431, 40432, 40433, 40587, TooManyDocumentSequences 233, ChecksumMismatch 288,
 * 51251, InvalidBSON 22, Overflow 15 for truncation, BSONObjectTooLarge 10334). */
bool wire_op_msg_parse(const uint8_t *message, size_t length, wire_op_msg_t *out_message,
                       bson_error_t *error) TC_MUST_CHECK;

/* The command a server executes: the body's fields followed by each document
 * sequence as an array field named by its identifier, as mongod merges them;
 * "$db" stays as the body had it. out_command is always initialised here and the
 * caller always frees it with bson_destroy(), also when this fails. */
bool wire_op_msg_command(const wire_op_msg_t *message, bson_t *out_command,
                         bson_error_t *error) TC_MUST_CHECK;

/* For the proxy: finds the body of a complete OP_MSG from a peer it trusts (a
 * tier's reply), checking only that the body's framing lies inside the message:
 * no deep validation, which would cost more than the forwarding itself (every
 * string's UTF-8). libbson's iterators stay bounds-safe on what it returns.
 * out_body borrows message. */
bool wire_op_msg_peek_body(const uint8_t *message, size_t length, bson_t *out_body,
                           bson_error_t *error) TC_MUST_CHECK;

/* For the proxy: finds and validates the body of a complete OP_MSG without
 * validating the sequences' documents or the checksum. out_body borrows message. */
bool wire_op_msg_find_body(const uint8_t *message, size_t length, bson_t *out_body,
                           bson_error_t *error) TC_MUST_CHECK;

/* A document sequence to put in a built OP_MSG. */
typedef struct wire_sequence_input {
    const char *identifier;
    const bson_t *const *documents;
    size_t document_count;
} wire_sequence_input_t;

/* Builds an OP_MSG: header, flags, the sequences (may be NULL when count is 0),
 * then body; a CRC-32C checksum is appended when flags has
 * WIRE_MSG_FLAG_CHECKSUM_PRESENT. Like mongod's OpMsgBuilder, a message without
 * sequences (a reply) may not exceed WIRE_MAX_BSON_INTERNAL_SIZE; with sequences
 * the bound is WIRE_MAX_MESSAGE_SIZE (BSONObjectTooLarge 10334). The caller frees
 * *out_message with bson_free(). */
bool wire_op_msg_build(int32_t request_id, int32_t response_to, uint32_t flags,
                       const bson_t *body, const wire_sequence_input_t *sequences,
                       size_t sequence_count, uint8_t **out_message, size_t *out_length,
                       bson_error_t *error) TC_MUST_CHECK;

/* ---- OP_QUERY and OP_REPLY (legacy; mongod 6.0 still takes hello over OP_QUERY) ---- */

/* Borrows the message like wire_op_msg_t, and likewise must not be copied by value. */
typedef struct wire_op_query {
    wire_header_t header;
    int32_t flags;
    const char *full_collection_name; /* "db.collection", NUL-terminated, in message */
    int32_t number_to_skip;
    int32_t number_to_return;
    bson_t query; /* static, borrows the message */
    bool has_return_fields_selector;
    bson_t return_fields_selector; /* static; meaningful only when has_... */
} wire_op_query_t;

/* Parses one complete OP_QUERY as mongod's QueryMessage does (18633 for a missing
 * name terminator, 18634 for missing integers, InvalidBSON 22 for documents).
 * Bytes after the optional selector are ignored, as mongod ignores them. */
bool wire_op_query_parse(const uint8_t *message, size_t length, wire_op_query_t *out_query,
                         bson_error_t *error) TC_MUST_CHECK;

/* Whether the OP_QUERY's namespace is known and not "<db>.$cmd": a legacy find,
 * which mongod 6.0 answers with wire_op_query_removed_reply_build before reading
 * the rest of the message. Usable on a query whose parse failed after the name. */
bool wire_op_query_is_removed(const wire_op_query_t *query);

/* mongod 6.0's answer to an OP_QUERY that is not a command: an OP_REPLY with the
 * QueryFailure flag holding {$err: "OP_QUERY is no longer supported. ...", code:
 * 5739101, ok: 0}. The caller frees *out_message with bson_free(). */
bool wire_op_query_removed_reply_build(int32_t request_id, int32_t response_to, uint8_t **out_message,
                                       size_t *out_length, bson_error_t *error) TC_MUST_CHECK;

/* The command mongod executes for an OP_QUERY on "<db>.$cmd": refuses the exhaust
 * flag (18527), other namespaces (40473: callers answer those with
 * wire_op_query_removed_reply_build first, as mongod), numberToReturn other than 1 or -1
 * (16979) and a "$db" field (40621); unwraps {$query|query: {...},
 * $readPreference: ...} (refusing $maxTimeMS, InvalidOptions 72), lifts
 * $queryOptions, turns the secondaryOk flag into $readPreference secondaryPreferred,
 * and appends "$db". out_command is always initialised; caller bson_destroy()s it. */
bool wire_op_query_command(const wire_op_query_t *query, bson_t *out_command,
                           bson_error_t *error) TC_MUST_CHECK;

/* mongod's checkAllowedOpQueryCommand, run on wire_op_query_command's result: only
 * hello / isMaster / ismaster (and _isSelf, authenticate, buildinfo, buildInfo,
 * saslStart, saslContinue, which 6.0 still lets through) may come in OP_QUERY;
 * any other first field is UnsupportedOpQueryCommand 352, "Unsupported OP_QUERY
 * command: <name>. The client driver may require an upgrade. ...". */
bool wire_op_query_check_command(const bson_t *command, bson_error_t *error) TC_MUST_CHECK;

typedef struct wire_op_reply {
    wire_header_t header;
    int32_t response_flags;
    int64_t cursor_id;
    int32_t starting_from;
    int32_t number_returned;
    wire_documents_t documents;
} wire_op_reply_t;

/* Parses one complete OP_REPLY; numberReturned must match the documents present
 * (ProtocolError 17 otherwise). Pointers borrow the message. */
bool wire_op_reply_parse(const uint8_t *message, size_t length, wire_op_reply_t *out_reply,
                         bson_error_t *error) TC_MUST_CHECK;

/* Builds an OP_REPLY with numberReturned = document_count (documents may be NULL
 * when the count is 0). The caller frees *out_message with bson_free(). */
bool wire_op_reply_build(int32_t request_id, int32_t response_to, int32_t response_flags,
                         int64_t cursor_id, int32_t starting_from,
                         const bson_t *const *documents, size_t document_count,
                         uint8_t **out_message, size_t *out_length,
                         bson_error_t *error) TC_MUST_CHECK;

/* The OP_REPLY mongod answers an OP_QUERY command with, success or error alike
 * (an error is {ok: 0, errmsg, code, codeName}, not QueryFailure's $err): flags
 * AwaitCapable, no cursor, reply as its one document. Caller bson_free()s. */
bool wire_op_reply_command_build(int32_t request_id, int32_t response_to, const bson_t *reply,
                                 uint8_t **out_message, size_t *out_length, bson_error_t *error) TC_MUST_CHECK;

/* The OP_REPLY form of a command's OP_MSG reply (message, from a peer the caller
 * trusts, as wire_op_msg_peek_body): its body as the one document, the same
 * requestID and responseTo. For an OP_QUERY command forwarded as OP_MSG. Caller
 * bson_free()s *out_message. */
bool wire_op_reply_from_op_msg(const uint8_t *message, size_t length, uint8_t **out_message, size_t *out_length,
                               bson_error_t *error) TC_MUST_CHECK;

/* ---- Cursor ids ------------------------------------------------------------------- */

/* A new cursor id: positive, random (rand(), salted with now_ms), never 0, which
 * means "no cursor" on the wire. The caller retries on a collision with its table. */
int64_t wire_cursor_id_random(int64_t now_ms);

/* ---- Checksums and compression --------------------------------------------------- */

/* CRC-32C (Castagnoli), as OP_MSG checksums use; SSE4.2 when the CPU has it. */
uint32_t wire_crc32c(const uint8_t *data, size_t length);

/* Decompresses one complete OP_COMPRESSED message into the original message, its
 * header rebuilt with originalOpcode and the same requestID/responseTo. Supports
 * noop, snappy and zlib; zstd and unknown ids fail as mongod fails for a
 * compressor it lacks (InternalError 1). uncompressedSize must be at most
 * WIRE_MAX_MESSAGE_SIZE - 16 and must match what decompression produced
 * (BadValue 2). out_compressor_id may be NULL. The caller frees *out_message with
 * bson_free(). */
bool wire_decompress(const uint8_t *message, size_t length, uint8_t **out_message,
                     size_t *out_length, uint8_t *out_compressor_id,
                     bson_error_t *error) TC_MUST_CHECK;

/* Compression negotiation in the handshake: appends to reply the field
 * "compression" listing, in the client's order of preference, the compressors of
 * hello's "compression" array that this module supports (snappy, zlib, noop).
 * Appends nothing when the client offered none. */
void wire_negotiate_compression(const bson_t *hello, bson_t *reply);

/* Appends the size limits hello advertises (maxBsonObjectSize,
 * maxMessageSizeBytes, maxWriteBatchSize): the store and the proxy answer alike. */
void wire_append_hello_limits(bson_t *reply);

/* Wraps one complete message in OP_COMPRESSED with compressor_id (noop, snappy or
 * zlib). As mongod does, if the compressed form could exceed WIRE_MAX_MESSAGE_SIZE
 * an uncompressed copy is returned instead. Deciding which commands must never be
 * compressed (hello, saslStart, ...) is the caller's job. The caller frees
 * *out_message with bson_free(). */
bool wire_compress(const uint8_t *message, size_t length, uint8_t compressor_id,
                   uint8_t **out_message, size_t *out_length, bson_error_t *error) TC_MUST_CHECK;

#endif
