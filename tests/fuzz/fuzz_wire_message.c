/* libFuzzer target: the bytes a client sends on one connection. They are framed as
 * the network layer frames them (wire_frame_check on the first 4 bytes, then exactly
 * that many bytes) and each message goes through the store's dispatch: header,
 * OP_COMPRESSED, OP_MSG or OP_QUERY parsing and command assembly. */
#include "fuzz_common.h"

/* A connection sends at most this many messages per input: enough to exercise
 * framing of back-to-back messages, few enough to stay fast. */
#define MAX_MESSAGES_PER_INPUT 8

/* Copies the message into a buffer of exactly its size, so that AddressSanitizer
 * sees any read past its end. */
static void dispatch_copy(const uint8_t *data, size_t length)
{
    uint8_t *message = malloc(length ? length : 1);
    memcpy(message, data, length);
    fuzz_dispatch_message(message, length);
    free(message);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t hardware = 0;
    if (wire_crc32c_hardware(data, size, &hardware)) {
        FUZZ_REQUIRE(hardware == wire_crc32c_software(data, size),
                     "CRC-32C: hardware %08x, software %08x", hardware,
                     wire_crc32c_software(data, size));
    }

    /* The stream as the server reads it. */
    size_t position = 0;
    for (int count = 0; count < MAX_MESSAGES_PER_INPUT && size - position >= 4; count++) {
        size_t message_length = 0;
        bson_error_t error;
        if (!wire_frame_check(data + position, &message_length, &error)) {
            break; /* the server closes the connection */
        }
        FUZZ_REQUIRE(message_length >= WIRE_HEADER_SIZE && message_length <= WIRE_MAX_MESSAGE_SIZE,
                     "frame check accepted length %zu", message_length);
        if (message_length > size - position) {
            break; /* the server would wait for the rest */
        }
        dispatch_copy(data + position, message_length);
        position += message_length;
    }

    /* Mutations that insert or erase bytes break the declared length and would stop
     * at the framing above: also parse the whole input as one message with its length
     * (and an OP_MSG checksum) made right, to reach the parsers behind. */
    if (size >= WIRE_HEADER_SIZE && size <= WIRE_MAX_MESSAGE_SIZE &&
        (size_t)wire_load_int32(data) != size) {
        uint8_t *message = malloc(size);
        memcpy(message, data, size);
        wire_store_int32(message, (int32_t)size);
        wire_op_msg_checksum_refresh(message, size);
        fuzz_dispatch_message(message, size);
        free(message);
    }
    return 0;
}
