/* Parsing of the sizes and durations users write in flags and config files:
 * "256MB", "1GB", "16KB", "512" (bytes); "500ms", "20s", "15m", "6h", "30d". */
#ifndef TC_COMMON_UNITS_H
#define TC_COMMON_UNITS_H

#include "common/error.h"

#include <stdint.h>

/* Sizes take B, KB, MB, GB, TB (powers of 1024, case-insensitive); a bare number
 * is bytes. Errors: BadValue with the text that was refused. */
bool units_parse_size(const char *text, uint64_t *out_bytes, bson_error_t *error) TC_MUST_CHECK;

/* Durations require a unit: ms, s, m, h, d. */
bool units_parse_duration_ms(const char *text, int64_t *out_milliseconds, bson_error_t *error) TC_MUST_CHECK;

#endif
