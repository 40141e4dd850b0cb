/* libFuzzer target: OP_COMPRESSED. The input is one compressed message (its length
 * and opcode made right, so mutations reach the decompressors); what decompresses is
 * dispatched like any message, then compressed and decompressed again, which must
 * give it back. Arbitrary bytes wrapped as a message must also survive a
 * compress/decompress round trip with each compressor. */
#include "fuzz_common.h"

static void require_round_trip(const uint8_t *message, size_t length, uint8_t compressor)
{
    bson_error_t error;
    uint8_t *compressed = NULL;
    size_t compressed_length = 0;
    FUZZ_REQUIRE(wire_compress(message, length, compressor, &compressed, &compressed_length,
                               &error),
                 "compressor %u refused a %zu-byte message: %s", compressor, length,
                 error.message);
    if (wire_message_opcode(compressed) != WIRE_OP_COMPRESSED) {
        /* Left uncompressed because it could outgrow the maximum message size. */
        FUZZ_REQUIRE(compressed_length == length && memcmp(compressed, message, length) == 0,
                     "an uncompressed copy differs");
        bson_free(compressed);
        return;
    }
    uint8_t *restored = NULL;
    size_t restored_length = 0;
    uint8_t used = 255;
    FUZZ_REQUIRE(wire_decompress(compressed, compressed_length, &restored, &restored_length,
                                 &used, &error),
                 "compressor %u: own output does not decompress: %s", compressor,
                 error.message);
    FUZZ_REQUIRE(used == compressor, "compressor %u came back as %u", compressor, used);
    FUZZ_REQUIRE(restored_length == length && memcmp(restored, message, length) == 0,
                 "compressor %u: round trip changed the message", compressor);
    bson_free(restored);
    bson_free(compressed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < WIRE_HEADER_SIZE || size > WIRE_MAX_MESSAGE_SIZE) {
        return 0;
    }
    uint8_t *message = malloc(size);
    memcpy(message, data, size);
    wire_store_int32(message, (int32_t)size);
    wire_store_int32(message + 12, WIRE_OP_COMPRESSED);

    bson_error_t error;
    uint8_t *decompressed = NULL;
    size_t decompressed_length = 0;
    uint8_t compressor = 255;
    if (wire_decompress(message, size, &decompressed, &decompressed_length, &compressor,
                        &error)) {
        FUZZ_REQUIRE(decompressed_length ==
                         WIRE_HEADER_SIZE + (size_t)wire_load_int32(message + WIRE_HEADER_SIZE + 4),
                     "decompressed length %zu differs from the declared size",
                     decompressed_length);
        FUZZ_REQUIRE(compressor <= WIRE_COMPRESSOR_ZLIB, "accepted compressor %u", compressor);
        FUZZ_REQUIRE(wire_message_request_id(decompressed) == wire_message_request_id(message) &&
                         wire_message_response_to(decompressed) ==
                             wire_message_response_to(message) &&
                         wire_message_opcode(decompressed) ==
                             wire_load_int32(message + WIRE_HEADER_SIZE) &&
                         (size_t)wire_load_int32(decompressed) == decompressed_length,
                     "the rebuilt header is wrong");
        fuzz_dispatch_message(decompressed, decompressed_length);
        require_round_trip(decompressed, decompressed_length, compressor);
        bson_free(decompressed);
    } else {
        FUZZ_REQUIRE(decompressed == NULL, "failed decompression returned a buffer");
    }

    /* The payload after the header, as the body of a message of the original opcode. */
    wire_store_int32(message + 12, wire_load_int32(data + 12) == WIRE_OP_COMPRESSED
                                       ? WIRE_OP_MSG
                                       : wire_load_int32(data + 12));
    require_round_trip(message, size, (uint8_t)(data[4] % 3));
    free(message);
    return 0;
}
