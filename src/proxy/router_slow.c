/* Slow operations in the log, as mongod logs them (slowOpThresholdMs): one line for
 * each command slower than the threshold, with its shape (values left out), the
 * namespace, the route and reason, and the phases its time went to, so that a
 * latency episode says where it was spent (waiting for the feeder, a fault-in,
 * the tier's reply, a retry's wait for a primary). Runs on the loop thread. */
#include "proxy/router_private.h"

#include "common/log.h"
#include "common/text_buffer.h"

#define LOG_COMPONENT "COMMAND"
#define SHAPE_SIZE 512

void router_log_if_slow(proxy_request_t *request, uint64_t total_ms)
{
    int64_t threshold = request->proxy->config->slow_op_threshold_ms;
    if (threshold <= 0 || total_ms < (uint64_t)threshold || !tc_log_enabled(TC_LOG_INFO)) {
        return;
    }
    char shape[SHAPE_SIZE], phases[SHAPE_SIZE];
    text_buffer_t shape_text = {.data = shape, .size = sizeof shape};
    text_buffer_t phase_text = {.data = phases, .size = sizeof phases};
    shape[0] = phases[0] = '\0';
    text_buffer_append_shape(&shape_text, &request->command);
    for (int phase = 0; phase < PHASE_COUNT; phase++) {
        if (request->phase_ms[phase] > 0) {
            text_buffer_append(&phase_text, "%s%s %u ms", phase_text.length > 0 ? ", " : "",
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
