/* What a reload of the proxy's config changes, and what it may not change while
 * the proxy runs: a pure comparison of the running config_t with the new one
 * (reload.c applies it). The decision is all-or-nothing, as mongod's operators
 * expect of a config file: one setting that cannot change live refuses the whole
 * file, and the running config stays. */
#include "proxy/proxy_private.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static void note(bson_t *list, const char *format, ...) BSON_GNUC_PRINTF(2, 3);

static void note(bson_t *list, const char *format, ...)
{
    char text[512];
    char key[16];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(text, sizeof text, format, arguments);
    va_end(arguments);
    snprintf(key, sizeof key, "%u", bson_count_keys(list));
    BSON_APPEND_UTF8(list, key, text);
}

static bool same_text(const char *old_text, const char *new_text)
{
    return (old_text == NULL && new_text == NULL) ||
           (old_text != NULL && new_text != NULL && strcmp(old_text, new_text) == 0);
}

static const char *shown(const char *text)
{
    return text != NULL ? text : "(none)";
}

#define COMPARE_NUMBER(list, name, old_value, new_value)                                                   \
    ((old_value) != (new_value)                                                                            \
         ? (note(list, "%s: %lld -> %lld", name, (long long)(old_value), (long long)(new_value)), true) \
         : false)

/* Settings only a restart changes: the listener, the tiers' pools, who may
 * connect, the metrics listener. */
static void refuse_fixed(const config_t *old_config, const config_t *new_config, bson_t *refused)
{
    if (!same_text(old_config->listen.host, new_config->listen.host) ||
        old_config->listen.port != new_config->listen.port) {
        note(refused, "listen: %s:%u -> %s:%u (the listening socket stays; restart to move it)",
             old_config->listen.host, (unsigned)old_config->listen.port, new_config->listen.host,
             (unsigned)new_config->listen.port);
    }
    const char *uri_names[2] = {"archive", "fast"};
    const char *old_uris[2] = {old_config->archive_uri, old_config->fast_uri};
    const char *new_uris[2] = {new_config->archive_uri, new_config->fast_uri};
    for (int i = 0; i < 2; i++) {
        if (!same_text(old_uris[i], new_uris[i])) {
            char *old_shown = config_uri_redacted(old_uris[i]);
            char *new_shown = config_uri_redacted(new_uris[i]);
            note(refused, "%s: %s -> %s (cursors, sessions and the feeder's position belong to the tier; "
                          "restart to change it)", uri_names[i], old_shown, new_shown);
            bson_free(old_shown);
            bson_free(new_shown);
        }
    }
    if (old_config->authorization_enabled != new_config->authorization_enabled) {
        note(refused, "authorization: %s -> %s (connections authenticated or not stay so; restart to change it)",
             old_config->authorization_enabled ? "enabled" : "disabled",
             new_config->authorization_enabled ? "enabled" : "disabled");
    }
    if (!same_text(old_config->metrics_listen.host, new_config->metrics_listen.host) ||
        old_config->metrics_listen.port != new_config->metrics_listen.port) {
        note(refused, "metricsListen changed (restart to move the metrics listener)");
    }
}

static void compare_namespace(const config_namespace_t *old_ns, const config_namespace_t *new_ns, reload_plan_t *plan)
{
    char name[600];
    bson_t *changed = &plan->changed;
    if (strcmp(old_ns->time_field, new_ns->time_field) != 0 || old_ns->coverage != new_ns->coverage) {
        note(&plan->refused, "%s: timeField or coverage changed (the fast tier's copy and the warmer's record "
                             "are of the old policy; restart with the collection emptied in the fast tier)",
             new_ns->ns);
    }
    /* The horizon (now - maxAge + safetySlack) moving back would claim documents
     * the warmer never copied: its first pass of the old window is recorded as
     * complete and is not run again. */
    if (new_ns->max_age_ms - new_ns->safety_slack_ms > old_ns->max_age_ms - old_ns->safety_slack_ms) {
        note(&plan->refused, "%s: maxAge - safetySlack grows from %lldms to %lldms: the fast tier does not hold "
                             "the documents of the wider window and the warmer would not copy them",
             new_ns->ns, (long long)(old_ns->max_age_ms - old_ns->safety_slack_ms),
             (long long)(new_ns->max_age_ms - new_ns->safety_slack_ms));
    }
    static const struct {
        const char *name;
        size_t offset; /* of an int64_t in config_namespace_t */
    } durations[] = {
        {"maxAge", offsetof(config_namespace_t, max_age_ms)},
        {"safetySlack", offsetof(config_namespace_t, safety_slack_ms)},
        {"evictorPeriod", offsetof(config_namespace_t, evictor_period_ms)},
        {"warmerPeriod", offsetof(config_namespace_t, warmer_period_ms)},
        {"indexSyncPeriod", offsetof(config_namespace_t, index_sync_period_ms)},
    };
    bool policy = false;
    for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++) {
        int64_t old_value, new_value;
        memcpy(&old_value, (const char *)old_ns + durations[i].offset, sizeof old_value);
        memcpy(&new_value, (const char *)new_ns + durations[i].offset, sizeof new_value);
        snprintf(name, sizeof name, "%s %s (ms)", new_ns->ns, durations[i].name);
        policy |= COMPARE_NUMBER(changed, name, old_value, new_value);
    }
    snprintf(name, sizeof name, "%s requireTimeFieldIndex", new_ns->ns);
    policy |= COMPARE_NUMBER(changed, name, old_ns->require_time_field_index, new_ns->require_time_field_index);
    plan->restart_workers |= policy;
}

static void compare_namespaces(const config_t *old_config, const config_t *new_config, reload_plan_t *plan)
{
    for (size_t i = 0; i < new_config->namespace_count; i++) {
        const config_namespace_t *new_ns = &new_config->namespaces[i];
        const config_namespace_t *old_ns = config_find_namespace(old_config, new_ns->ns);
        if (old_ns == NULL) {
            note(&plan->changed, "namespace %s added (timeField %s, maxAge %lldms)", new_ns->ns, new_ns->time_field,
                 (long long)new_ns->max_age_ms);
            plan->restart_workers = true;
        } else {
            compare_namespace(old_ns, new_ns, plan);
        }
    }
    for (size_t i = 0; i < old_config->namespace_count; i++) {
        if (config_find_namespace(new_config, old_config->namespaces[i].ns) == NULL) {
            note(&plan->changed, "namespace %s removed (routed to the archive)", old_config->namespaces[i].ns);
            plan->removes_namespaces = true;
            plan->restart_workers = true;
        }
    }
}

static void compare_tls(const config_t *old_config, const config_t *new_config, reload_plan_t *plan)
{
    if (old_config->tls_mode != new_config->tls_mode) {
        note(&plan->changed, "tlsMode: %s -> %s", tls_mode_name(old_config->tls_mode),
             tls_mode_name(new_config->tls_mode));
    }
    if (!same_text(old_config->tls_certificate_key_file, new_config->tls_certificate_key_file)) {
        note(&plan->changed, "tlsCertificateKeyFile: %s -> %s", shown(old_config->tls_certificate_key_file),
             shown(new_config->tls_certificate_key_file));
    }
    if (!same_text(old_config->tls_ca_file, new_config->tls_ca_file)) {
        note(&plan->changed, "tlsCAFile: %s -> %s", shown(old_config->tls_ca_file), shown(new_config->tls_ca_file));
    }
    COMPARE_NUMBER(&plan->changed, "tlsAllowConnectionsWithoutCertificates",
                   old_config->tls_allow_connections_without_certificates,
                   new_config->tls_allow_connections_without_certificates);
    /* The same file names may hold renewed certificates: read them again always. */
    plan->reload_tls = new_config->tls_mode != TLS_MODE_DISABLED;
}

void reload_plan_compare(const config_t *old_config, const config_t *new_config, reload_plan_t *plan)
{
    bson_t *changed = &plan->changed;
    bson_init(&plan->changed);
    bson_init(&plan->refused);
    plan->restart_workers = false;
    plan->removes_namespaces = false;
    refuse_fixed(old_config, new_config, &plan->refused);
    compare_namespaces(old_config, new_config, plan);
    compare_tls(old_config, new_config, plan);
    COMPARE_NUMBER(changed, "maxConnections", old_config->max_connections, new_config->max_connections);
    COMPARE_NUMBER(changed, "readYourWritesWait (ms)", old_config->read_your_writes_wait_ms,
                   new_config->read_your_writes_wait_ms);
    COMPARE_NUMBER(changed, "failoverWait (ms)", old_config->failover_wait_ms, new_config->failover_wait_ms);
    COMPARE_NUMBER(changed, "faultInLimit", old_config->fault_in_limit, new_config->fault_in_limit);
    COMPARE_NUMBER(changed, "slowOpThresholdMs", old_config->slow_op_threshold_ms, new_config->slow_op_threshold_ms);
    COMPARE_NUMBER(changed, "idleTimeout (ms)", old_config->idle_timeout_ms, new_config->idle_timeout_ms);
    COMPARE_NUMBER(changed, "receiveTimeout (ms)", old_config->receive_timeout_ms, new_config->receive_timeout_ms);
    COMPARE_NUMBER(changed, "sendTimeout (ms)", old_config->send_timeout_ms, new_config->send_timeout_ms);
    if (old_config->log_format != new_config->log_format) {
        note(changed, "logFormat: %s -> %s", old_config->log_format == TC_LOG_FORMAT_JSON ? "json" : "text",
             new_config->log_format == TC_LOG_FORMAT_JSON ? "json" : "text");
    }
    bool workers = false;
    workers |= COMPARE_NUMBER(changed, "feederEnabled", old_config->feeder_enabled, new_config->feeder_enabled);
    workers |= COMPARE_NUMBER(changed, "evictorEnabled", old_config->evictor_enabled, new_config->evictor_enabled);
    workers |= COMPARE_NUMBER(changed, "warmerEnabled", old_config->warmer_enabled, new_config->warmer_enabled);
    workers |= COMPARE_NUMBER(changed, "leaseTimeout (ms)", old_config->lease_timeout_ms, new_config->lease_timeout_ms);
    workers |= COMPARE_NUMBER(changed, "warmerRateLimit", old_config->warmer_rate_limit, new_config->warmer_rate_limit);
    plan->restart_workers |= workers;
}

void reload_plan_cleanup(reload_plan_t *plan)
{
    bson_destroy(&plan->changed);
    bson_destroy(&plan->refused);
}
