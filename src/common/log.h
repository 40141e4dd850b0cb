/* One-line log records to stderr: ISO-8601 UTC timestamp, severity, component and
 * connection, as mongod's text log does ("... I NETWORK [conn12] message"). The
 * level is checked before any formatting, so a disabled record costs one load. */
#ifndef TC_COMMON_LOG_H
#define TC_COMMON_LOG_H

#include <stdbool.h>
#include <stdint.h>

typedef enum tc_log_level {
    TC_LOG_ERROR = 0,
    TC_LOG_WARNING = 1,
    TC_LOG_INFO = 2,
    TC_LOG_DEBUG = 3,
} tc_log_level_t;

/* Records at or below level are written; the default is TC_LOG_INFO. Thread-safe. */
void tc_log_set_level(tc_log_level_t level);

/* Thread-safe. */
bool tc_log_enabled(tc_log_level_t level);

/* Writes one line; connection_id 0 means "not about a connection" and prints [-].
 * Prefer TC_LOG, which skips the formatting when the level is disabled. */
void tc_log_write(tc_log_level_t level, const char *component, uint64_t connection_id,
                  const char *format, ...) __attribute__((format(printf, 4, 5)));

/* TC_LOG(TC_LOG_INFO, "NETWORK", connection->id, "end connection %s", peer); */
#define TC_LOG(level, component, connection_id, ...)                           \
    do {                                                                       \
        if (tc_log_enabled(level)) {                                           \
            tc_log_write((level), (component), (connection_id), __VA_ARGS__);  \
        }                                                                      \
    } while (0)

#endif
