/* OP_COMPRESSED (opcode 2012): a 16-byte header, originalOpcode, uncompressedSize
 * (the original message without its header), compressorId, then the compressed
 * bytes. Checks and error codes follow mongod's MessageCompressorManager; the
 * declared size is bounded before anything is allocated. */
#include "wire/wire_private.h"

#include <snappy-c.h>
#include <zlib.h>

/* originalOpcode, uncompressedSize, compressorId */
#define COMPRESSION_HEADER_SIZE 9

static const char *const corrupted_message = "Compressed message was invalid or corrupted";

static bool decompress_payload(uint8_t compressor_id, const uint8_t *input, size_t input_length,
                               uint8_t *output, size_t expected_length, bson_error_t *error)
{
    size_t produced = 0;
    switch (compressor_id) {
    case WIRE_COMPRESSOR_NOOP:
        if (input_length > expected_length) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "%s", corrupted_message);
        }
        memcpy(output, input, input_length);
        produced = input_length;
        break;
    case WIRE_COMPRESSOR_SNAPPY: {
        size_t declared = 0;
        if (snappy_uncompressed_length((const char *)input, input_length, &declared) != SNAPPY_OK ||
            declared != expected_length) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "%s", corrupted_message);
        }
        produced = expected_length;
        if (snappy_uncompress((const char *)input, input_length, (char *)output, &produced) !=
            SNAPPY_OK) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "%s", corrupted_message);
        }
        break;
    }
    case WIRE_COMPRESSOR_ZLIB: {
        uLongf output_length = (uLongf)expected_length;
        /* Z_BUF_ERROR here means the data inflates past the declared size. */
        if (uncompress(output, &output_length, input, (uLong)input_length) != Z_OK) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "%s", corrupted_message);
        }
        produced = output_length;
        break;
    }
    default:
        return tc_error_set(error, TC_ERR_INTERNAL,
                            "Compression algorithm specified in message is not available");
    }
    if (produced != expected_length) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "Decompressing message returned less data than expected");
    }
    return true;
}

bool wire_decompress(const uint8_t *message, size_t length, uint8_t **out_message,
                     size_t *out_length, uint8_t *out_compressor_id, bson_error_t *error)
{
    wire_header_t header;
    if (!wire_header_parse(message, length, &header, error)) {
        return false;
    }
    if (header.opcode != WIRE_OP_COMPRESSED) {
        return tc_error_set(error, TC_ERR_ILLEGAL_OPERATION,
                            "Message type %d is not an OP_COMPRESSED (%d)", (int)header.opcode,
                            WIRE_OP_COMPRESSED);
    }
    if (length - WIRE_HEADER_SIZE < COMPRESSION_HEADER_SIZE) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Invalid compressed message header");
    }
    int32_t original_opcode = wire_load_int32(message + WIRE_HEADER_SIZE);
    int32_t uncompressed_size = wire_load_int32(message + WIRE_HEADER_SIZE + 4);
    uint8_t compressor_id = message[WIRE_HEADER_SIZE + 8];

    if (compressor_id != WIRE_COMPRESSOR_NOOP && compressor_id != WIRE_COMPRESSOR_SNAPPY &&
        compressor_id != WIRE_COMPRESSOR_ZLIB) {
        return tc_error_set(error, TC_ERR_INTERNAL,
                            "Compression algorithm specified in message is not available");
    }
    if (uncompressed_size < 0 ||
        (size_t)uncompressed_size > WIRE_MAX_MESSAGE_SIZE - WIRE_HEADER_SIZE) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "Decompressed message would be larger than maximum message size");
    }
    /* mongod refuses a compressed message inside another when it dispatches it. */
    if (original_opcode == WIRE_OP_COMPRESSED) {
        return tc_error_set(error, TC_ERR_ILLEGAL_OPERATION, "Message type %d is not supported.",
                            (int)original_opcode);
    }

    size_t output_length = WIRE_HEADER_SIZE + (size_t)uncompressed_size;
    uint8_t *output = bson_malloc(output_length);
    const uint8_t *input = message + WIRE_HEADER_SIZE + COMPRESSION_HEADER_SIZE;
    size_t input_length = length - WIRE_HEADER_SIZE - COMPRESSION_HEADER_SIZE;
    if (!decompress_payload(compressor_id, input, input_length, output + WIRE_HEADER_SIZE,
                            (size_t)uncompressed_size, error)) {
        bson_free(output);
        return false;
    }
    wire_header_t original = {.message_length = (int32_t)output_length,
                              .request_id = header.request_id,
                              .response_to = header.response_to,
                              .opcode = original_opcode};
    wire_store_header(output, &original);
    *out_message = output;
    *out_length = output_length;
    if (out_compressor_id) {
        *out_compressor_id = compressor_id;
    }
    return true;
}

static size_t compressed_bound(uint8_t compressor_id, size_t input_length)
{
    switch (compressor_id) {
    case WIRE_COMPRESSOR_SNAPPY:
        return snappy_max_compressed_length(input_length);
    case WIRE_COMPRESSOR_ZLIB:
        return compressBound((uLong)input_length);
    default:
        return input_length;
    }
}

static uint8_t *copy_message(const uint8_t *message, size_t length)
{
    uint8_t *copy = bson_malloc(length);
    memcpy(copy, message, length);
    return copy;
}

bool wire_compress(const uint8_t *message, size_t length, uint8_t compressor_id,
                   uint8_t **out_message, size_t *out_length, bson_error_t *error)
{
    wire_header_t header;
    if (!wire_header_parse(message, length, &header, error)) {
        return false;
    }
    if (header.opcode == WIRE_OP_COMPRESSED) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Cannot compress an OP_COMPRESSED message");
    }
    if (compressor_id != WIRE_COMPRESSOR_NOOP && compressor_id != WIRE_COMPRESSOR_SNAPPY &&
        compressor_id != WIRE_COMPRESSOR_ZLIB) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "Compressor id %u is not supported; use noop (0), snappy (1) or "
                            "zlib (2)",
                            (unsigned)compressor_id);
    }
    const uint8_t *input = message + WIRE_HEADER_SIZE;
    size_t input_length = length - WIRE_HEADER_SIZE;
    size_t capacity =
        WIRE_HEADER_SIZE + COMPRESSION_HEADER_SIZE + compressed_bound(compressor_id, input_length);
    if (capacity > WIRE_MAX_MESSAGE_SIZE) {
        *out_message = copy_message(message, length);
        *out_length = length;
        return true;
    }

    uint8_t *output = bson_malloc(capacity);
    uint8_t *payload = output + WIRE_HEADER_SIZE + COMPRESSION_HEADER_SIZE;
    size_t payload_length = capacity - WIRE_HEADER_SIZE - COMPRESSION_HEADER_SIZE;
    bool compressed = true;
    switch (compressor_id) {
    case WIRE_COMPRESSOR_NOOP:
        memcpy(payload, input, input_length);
        payload_length = input_length;
        break;
    case WIRE_COMPRESSOR_SNAPPY:
        compressed = snappy_compress((const char *)input, input_length, (char *)payload,
                                     &payload_length) == SNAPPY_OK;
        break;
    default: {
        uLongf zlib_length = (uLongf)payload_length;
        compressed = compress2(payload, &zlib_length, input, (uLong)input_length,
                               Z_DEFAULT_COMPRESSION) == Z_OK;
        payload_length = zlib_length;
        break;
    }
    }
    if (!compressed) {
        bson_free(output);
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Could not compress input");
    }

    size_t output_length = WIRE_HEADER_SIZE + COMPRESSION_HEADER_SIZE + payload_length;
    wire_header_t compressed_header = {.message_length = (int32_t)output_length,
                                       .request_id = header.request_id,
                                       .response_to = header.response_to,
                                       .opcode = WIRE_OP_COMPRESSED};
    wire_store_header(output, &compressed_header);
    wire_store_int32(output + WIRE_HEADER_SIZE, header.opcode);
    wire_store_int32(output + WIRE_HEADER_SIZE + 4, (int32_t)input_length);
    output[WIRE_HEADER_SIZE + 8] = compressor_id;
    *out_message = output;
    *out_length = output_length;
    return true;
}

void wire_negotiate_compression(const bson_t *hello, bson_t *reply)
{
    bson_iter_t iter, names;
    if (!bson_iter_init_find(&iter, hello, "compression") || !BSON_ITER_HOLDS_ARRAY(&iter)) {
        return;
    }
    bson_t agreed;
    uint32_t index = 0;
    BSON_APPEND_ARRAY_BEGIN(reply, "compression", &agreed);
    bson_iter_recurse(&iter, &names);
    while (bson_iter_next(&names)) {
        if (!BSON_ITER_HOLDS_UTF8(&names)) {
            continue;
        }
        const char *name = bson_iter_utf8(&names, NULL);
        if (strcmp(name, "snappy") == 0 || strcmp(name, "zlib") == 0 || strcmp(name, "noop") == 0) {
            char key[16];
            const char *key_string;
            bson_uint32_to_string(index++, &key_string, key, sizeof key);
            bson_append_utf8(&agreed, key_string, -1, name, -1);
        }
    }
    bson_append_array_end(reply, &agreed);
}
