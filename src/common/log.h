/* Log records to stderr, one line each, in one of two formats:
 * - text (the default), as mongod's text log: ISO-8601 UTC timestamp, severity,
 *   component and connection ("... I NETWORK  [conn12] message");
 * - json, as mongod 4.4+'s structured log: one object per line,
 *   {"t":{"$date":"..."},"s":"I","c":"NETWORK","id":N,"ctx":"conn12","msg":"...","attr":{...}}.
 *
 * A record's facts go in attributes, named once at the call site:
 *
 *   TC_LOG_ATTRS(TC_LOG_INFO, "NETWORK", connection->id, "end connection {remote} ({connectionCount} now open)",
 *                TC_ATTR_STR("remote", connection->peer), TC_ATTR_INT("connectionCount", open));
 *
 * The text format writes the message with each {name} replaced by its value (and
 * any attribute the message does not name after it); the json format writes the
 * message as given, as mongod does, and the values in attr. TC_LOG's printf-style
 * records have no attributes: their formatted text is the message. A record's id
 * is a hash of its message as written in the source, so it is the same for every
 * record of one call site, in every run. The level is checked before any
 * formatting, so a disabled record costs one load. */
#ifndef TC_COMMON_LOG_H
#define TC_COMMON_LOG_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tc_log_level {
    TC_LOG_ERROR = 0,
    TC_LOG_WARNING = 1,
    TC_LOG_INFO = 2,
    TC_LOG_DEBUG = 3,
} tc_log_level_t;

typedef enum tc_log_format {
    TC_LOG_FORMAT_TEXT,
    TC_LOG_FORMAT_JSON,
} tc_log_format_t;

/* Records at or below level are written; the default is TC_LOG_INFO. Thread-safe. */
void tc_log_set_level(tc_log_level_t level);

/* Thread-safe. */
bool tc_log_enabled(tc_log_level_t level);

/* The default is TC_LOG_FORMAT_TEXT. Thread-safe. */
void tc_log_set_format(tc_log_format_t format);

/* The format records are written in now. Thread-safe. */
tc_log_format_t tc_log_get_format(void);

/* "text" or "json"; false for anything else. */
bool tc_log_format_from_name(const char *name, tc_log_format_t *out);

/* What the calling thread's records not about a connection show as their context
 * (json's ctx; "main" until set). name must outlive the thread (a literal). */
void tc_log_set_thread_name(const char *name);

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

/* The one line a subcommand writes when it fails (exit status 1): "PROGRAM: message"
 * in the text format, as before any log existed; an E record (CONTROL) in the json
 * one, so that a json log stays one object per line to its end. */
void tc_log_failure(const char *program, const char *message);

/* --- records with attributes ---------------------------------------------------- */

typedef enum tc_log_attr_type {
    TC_LOG_ATTR_STRING,
    TC_LOG_ATTR_INT,
    TC_LOG_ATTR_DOUBLE,
    TC_LOG_ATTR_BOOL,
    TC_LOG_ATTR_DOCUMENT,
} tc_log_attr_type_t;

typedef struct tc_log_attr {
    const char *name;
    tc_log_attr_type_t type;
    union {
        const char *string; /* NULL shows as null */
        int64_t integer;
        double number;
        bool boolean;
        const bson_t *document; /* relaxed Extended JSON, as mongod's attributes */
    } value;
} tc_log_attr_t;

#define TC_ATTR_STR(attr_name, text) \
    ((tc_log_attr_t){.name = (attr_name), .type = TC_LOG_ATTR_STRING, .value.string = (text)})
#define TC_ATTR_INT(attr_name, number) \
    ((tc_log_attr_t){.name = (attr_name), .type = TC_LOG_ATTR_INT, .value.integer = (int64_t)(number)})
#define TC_ATTR_DOUBLE(attr_name, real) \
    ((tc_log_attr_t){.name = (attr_name), .type = TC_LOG_ATTR_DOUBLE, .value.number = (double)(real)})
#define TC_ATTR_BOOL(attr_name, flag) \
    ((tc_log_attr_t){.name = (attr_name), .type = TC_LOG_ATTR_BOOL, .value.boolean = (flag)})
#define TC_ATTR_DOC(attr_name, bson) \
    ((tc_log_attr_t){.name = (attr_name), .type = TC_LOG_ATTR_DOCUMENT, .value.document = (bson)})

/* Prefer TC_LOG_ATTRS. message is a constant naming attributes as {name}. */
void tc_log_write_attrs(tc_log_level_t level, const char *component, uint64_t connection_id, const char *message,
                        const tc_log_attr_t *attrs, size_t attr_count);

#define TC_LOG_ATTRS(level, component, connection_id, message, ...)                                        \
    do {                                                                                                   \
        if (tc_log_enabled(level)) {                                                                       \
            const tc_log_attr_t tc_log_attrs_[] = {__VA_ARGS__};                                           \
            tc_log_write_attrs((level), (component), (connection_id), (message), tc_log_attrs_,            \
                               sizeof tc_log_attrs_ / sizeof tc_log_attrs_[0]);                            \
        }                                                                                                  \
    } while (0)

#endif
