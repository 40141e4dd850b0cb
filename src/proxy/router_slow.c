/* Slow operations in the log, as mongod logs them (slowOpThresholdMs): one line for
 * each command slower than the threshold, with its shape (values left out), the
 * namespace, the route and reason, and the phases its time went to, so that a
 * latency episode says where it was spent (waiting for the feeder, a fault-in,
 * the tier's reply, a retry's wait for a primary). Runs on the loop thread. */
#include "proxy/router_private.h"

#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define LOG_COMPONENT "COMMAND"
#define SHAPE_SIZE 512
#define SHAPE_DEPTH 3

typedef struct text {
    char *data;
    size_t size;
    size_t length;
} text_t;

static void text_append(text_t *text, const char *format, ...) __attribute__((format(printf, 2, 3)));

static void text_append(text_t *text, const char *format, ...)
{
    if (text->length + 1 >= text->size) {
        return;
    }
    va_list arguments;
    va_start(arguments, format);
    int written = vsnprintf(text->data + text->length, text->size - text->length, format, arguments);
    va_end(arguments);
    if (written > 0) {
        text->length += (size_t)written;
        if (text->length >= text->size) {
            text->length = text->size - 1; /* cut: the line says what fits */
        }
    }
}

/* {key: ?, key: {key: ?}}: the command's structure without its values, which may
 * be private; the command name's value (the collection) and $db stay. */
static void append_shape(text_t *text, const bson_t *document, int depth, bool keep_first)
{
    bson_iter_t iter;
    bool first = true;
    if (!bson_iter_init(&iter, document)) {
        text_append(text, "?");
        return;
    }
    text_append(text, "{");
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        text_append(text, "%s%s: ", first ? "" : ", ", key);
        if (((first && keep_first) || strcmp(key, "$db") == 0) && BSON_ITER_HOLDS_UTF8(&iter)) {
            text_append(text, "\"%s\"", bson_iter_utf8(&iter, NULL));
        } else if (BSON_ITER_HOLDS_DOCUMENT(&iter) && depth < SHAPE_DEPTH && strcmp(key, "lsid") != 0 &&
                   strcmp(key, "$clusterTime") != 0) {
            bson_t child;
            uint32_t length;
            const uint8_t *data;
            bson_iter_document(&iter, &length, &data);
            if (bson_init_static(&child, data, length)) {
                append_shape(text, &child, depth + 1, false);
            }
        } else if (BSON_ITER_HOLDS_ARRAY(&iter)) {
            bson_t child;
            uint32_t length;
            const uint8_t *data;
            bson_iter_array(&iter, &length, &data);
            text_append(text, "[%u]", bson_init_static(&child, data, length) ? bson_count_keys(&child) : 0);
        } else {
            text_append(text, "?");
        }
        first = false;
    }
    text_append(text, "}");
}

void router_log_if_slow(proxy_request_t *request, uint64_t total_ms)
{
    int64_t threshold = request->proxy->config->slow_op_threshold_ms;
    if (threshold <= 0 || total_ms < (uint64_t)threshold || !tc_log_enabled(TC_LOG_INFO)) {
        return;
    }
    char shape[SHAPE_SIZE], phases[SHAPE_SIZE];
    text_t shape_text = {.data = shape, .size = sizeof shape};
    text_t phase_text = {.data = phases, .size = sizeof phases};
    shape[0] = phases[0] = '\0';
    append_shape(&shape_text, &request->command, 0, true);
    for (int phase = 0; phase < PHASE_COUNT; phase++) {
        if (request->phase_ms[phase] > 0) {
            text_append(&phase_text, "%s%s %u ms", phase_text.length > 0 ? ", " : "",
                        router_phase_name((request_phase_t)phase), request->phase_ms[phase]);
        }
    }
    const char *route = request->has_decision ? plan_route_name(request->decision.route) : "none";
    const char *reason = request->has_decision ? plan_reason_name(request->decision.reason) : "none";
    /* mongod's "Slow query" line: its facts as attributes (the json log's attr). */
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, request->connection_id,
                 "Slow query: {command} on {ns} took {durationMillis} ms (slowOpThresholdMs {slowOpThresholdMs}): "
                 "route {route} ({reason}), last tier {tier}; time in {phases}; command {shape}",
                 TC_ATTR_STR("command", request->command_name[0] != '\0' ? request->command_name : "(undecoded)"),
                 TC_ATTR_STR("ns", request->ns[0] != '\0' ? request->ns : "(no namespace)"),
                 TC_ATTR_INT("durationMillis", total_ms), TC_ATTR_INT("slowOpThresholdMs", threshold),
                 TC_ATTR_STR("route", route), TC_ATTR_STR("reason", reason),
                 TC_ATTR_STR("tier", proxy_tier_name(request->tier)),
                 TC_ATTR_STR("phases", phase_text.length > 0 ? phases : "no phase a millisecond long"),
                 TC_ATTR_STR("shape", shape));
}
