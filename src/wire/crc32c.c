/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum OP_MSG
 * carries when checksumPresent is set. SSE4.2's crc32 instruction computes exactly
 * this function; a byte-at-a-time table is the fallback on other CPUs. */
#include "wire/wire_private.h"

#include <pthread.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define WIRE_CRC32C_HAVE_SSE42 1
#endif

#define CRC32C_POLYNOMIAL 0x82F63B78u

static uint32_t crc32c_table[256];
static pthread_once_t crc32c_table_once = PTHREAD_ONCE_INIT;

static void crc32c_table_fill(void)
{
    for (uint32_t byte = 0; byte < 256; byte++) {
        uint32_t crc = byte;
        for (int bit = 0; bit < 8; bit++) {
            crc = (crc & 1) ? (crc >> 1) ^ CRC32C_POLYNOMIAL : crc >> 1;
        }
        crc32c_table[byte] = crc;
    }
}

uint32_t wire_crc32c_software(const uint8_t *data, size_t length)
{
    pthread_once(&crc32c_table_once, crc32c_table_fill);
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < length; i++) {
        crc = crc32c_table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
    }
    return crc ^ 0xFFFFFFFFu;
}

#ifdef WIRE_CRC32C_HAVE_SSE42
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(const uint8_t *data,
                                                               size_t length)
{
    uint32_t crc = 0xFFFFFFFFu;
#if defined(__x86_64__)
    uint64_t wide_crc = crc;
    while (length >= 8) {
        uint64_t word;
        memcpy(&word, data, sizeof word);
        wide_crc = _mm_crc32_u64(wide_crc, word);
        data += 8;
        length -= 8;
    }
    crc = (uint32_t)wide_crc;
#endif
    while (length >= 4) {
        uint32_t word;
        memcpy(&word, data, sizeof word);
        crc = _mm_crc32_u32(crc, word);
        data += 4;
        length -= 4;
    }
    while (length > 0) {
        crc = _mm_crc32_u8(crc, *data);
        data++;
        length--;
    }
    return crc ^ 0xFFFFFFFFu;
}
#endif

bool wire_crc32c_hardware(const uint8_t *data, size_t length, uint32_t *out_crc)
{
#ifdef WIRE_CRC32C_HAVE_SSE42
    if (__builtin_cpu_supports("sse4.2")) {
        *out_crc = crc32c_sse42(data, length);
        return true;
    }
#endif
    (void)data;
    (void)length;
    (void)out_crc;
    return false;
}

uint32_t wire_crc32c(const uint8_t *data, size_t length)
{
    uint32_t crc;
    if (wire_crc32c_hardware(data, length, &crc)) {
        return crc;
    }
    return wire_crc32c_software(data, length);
}
