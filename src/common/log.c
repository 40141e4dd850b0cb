/* The log writer: formats a whole line into one buffer and writes it with a single
 * call, so lines from the loop thread and the workers never interleave. */
#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Longer printf-style messages are cut; a log line is for a human, not for data. */
#define LOG_LINE_MAX 2048

static _Atomic int log_level = TC_LOG_INFO;
static _Atomic int log_format = TC_LOG_FORMAT_TEXT;
static _Thread_local const char *log_thread_name = "main";

void tc_log_set_level(tc_log_level_t level)
{
    atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

bool tc_log_enabled(tc_log_level_t level)
{
    return (int)level <= atomic_load_explicit(&log_level, memory_order_relaxed);
}

void tc_log_set_format(tc_log_format_t format)
{
    atomic_store_explicit(&log_format, (int)format, memory_order_relaxed);
}

tc_log_format_t tc_log_get_format(void)
{
    return (tc_log_format_t)atomic_load_explicit(&log_format, memory_order_relaxed);
}

bool tc_log_format_from_name(const char *name, tc_log_format_t *out)
{
    if (strcmp(name, "text") == 0) {
        *out = TC_LOG_FORMAT_TEXT;
    } else if (strcmp(name, "json") == 0) {
        *out = TC_LOG_FORMAT_JSON;
    } else {
        return false;
    }
    return true;
}

void tc_log_set_thread_name(const char *name)
{
    log_thread_name = name;
}

/* mongod's severities: D1 is its first debug level. */
static const char *log_severity(tc_log_level_t level)
{
    switch (level) {
    case TC_LOG_ERROR:
        return "E";
    case TC_LOG_WARNING:
        return "W";
    case TC_LOG_INFO:
        return "I";
    case TC_LOG_DEBUG:
        return "D1";
    }
    return "?";
}

/* Now, UTC, to the millisecond: "2020-05-01T15:16:17.180" (the caller adds the zone). */
static void log_now(char *out, size_t size)
{
    struct timespec now;
    struct tm calendar;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &calendar);
    size_t used = strftime(out, size, "%Y-%m-%dT%H:%M:%S", &calendar);
    snprintf(out + used, size - used, ".%03ld", now.tv_nsec / 1000000L);
}

static void log_context(uint64_t connection_id, bool thread_named, char *out, size_t size)
{
    if (connection_id != 0) {
        snprintf(out, size, "conn%llu", (unsigned long long)connection_id);
    } else {
        snprintf(out, size, "%s", thread_named ? log_thread_name : "-");
    }
}

/* FNV-1a of the message as the source writes it, as a positive 31-bit number:
 * stable for a call site, as mongod's ids are. */
static int64_t log_id(const char *message)
{
    uint32_t hash = 2166136261u;
    for (const unsigned char *c = (const unsigned char *)message; *c != '\0'; c++) {
        hash = (hash ^ *c) * 16777619u;
    }
    return (int64_t)(hash & 0x7fffffffu);
}

/* JSON string contents: quotes, backslashes and control characters escaped; a
 * byte of invalid UTF-8 (a message cut mid-character) as the code point of its value. */
static void append_json_escaped(bson_string_t *out, const char *text, size_t length)
{
    bool valid = bson_utf8_validate(text, length, false);
    for (size_t i = 0; i < length; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"' || c == '\\') {
            bson_string_append_c(out, '\\');
            bson_string_append_c(out, (char)c);
        } else if (c == '\n' || c == '\t' || c == '\r') {
            bson_string_append(out, c == '\n' ? "\\n" : c == '\t' ? "\\t" : "\\r");
        } else if (c < 0x20 || (c >= 0x80 && !valid)) {
            bson_string_append_printf(out, "\\u%04x", c);
        } else {
            bson_string_append_c(out, (char)c);
        }
    }
}

static void append_json_string(bson_string_t *out, const char *text)
{
    bson_string_append_c(out, '"');
    append_json_escaped(out, text, strlen(text));
    bson_string_append_c(out, '"');
}

/* An attribute's value: JSON in the json format, as a reader wants it in the text one. */
static void append_attr_value(bson_string_t *out, const tc_log_attr_t *attr, bool json)
{
    switch (attr->type) {
    case TC_LOG_ATTR_STRING:
        if (attr->value.string == NULL) {
            bson_string_append(out, "null");
        } else if (json) {
            append_json_string(out, attr->value.string);
        } else {
            bson_string_append(out, attr->value.string);
        }
        return;
    case TC_LOG_ATTR_INT:
        bson_string_append_printf(out, "%lld", (long long)attr->value.integer);
        return;
    case TC_LOG_ATTR_DOUBLE:
        if (attr->value.number != attr->value.number || attr->value.number - attr->value.number != 0) {
            bson_string_append(out, json ? "null" : "nan"); /* NaN and infinities are not JSON */
        } else {
            bson_string_append_printf(out, "%.6g", attr->value.number);
        }
        return;
    case TC_LOG_ATTR_BOOL:
        bson_string_append(out, attr->value.boolean ? "true" : "false");
        return;
    case TC_LOG_ATTR_DOCUMENT: {
        char *text = attr->value.document != NULL ? bson_as_relaxed_extended_json(attr->value.document, NULL) : NULL;
        bson_string_append(out, text != NULL ? text : "null");
        bson_free(text);
        return;
    }
    }
}

static void log_emit(bson_string_t *line)
{
    bson_string_append_c(line, '\n');
    fwrite(line->str, 1, line->len, stderr);
}

static void log_write_json(tc_log_level_t level, const char *component, uint64_t connection_id,
                           const char *message, const char *id_source, const tc_log_attr_t *attrs,
                           size_t attr_count)
{
    char date[32];
    char context[40];
    log_now(date, sizeof date);
    log_context(connection_id, true, context, sizeof context);

    bson_string_t *line = bson_string_new(NULL);
    bson_string_append_printf(line, "{\"t\":{\"$date\":\"%s+00:00\"},\"s\":\"%s\",\"c\":", date,
                              log_severity(level));
    append_json_string(line, component != NULL ? component : "-");
    bson_string_append_printf(line, ",\"id\":%lld,\"ctx\":", (long long)log_id(id_source));
    append_json_string(line, context);
    bson_string_append(line, ",\"msg\":");
    append_json_string(line, message);
    if (attr_count > 0) {
        bson_string_append(line, ",\"attr\":{");
        for (size_t i = 0; i < attr_count; i++) {
            if (i > 0) {
                bson_string_append_c(line, ',');
            }
            append_json_string(line, attrs[i].name);
            bson_string_append_c(line, ':');
            append_attr_value(line, &attrs[i], true);
        }
        bson_string_append_c(line, '}');
    }
    bson_string_append_c(line, '}');
    log_emit(line);
    bson_string_free(line, true);
}

/* The text format's prefix: "2020-05-01T15:16:17.180Z I NETWORK  [conn12] ". */
static void append_text_prefix(bson_string_t *line, tc_log_level_t level, const char *component,
                               uint64_t connection_id)
{
    char date[32];
    char context[40];
    log_now(date, sizeof date);
    log_context(connection_id, false, context, sizeof context);
    bson_string_append_printf(line, "%sZ %c %-8s [%s] ", date, log_severity(level)[0],
                              component != NULL ? component : "-", context);
}

void tc_log_write(tc_log_level_t level, const char *component, uint64_t connection_id,
                  const char *format, ...)
{
    char message[LOG_LINE_MAX];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(message, sizeof message, format, arguments);
    va_end(arguments);

    if (atomic_load_explicit(&log_format, memory_order_relaxed) == TC_LOG_FORMAT_JSON) {
        log_write_json(level, component, connection_id, message, format, NULL, 0);
        return;
    }
    bson_string_t *line = bson_string_new(NULL);
    append_text_prefix(line, level, component, connection_id);
    bson_string_append(line, message);
    log_emit(line);
    bson_string_free(line, true);
}

/* The attribute a "{name}" at text names, or NULL. */
static const tc_log_attr_t *find_placeholder(const char *text, const tc_log_attr_t *attrs, size_t attr_count,
                                             size_t *out_length)
{
    const char *end = strchr(text, '}');
    if (end == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < attr_count; i++) {
        size_t name_length = strlen(attrs[i].name);
        if ((size_t)(end - text - 1) == name_length && strncmp(text + 1, attrs[i].name, name_length) == 0) {
            *out_length = name_length + 2;
            return &attrs[i];
        }
    }
    return NULL;
}

void tc_log_write_attrs(tc_log_level_t level, const char *component, uint64_t connection_id, const char *message,
                        const tc_log_attr_t *attrs, size_t attr_count)
{
    if (atomic_load_explicit(&log_format, memory_order_relaxed) == TC_LOG_FORMAT_JSON) {
        log_write_json(level, component, connection_id, message, message, attrs, attr_count);
        return;
    }
    bson_string_t *line = bson_string_new(NULL);
    bool named[64] = {false};
    append_text_prefix(line, level, component, connection_id);
    for (const char *c = message; *c != '\0'; c++) {
        size_t length;
        const tc_log_attr_t *attr = *c == '{' ? find_placeholder(c, attrs, attr_count, &length) : NULL;
        if (attr == NULL) {
            bson_string_append_c(line, *c);
            continue;
        }
        append_attr_value(line, attr, false);
        if ((size_t)(attr - attrs) < sizeof named / sizeof named[0]) {
            named[attr - attrs] = true;
        }
        c += length - 1;
    }
    /* What the message does not say, after it (but an absent string: a fact that does not
     * apply), so nothing a record carries is lost. */
    bool first = true;
    for (size_t i = 0; i < attr_count; i++) {
        bool absent = attrs[i].type == TC_LOG_ATTR_STRING && attrs[i].value.string == NULL;
        if ((i >= sizeof named / sizeof named[0] || !named[i]) && !absent) {
            bson_string_append_printf(line, "%s%s: ", first ? " (" : ", ", attrs[i].name);
            append_attr_value(line, &attrs[i], false);
            first = false;
        }
    }
    if (!first) {
        bson_string_append_c(line, ')');
    }
    log_emit(line);
    bson_string_free(line, true);
}

void tc_log_failure(const char *program, const char *message)
{
    if (atomic_load_explicit(&log_format, memory_order_relaxed) == TC_LOG_FORMAT_JSON) {
        const tc_log_attr_t attrs[] = {TC_ATTR_STR("program", program), TC_ATTR_STR("error", message)};
        log_write_json(TC_LOG_ERROR, "CONTROL", 0, "{program}: {error}", "{program}: {error}", attrs, 2);
        return;
    }
    fprintf(stderr, "%s: %s\n", program, message);
}
