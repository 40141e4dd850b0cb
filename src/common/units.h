/* Parsing of the sizes, durations and counts users write in flags and config files:
 * "256MB", "1GB", "16KB", "512" (bytes); "500ms", "20s", "15m", "6h", "30d"; "64". */
#ifndef TC_COMMON_UNITS_H
#define TC_COMMON_UNITS_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

/* Sizes take B, KB, MB, GB, TB (powers of 1024, case-insensitive); a bare number
 * is bytes. Errors: BadValue with the text that was refused. */
bool units_parse_size(const char *text, uint64_t *out_bytes, bson_error_t *error) TC_MUST_CHECK;

/* Durations require a unit: ms, s, m, h, d. */
bool units_parse_duration_ms(const char *text, int64_t *out_milliseconds, bson_error_t *error) TC_MUST_CHECK;

/* A count a command-line flag takes (threads, records, a seed): a whole decimal
 * number from minimum to maximum. Errors: BadValue "FLAG takes a whole number from
 * MIN to MAX, not 'TEXT'". */
bool units_parse_count(const char *text, const char *flag, int64_t minimum, int64_t maximum, int64_t *out_count,
                       bson_error_t *error) TC_MUST_CHECK;

/* A duration a command-line flag takes: units_parse_duration_ms, then at least
 * minimum_ms (which is at least 1), or 0 when zero_allowed. Errors: BadValue
 * "FLAG: invalid duration ..." or "FLAG must be [0 or ]at least MIN, not 'TEXT'". */
bool units_parse_flag_duration(const char *text, const char *flag, int64_t minimum_ms, bool zero_allowed,
                               int64_t *out_milliseconds, bson_error_t *error) TC_MUST_CHECK;

/* HOST:PORT as a flag takes it ("127.0.0.1:9216", "[::1]:9216"): host without
 * brackets into out_host (size bytes), port 1-65535. Errors: BadValue
 * "FLAG takes HOST:PORT ..., not 'TEXT'". */
bool units_parse_host_port(const char *text, const char *flag, char *out_host, size_t size, int *out_port,
                           bson_error_t *error) TC_MUST_CHECK;

#endif
