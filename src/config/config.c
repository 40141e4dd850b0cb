/* Loads the proxy's YAML configuration through one table of settings (name, scope,
 * type, target, default, bounds, help), as pgbouncer's loader does: defaults are
 * parsed like file values, a misspelt key gets the nearest known name, and every
 * error names the file and line. */
#include "config/config.h"

#include "common/units.h"
#include "security/tls.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <mongoc/mongoc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

/* Configurations are a few lines; anything larger is not one. */
#define CONFIG_MAX_FILE_SIZE (1024 * 1024)
/* MongoDB's limits on names. */
#define DATABASE_NAME_MAX 63
#define NAMESPACE_MAX 255

typedef enum setting_scope {
    SCOPE_TOP,
    SCOPE_NAMESPACE,
} setting_scope_t;

typedef enum setting_type {
    TYPE_ADDRESS,
    TYPE_URI,
    TYPE_NAMESPACE_LIST,
    TYPE_INTEGER,
    TYPE_DURATION,
    TYPE_BOOLEAN,
    TYPE_NAMESPACE_NAME,
    TYPE_FIELD_PATH,
    TYPE_COVERAGE,
    TYPE_AUTHORIZATION,
    TYPE_TLS_MODE,
    TYPE_FILE,
    TYPE_LOG_FORMAT,
} setting_type_t;

typedef struct setting {
    const char *name;
    setting_scope_t scope;
    size_t offset;            /* the field in config_t or config_namespace_t */
    setting_type_t type;
    const char *default_text; /* parsed like a value from the file; NULL: none */
    bool required;
    int64_t minimum;          /* integers; durations in milliseconds */
    int64_t maximum;
    const char *help;
} setting_t;

#define TOP(field) SCOPE_TOP, offsetof(config_t, field)
#define NAMESPACE(field) SCOPE_NAMESPACE, offsetof(config_namespace_t, field)
#define HOUR_MS INT64_C(3600000)
#define DAY_MS (24 * HOUR_MS)

/* Keep in step with the tables in config.h and README.md. Defaults derived from
 * maxAge (safetySlack, evictorPeriod, warmerPeriod) are set in namespace_finish(). */
static const setting_t settings[] = {
    {"listen", TOP(listen), TYPE_ADDRESS, "127.0.0.1:27017", false, 0, 0, "where clients connect"},
    {"archive", TOP(archive_uri), TYPE_URI, NULL, true, 0, 0, "the deployment that holds everything"},
    {"fast", TOP(fast_uri), TYPE_URI, NULL, true, 0, 0, "the small deployment holding the recent window"},
    {"namespaces", TOP(namespaces), TYPE_NAMESPACE_LIST, NULL, false, 0, 0, "tiering policies"},
    {"maxConnections", TOP(max_connections), TYPE_INTEGER, "1000", false, 1, 1000000,
     "client connections open at once"},
    {"readYourWritesWait", TOP(read_your_writes_wait_ms), TYPE_DURATION, "5s", false, 0, HOUR_MS,
     "how long a read sent to the archive waits for the feeder"},
    {"failoverWait", TOP(failover_wait_ms), TYPE_DURATION, "10s", false, 0, HOUR_MS,
     "how long a retried command waits for its tier's primary to be found again (0: no retries)"},
    {"faultInLimit", TOP(fault_in_limit), TYPE_INTEGER, "1000", false, 0, 10000000,
     "archive documents one write may fault in (and documents whose unique keys its updates compute)"},
    {"slowOpThresholdMs", TOP(slow_op_threshold_ms), TYPE_INTEGER, "100", false, 0, 86400000,
     "log every command slower than this many milliseconds, with where its time went (as mongod)"},
    {"feederEnabled", TOP(feeder_enabled), TYPE_BOOLEAN, "true", false, 0, 0, "run the feeder"},
    {"evictorEnabled", TOP(evictor_enabled), TYPE_BOOLEAN, "true", false, 0, 0, "run the evictor"},
    {"warmerEnabled", TOP(warmer_enabled), TYPE_BOOLEAN, "true", false, 0, 0, "run the warmer"},
    {"leaseTimeout", TOP(lease_timeout_ms), TYPE_DURATION, "10s", false, 500, HOUR_MS,
     "how long a worker's lease lasts unrenewed before another proxy of this config takes it over"},
    {"warmerRateLimit", TOP(warmer_rate_limit), TYPE_INTEGER, "0", false, 0, 10000000,
     "archive documents the warmer reads per second at most (0: only its adaptive pace)"},
    {"authorization", TOP(authorization_enabled), TYPE_AUTHORIZATION, "disabled", false, 0, 0,
     "enabled: clients authenticate against the archive's users and every command is checked"},
    {"idleTimeout", TOP(idle_timeout_ms), TYPE_DURATION, "0s", false, 0, DAY_MS,
     "close a client connection silent this long (0s: never, as mongos)"},
    {"receiveTimeout", TOP(receive_timeout_ms), TYPE_DURATION, "30s", false, 1, DAY_MS,
     "close a client that leaves a message or TLS handshake unfinished this long"},
    {"sendTimeout", TOP(send_timeout_ms), TYPE_DURATION, "30s", false, 1, DAY_MS,
     "close a client that reads nothing of a reply this long"},
    {"tlsMode", TOP(tls_mode), TYPE_TLS_MODE, "disabled", false, 0, 0,
     "TLS for clients, as mongod's net.tls.mode"},
    {"tlsCertificateKeyFile", TOP(tls_certificate_key_file), TYPE_FILE, NULL, false, 0, 0,
     "PEM with the proxy's certificate and key"},
    {"tlsCAFile", TOP(tls_ca_file), TYPE_FILE, NULL, false, 0, 0, "PEM with the CAs of client certificates"},
    {"tlsAllowConnectionsWithoutCertificates", TOP(tls_allow_connections_without_certificates), TYPE_BOOLEAN,
     "false", false, 0, 0, "with tlsCAFile, accept clients that present no certificate"},
    {"metricsListen", TOP(metrics_listen), TYPE_ADDRESS, NULL, false, 0, 0,
     "where GET /metrics serves Prometheus text (none: off)"},
    {"logFormat", TOP(log_format), TYPE_LOG_FORMAT, "text", false, 0, 0,
     "text (mongod 4.2's lines) or json (mongod 4.4+'s structured lines)"},
    {"ns", NAMESPACE(ns), TYPE_NAMESPACE_NAME, NULL, true, 0, 0, "database.collection"},
    {"timeField", NAMESPACE(time_field), TYPE_FIELD_PATH, NULL, true, 0, 0, "the BSON date field"},
    {"maxAge", NAMESPACE(max_age_ms), TYPE_DURATION, NULL, true, 1, INT64_MAX, "the recent window's length"},
    {"coverage", NAMESPACE(coverage), TYPE_COVERAGE, "warm", false, 0, 0, "warm or complete"},
    {"safetySlack", NAMESPACE(safety_slack_ms), TYPE_DURATION, NULL, false, 0, INT64_MAX,
     "horizon = now - maxAge + safetySlack"},
    {"evictorPeriod", NAMESPACE(evictor_period_ms), TYPE_DURATION, NULL, false, 1, INT64_MAX,
     "how often the evictor runs"},
    {"warmerPeriod", NAMESPACE(warmer_period_ms), TYPE_DURATION, NULL, false, 1, INT64_MAX,
     "how often the warmer runs"},
    {"indexSyncPeriod", NAMESPACE(index_sync_period_ms), TYPE_DURATION, "1m", false, 100, HOUR_MS,
     "how often the archive's indexes and validator are copied to the fast tier again"},
    {"requireTimeFieldIndex", NAMESPACE(require_time_field_index), TYPE_BOOLEAN, "true", false, 0, 0,
     "refuse to start when the archive has no index whose first key is timeField (false: a warning)"},
};

#define SETTING_COUNT (sizeof settings / sizeof settings[0])

typedef struct loader {
    const char *name; /* the file, in messages */
    yaml_document_t *document;
    bson_error_t *error;
} loader_t;

/* A scalar value as the YAML gave it. */
typedef struct scalar {
    const char *text;
    size_t length;
    bool plain;    /* unquoted: YAML's core schema may read it as null, a boolean or a number */
    uint32_t line; /* 0 for built-in defaults */
} scalar_t;

static bool fail_at(const loader_t *loader, uint32_t line, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static bool fail_at(const loader_t *loader, uint32_t line, const char *format, ...)
{
    char reason[400];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(reason, sizeof reason, format, arguments);
    va_end(arguments);
    return tc_error_set(loader->error, TC_ERR_BAD_VALUE, "%s:%u: %s", loader->name, line, reason);
}

static uint32_t node_line(const yaml_node_t *node)
{
    return (uint32_t)node->start_mark.line + 1;
}

static const char *node_kind(const yaml_node_t *node)
{
    return node->type == YAML_SEQUENCE_NODE ? "a list" : node->type == YAML_MAPPING_NODE ? "a mapping" : "a value";
}

/* ---- YAML's core schema ---------------------------------------------------- */

static bool all_of(const char *text, const char *allowed)
{
    return text[0] != '\0' && strspn(text, allowed) == strlen(text);
}

/* What a plain scalar means under YAML 1.2's core schema: NULL for a string, else
 * "null", "a boolean", "an integer" or "a number". */
static const char *plain_scalar_type(const char *text)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    static const char *const booleans[] = {"true", "True", "TRUE", "false", "False", "FALSE"};
    static const char *const specials[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
                                           "-.Inf", "-.INF", ".nan", ".NaN", ".NAN"};
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++) {
        if (strcmp(text, nulls[i]) == 0) {
            return "null";
        }
    }
    for (size_t i = 0; i < sizeof booleans / sizeof booleans[0]; i++) {
        if (strcmp(text, booleans[i]) == 0) {
            return "a boolean";
        }
    }
    const char *digits = text + (text[0] == '-' || text[0] == '+');
    if (all_of(digits, "0123456789") || (strncmp(text, "0x", 2) == 0 && all_of(text + 2, "0123456789abcdefABCDEF")) ||
        (strncmp(text, "0o", 2) == 0 && all_of(text + 2, "01234567"))) {
        return "an integer";
    }
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        if (strcmp(text, specials[i]) == 0) {
            return "a number";
        }
    }
    /* [-+]?(.[0-9]+|[0-9]+(.[0-9]*)?)([eE][-+]?[0-9]+)? */
    const char *cursor = digits;
    size_t integer = strspn(cursor, "0123456789");
    cursor += integer;
    size_t fraction = 0;
    if (*cursor == '.') {
        cursor++;
        fraction = strspn(cursor, "0123456789");
        cursor += fraction;
    }
    if (integer + fraction == 0) {
        return NULL;
    }
    if (*cursor == 'e' || *cursor == 'E') {
        cursor++;
        cursor += (*cursor == '-' || *cursor == '+');
        size_t exponent = strspn(cursor, "0123456789");
        if (exponent == 0) {
            return NULL;
        }
        cursor += exponent;
    }
    return *cursor == '\0' ? "a number" : NULL;
}

/* A string setting's value: quoted, or plain text the core schema leaves a string. */
static bool require_string(const loader_t *loader, const setting_t *setting, const scalar_t *value)
{
    const char *type = value->plain ? plain_scalar_type(value->text) : NULL;
    if (type != NULL) {
        return fail_at(loader, value->line, "%s must be a string, not %s ('%s'); quote it if that is really the name",
                       setting->name, type, value->text);
    }
    if (strlen(value->text) != value->length) {
        return fail_at(loader, value->line, "%s must not contain a NUL character", setting->name);
    }
    return true;
}

/* ---- value parsers --------------------------------------------------------- */

static void replace_string(char **field, const char *text, size_t length)
{
    bson_free(*field);
    *field = bson_strndup(text, length);
}

static bool parse_address(const loader_t *loader, const setting_t *setting, const scalar_t *value, void *field)
{
    config_address_t *address = field;
    const char *text = value->text;
    const char *colon = strrchr(text, ':');
    const char *host = text;
    size_t host_length;
    if (colon == NULL || plain_scalar_type(text) != NULL) {
        return fail_at(loader, value->line, "%s must be host:port, such as 127.0.0.1:27017, not '%s'", setting->name,
                       text);
    }
    host_length = (size_t)(colon - text);
    if (text[0] == '[') {
        /* [IPv6]:port */
        if (host_length < 3 || text[host_length - 1] != ']') {
            return fail_at(loader, value->line, "%s: write an IPv6 address as [::1]:27017, not '%s'", setting->name,
                           text);
        }
        host++;
        host_length -= 2;
    } else if (memchr(text, ':', host_length) != NULL) {
        return fail_at(loader, value->line, "%s: write an IPv6 address in brackets, as [::1]:27017, not '%s'",
                       setting->name, text);
    }
    if (host_length == 0 || memchr(host, ' ', host_length) != NULL) {
        return fail_at(loader, value->line, "%s needs a host before the port, such as 127.0.0.1:27017, not '%s'",
                       setting->name, text);
    }
    const char *port_text = colon + 1;
    if (!all_of(port_text, "0123456789") || strlen(port_text) > 5 || atol(port_text) < 1 ||
        atol(port_text) > 65535) {
        return fail_at(loader, value->line, "%s: the port must be a number from 1 to 65535, not '%s'", setting->name,
                       port_text);
    }
    replace_string(&address->host, host, host_length);
    address->port = (uint16_t)atol(port_text);
    return true;
}

static bool parse_uri(const loader_t *loader, const setting_t *setting, const scalar_t *value, void *field)
{
    bson_error_t uri_error;
    if (!require_string(loader, setting, value)) {
        return false;
    }
    mongoc_uri_t *uri = mongoc_uri_new_with_error(value->text, &uri_error);
    if (uri == NULL) {
        /* The URI itself is not repeated: it may hold a password. */
        return fail_at(loader, value->line, "%s is not a valid MongoDB URI (mongodb://host:port/?options): %s",
                       setting->name, uri_error.message);
    }
    /* The proxy's own pools speak SCRAM only (backend_auth.c); say so now. */
    const char *mechanism = mongoc_uri_get_auth_mechanism(uri);
    if (mechanism != NULL && strcmp(mechanism, "SCRAM-SHA-1") != 0 && strcmp(mechanism, "SCRAM-SHA-256") != 0) {
        fail_at(loader, value->line,
                "%s: the proxy authenticates to a tier with SCRAM-SHA-256 or SCRAM-SHA-1, not authMechanism=%s",
                setting->name, mechanism);
        mongoc_uri_destroy(uri);
        return false;
    }
    mongoc_uri_destroy(uri);
    replace_string(field, value->text, value->length);
    return true;
}

static bool parse_integer(const loader_t *loader, const setting_t *setting, const scalar_t *value, void *field)
{
    const char *text = value->text;
    const char *digits = text + (text[0] == '-' || text[0] == '+');
    errno = 0;
    long long number = strtoll(text, NULL, 10);
    if (!all_of(digits, "0123456789") || errno == ERANGE || number < setting->minimum ||
        number > setting->maximum) {
        return fail_at(loader, value->line, "%s must be a whole number from %" PRId64 " to %" PRId64 ", not '%s'",
                       setting->name, setting->minimum, setting->maximum, text);
    }
    *(int64_t *)field = number;
    return true;
}

static void format_duration(int64_t ms, char *out, size_t size)
{
    static const struct {
        int64_t milliseconds;
        const char *unit;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (ms != 0 && ms % units[i].milliseconds == 0) {
            snprintf(out, size, "%" PRId64 "%s", ms / units[i].milliseconds, units[i].unit);
            return;
        }
    }
    snprintf(out, size, "%" PRId64 "ms", ms);
}

static bool parse_duration(const loader_t *loader, const setting_t *setting, const scalar_t *value, void *field)
{
    bson_error_t units_error;
    int64_t milliseconds;
    /* Keep the conversion to milliseconds inside int64_t (a billion days is plenty). */
    if (strtod(value->text, NULL) > 1e9) {
        return fail_at(loader, value->line, "%s: '%s' is too long a duration", setting->name, value->text);
    }
    if (!units_parse_duration_ms(value->text, &milliseconds, &units_error)) {
        return fail_at(loader, value->line, "%s: %s", setting->name, units_error.message);
    }
    if (milliseconds < setting->minimum || milliseconds > setting->maximum) {
        char limit[32];
        if (milliseconds < setting->minimum) {
            format_duration(setting->minimum, limit, sizeof limit);
            return fail_at(loader, value->line, "%s must be at least %s, not '%s'", setting->name, limit, value->text);
        }
        format_duration(setting->maximum, limit, sizeof limit);
        return fail_at(loader, value->line, "%s must be at most %s, not '%s'", setting->name, limit, value->text);
    }
    *(int64_t *)field = milliseconds;
    return true;
}

static bool parse_boolean(const loader_t *loader, const setting_t *setting, const scalar_t *value, void *field)
{
    if (strcasecmp(value->text, "true") == 0) {
        *(bool *)field = true;
    } else if (strcasecmp(value->text, "false") == 0) {
        *(bool *)field = false;
    } else {
        return fail_at(loader, value->line, "%s must be true or false, not '%s'", setting->name, value->text);
    }
    return true;
}

static bool parse_namespace_name(const loader_t *loader, const setting_t *setting, const scalar_t *value,
                                 void *field)
{
    const char *text = value->text;
    if (!require_string(loader, setting, value)) {
        return false;
    }
    const char *dot = strchr(text, '.');
    if (dot == NULL || dot == text || dot[1] == '\0') {
        return fail_at(loader, value->line, "%s must be 'database.collection', not '%s'", setting->name, text);
    }
    size_t database_length = (size_t)(dot - text);
    if (database_length > DATABASE_NAME_MAX) {
        return fail_at(loader, value->line, "%s: database name '%.*s' is longer than %d bytes", setting->name,
                       (int)database_length, text, DATABASE_NAME_MAX);
    }
    if (strcspn(text, "/\\ \"$") < database_length) {
        return fail_at(loader, value->line, "%s: database name '%.*s' may not contain / \\ space \" or $",
                       setting->name, (int)database_length, text);
    }
    if (strchr(dot + 1, '$') != NULL) {
        return fail_at(loader, value->line, "%s: collection name '%s' may not contain $", setting->name, dot + 1);
    }
    if (strncmp(dot + 1, "system.", 7) == 0) {
        return fail_at(loader, value->line, "%s: system collections ('%s') cannot be tiered", setting->name, text);
    }
    if (value->length > NAMESPACE_MAX) {
        return fail_at(loader, value->line, "%s '%.40s...' is longer than MongoDB's %d bytes", setting->name, text,
                       NAMESPACE_MAX);
    }
    replace_string(field, text, value->length);
    return true;
}

static bool parse_field_path(const loader_t *loader, const setting_t *setting, const scalar_t *value, void *field)
{
    const char *text = value->text;
    if (!require_string(loader, setting, value)) {
        return false;
    }
    if (text[0] == '\0') {
        return fail_at(loader, value->line, "%s must name a field, such as createdAt", setting->name);
    }
    if (text[0] == '$') {
        return fail_at(loader, value->line, "%s must be a field name, not '%s' (no leading $)", setting->name, text);
    }
    if (text[0] == '.' || text[value->length - 1] == '.' || strstr(text, "..") != NULL) {
        return fail_at(loader, value->line, "%s '%s' has an empty part between dots", setting->name, text);
    }
    replace_string(field, text, value->length);
    return true;
}

static bool parse_coverage(const loader_t *loader, const setting_t *setting, const scalar_t *value, void *field)
{
    if (strcmp(value->text, "warm") == 0) {
        *(config_coverage_t *)field = CONFIG_COVERAGE_WARM;
    } else if (strcmp(value->text, "complete") == 0) {
        *(config_coverage_t *)field = CONFIG_COVERAGE_COMPLETE;
    } else {
        return fail_at(loader, value->line,
                       "%s must be warm (the warmer copies the window first) or complete (the fast tier "
                       "already holds it), not '%s'",
                       setting->name, value->text);
    }
    return true;
}

static bool parse_authorization(const loader_t *loader, const setting_t *setting, const scalar_t *value, void *field)
{
    if (strcmp(value->text, "enabled") == 0) {
        *(bool *)field = true;
    } else if (strcmp(value->text, "disabled") == 0) {
        *(bool *)field = false;
    } else {
        return fail_at(loader, value->line, "%s must be enabled or disabled (as mongod's security.authorization), not '%s'",
                       setting->name, value->text);
    }
    return true;
}

static bool parse_tls_mode(const loader_t *loader, const setting_t *setting, const scalar_t *value, void *field)
{
    if (!tls_mode_from_name(value->text, field)) {
        return fail_at(loader, value->line, "%s must be disabled, allowTLS, preferTLS or requireTLS, not '%s'",
                       setting->name, value->text);
    }
    return true;
}

/* A file the proxy reads at start: it must be readable now (what it holds is
 * checked once every key is known, in check_tls). */
static bool parse_file(const loader_t *loader, const setting_t *setting, const scalar_t *value, void *field)
{
    if (!require_string(loader, setting, value)) {
        return false;
    }
    if (value->length == 0) {
        return fail_at(loader, value->line, "%s must name a file", setting->name);
    }
    FILE *file = fopen(value->text, "rb");
    if (file == NULL) {
        return fail_at(loader, value->line, "%s: cannot read '%s': %s", setting->name, value->text, strerror(errno));
    }
    fclose(file);
    replace_string(field, value->text, value->length);
    return true;
}

static bool parse_log_format(const loader_t *loader, const setting_t *setting, const scalar_t *value, void *field)
{
    if (!tc_log_format_from_name(value->text, field)) {
        return fail_at(loader, value->line, "%s must be text or json, not '%s'", setting->name, value->text);
    }
    return true;
}

typedef bool (*setting_parse_fn)(const loader_t *loader, const setting_t *setting, const scalar_t *value,
                                 void *field);

static setting_parse_fn parser_of(setting_type_t type)
{
    switch (type) {
    case TYPE_ADDRESS: return parse_address;
    case TYPE_URI: return parse_uri;
    case TYPE_INTEGER: return parse_integer;
    case TYPE_DURATION: return parse_duration;
    case TYPE_BOOLEAN: return parse_boolean;
    case TYPE_NAMESPACE_NAME: return parse_namespace_name;
    case TYPE_FIELD_PATH: return parse_field_path;
    case TYPE_COVERAGE: return parse_coverage;
    case TYPE_AUTHORIZATION: return parse_authorization;
    case TYPE_TLS_MODE: return parse_tls_mode;
    case TYPE_FILE: return parse_file;
    case TYPE_LOG_FORMAT: return parse_log_format;
    case TYPE_NAMESPACE_LIST: break;
    }
    return NULL;
}

static const char *type_description(setting_type_t type)
{
    switch (type) {
    case TYPE_ADDRESS: return "host:port";
    case TYPE_URI: return "a mongodb:// URI";
    case TYPE_NAMESPACE_LIST: return "a list of namespace entries";
    case TYPE_INTEGER: return "a whole number";
    case TYPE_DURATION: return "a duration such as 30d or 500ms";
    case TYPE_BOOLEAN: return "true or false";
    case TYPE_NAMESPACE_NAME: return "'database.collection'";
    case TYPE_FIELD_PATH: return "a field name";
    case TYPE_COVERAGE: return "warm or complete";
    case TYPE_AUTHORIZATION: return "enabled or disabled";
    case TYPE_TLS_MODE: return "disabled, allowTLS, preferTLS or requireTLS";
    case TYPE_FILE: return "a file name";
    case TYPE_LOG_FORMAT: return "text or json";
    }
    return "a value";
}

/* ---- unknown keys ------------------------------------------------------------ */

/* Levenshtein distance, ignoring case (a wrongly cased key is the commonest slip). */
static size_t edit_distance(const char *left, const char *right)
{
    size_t left_length = strlen(left);
    size_t right_length = strlen(right);
    size_t row[65];
    if (left_length > 64 || right_length > 64) {
        return SIZE_MAX;
    }
    for (size_t j = 0; j <= right_length; j++) {
        row[j] = j;
    }
    for (size_t i = 1; i <= left_length; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= right_length; j++) {
            size_t above = row[j];
            size_t cost = tolower((unsigned char)left[i - 1]) == tolower((unsigned char)right[j - 1]) ? 0 : 1;
            size_t best = diagonal + cost;
            if (above + 1 < best) {
                best = above + 1;
            }
            if (row[j - 1] + 1 < best) {
                best = row[j - 1] + 1;
            }
            row[j] = best;
            diagonal = above;
        }
    }
    return row[right_length];
}

static bool unknown_key(const loader_t *loader, const char *key, uint32_t line, setting_scope_t scope)
{
    const char *where = scope == SCOPE_TOP ? "at the top level" : "in a namespace entry";
    const setting_t *nearest = NULL;
    size_t nearest_distance = SIZE_MAX;
    for (size_t i = 0; i < SETTING_COUNT; i++) {
        if (strcmp(settings[i].name, key) == 0) {
            return fail_at(loader, line,
                           scope == SCOPE_TOP ? "%s is a namespace setting: put it in each entry of namespaces"
                                              : "%s is a top-level setting, not a namespace one",
                           key);
        }
        size_t distance = edit_distance(key, settings[i].name);
        if (settings[i].scope == scope && distance < nearest_distance) {
            nearest = &settings[i];
            nearest_distance = distance;
        }
    }
    /* Close enough to be a slip, and not so short that every name is close. */
    size_t allowed = strlen(key) / 3 > 2 ? strlen(key) / 3 : 2;
    if (nearest != NULL && nearest_distance <= allowed && nearest_distance < strlen(key)) {
        return fail_at(loader, line, "unknown key '%s' %s; did you mean '%s'?", key, where, nearest->name);
    }
    return fail_at(loader, line, "unknown key '%s' %s", key, where);
}

/* ---- mappings ------------------------------------------------------------------ */

static const setting_t *find_setting(setting_scope_t scope, const char *name)
{
    for (size_t i = 0; i < SETTING_COUNT; i++) {
        if (settings[i].scope == scope && strcmp(settings[i].name, name) == 0) {
            return &settings[i];
        }
    }
    return NULL;
}

static bool apply_defaults(const loader_t *loader, setting_scope_t scope, void *target)
{
    for (size_t i = 0; i < SETTING_COUNT; i++) {
        if (settings[i].scope == scope && settings[i].default_text != NULL) {
            scalar_t value = {settings[i].default_text, strlen(settings[i].default_text), true, 0};
            if (!parser_of(settings[i].type)(loader, &settings[i], &value, (char *)target + settings[i].offset)) {
                return false;
            }
        }
    }
    return true;
}

static bool load_namespaces(const loader_t *loader, yaml_node_t *list, config_t *config);

/* Reads one mapping of settings of scope into target; lines[i] receives the line
 * where settings[i] was given (0: not given). */
static bool load_mapping(const loader_t *loader, yaml_node_t *mapping, setting_scope_t scope, void *target,
                         uint32_t lines[SETTING_COUNT])
{
    for (yaml_node_pair_t *pair = mapping->data.mapping.pairs.start; pair < mapping->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(loader->document, pair->key);
        yaml_node_t *value = yaml_document_get_node(loader->document, pair->value);
        if (key == NULL || value == NULL) {
            return fail_at(loader, node_line(mapping), "incomplete key and value");
        }
        if (key->type != YAML_SCALAR_NODE) {
            return fail_at(loader, node_line(key), "a key must be a plain name, not %s", node_kind(key));
        }
        const char *name = (const char *)key->data.scalar.value;
        const setting_t *setting = find_setting(scope, name);
        if (setting == NULL) {
            return unknown_key(loader, name, node_line(key), scope);
        }
        size_t index = (size_t)(setting - settings);
        if (lines[index] != 0) {
            return fail_at(loader, node_line(key), "%s is given twice (first at line %u)", name, lines[index]);
        }
        lines[index] = node_line(key);
        if (setting->type == TYPE_NAMESPACE_LIST) {
            if (!load_namespaces(loader, value, target)) {
                return false;
            }
            continue;
        }
        if (value->type != YAML_SCALAR_NODE) {
            return fail_at(loader, node_line(value), "%s must be %s, not %s", name, type_description(setting->type),
                           node_kind(value));
        }
        scalar_t scalar = {(const char *)value->data.scalar.value, value->data.scalar.length,
                           value->data.scalar.style == YAML_PLAIN_SCALAR_STYLE, node_line(value)};
        if (!parser_of(setting->type)(loader, setting, &scalar, (char *)target + setting->offset)) {
            return false;
        }
    }
    for (size_t i = 0; i < SETTING_COUNT; i++) {
        if (settings[i].scope == scope && settings[i].required && lines[i] == 0) {
            return fail_at(loader, node_line(mapping), "missing required key '%s' %s", settings[i].name,
                           scope == SCOPE_TOP ? "(archive and fast are required)"
                                              : "in this namespace entry (each needs ns, timeField and maxAge)");
        }
    }
    return true;
}

static int64_t clamp(int64_t value, int64_t low, int64_t high)
{
    return value < low ? low : value > high ? high : value;
}

/* Where a setting was given in the mapping whose lines these are (0: not given). */
static uint32_t line_of(const uint32_t lines[SETTING_COUNT], setting_scope_t scope, const char *name)
{
    const setting_t *setting = find_setting(scope, name);
    return setting != NULL ? lines[setting - settings] : 0;
}

/* Defaults relative to maxAge, so tests that shrink maxAge to seconds get workers
 * that keep up, the names split once for every caller, then the checks across keys. */
static bool namespace_finish(const loader_t *loader, config_namespace_t *entry, const uint32_t lines[SETTING_COUNT])
{
    const int64_t minute = 60000;
    if (line_of(lines, SCOPE_NAMESPACE, "safetySlack") == 0) {
        entry->safety_slack_ms = clamp(entry->max_age_ms / 10, 0, 15 * minute);
    }
    if (line_of(lines, SCOPE_NAMESPACE, "evictorPeriod") == 0) {
        entry->evictor_period_ms = clamp(entry->max_age_ms / 20, 100, minute);
    }
    if (line_of(lines, SCOPE_NAMESPACE, "warmerPeriod") == 0) {
        entry->warmer_period_ms = clamp(entry->max_age_ms / 20, 100, minute);
    }
    const char *dot = strchr(entry->ns, '.'); /* parse_namespace_name() checked it is there */
    entry->database = bson_strndup(entry->ns, (size_t)(dot - entry->ns));
    entry->collection = bson_strdup(dot + 1);
    if (entry->safety_slack_ms >= entry->max_age_ms) {
        char slack[32];
        char age[32];
        format_duration(entry->safety_slack_ms, slack, sizeof slack);
        format_duration(entry->max_age_ms, age, sizeof age);
        return fail_at(loader, line_of(lines, SCOPE_NAMESPACE, "safetySlack"),
                       "safetySlack (%s) must be shorter than maxAge (%s): the horizon would never be in the past",
                       slack, age);
    }
    return true;
}

static bool load_namespaces(const loader_t *loader, yaml_node_t *list, config_t *config)
{
    if (list->type == YAML_SCALAR_NODE && list->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        plain_scalar_type((const char *)list->data.scalar.value) != NULL &&
        strcmp(plain_scalar_type((const char *)list->data.scalar.value), "null") == 0) {
        return true; /* `namespaces:` with nothing after it */
    }
    if (list->type != YAML_SEQUENCE_NODE) {
        return fail_at(loader, node_line(list),
                       "namespaces must be a list of entries (- ns: db.collection ...), not %s", node_kind(list));
    }
    size_t count = (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
    config->namespaces = bson_malloc0(sizeof *config->namespaces * (count ? count : 1));
    for (yaml_node_item_t *item = list->data.sequence.items.start; item < list->data.sequence.items.top; item++) {
        yaml_node_t *node = yaml_document_get_node(loader->document, *item);
        uint32_t lines[SETTING_COUNT] = {0};
        if (node == NULL || node->type != YAML_MAPPING_NODE) {
            return fail_at(loader, node ? node_line(node) : node_line(list),
                           "each entry of namespaces must be a mapping with ns, timeField and maxAge, not %s",
                           node ? node_kind(node) : "nothing");
        }
        config_namespace_t *entry = &config->namespaces[config->namespace_count];
        entry->index = config->namespace_count++;
        entry->line = node_line(node);
        if (!apply_defaults(loader, SCOPE_NAMESPACE, entry) ||
            !load_mapping(loader, node, SCOPE_NAMESPACE, entry, lines) || !namespace_finish(loader, entry, lines)) {
            return false;
        }
        for (size_t i = 0; i + 1 < config->namespace_count; i++) {
            if (strcmp(config->namespaces[i].ns, entry->ns) == 0) {
                return fail_at(loader, line_of(lines, SCOPE_NAMESPACE, "ns"),
                               "namespace %s is configured twice (first at line %u)", entry->ns,
                               config->namespaces[i].line);
            }
        }
    }
    return true;
}

/* Two tiers on one server would let the evictor delete the only copy. */
static bool check_distinct_tiers(const loader_t *loader, const config_t *config, uint32_t fast_line)
{
    mongoc_uri_t *archive = mongoc_uri_new(config->archive_uri);
    mongoc_uri_t *fast = mongoc_uri_new(config->fast_uri);
    bool ok = true;
    if (archive != NULL && fast != NULL) {
        for (const mongoc_host_list_t *a = mongoc_uri_get_hosts(archive); a != NULL && ok; a = a->next) {
            for (const mongoc_host_list_t *f = mongoc_uri_get_hosts(fast); f != NULL && ok; f = f->next) {
                if (strcasecmp(a->host_and_port, f->host_and_port) == 0) {
                    ok = fail_at(loader, fast_line,
                                 "fast and archive both name the server %s: the fast tier must be a separate "
                                 "deployment",
                                 f->host_and_port);
                }
            }
        }
    }
    mongoc_uri_destroy(archive);
    mongoc_uri_destroy(fast);
    return ok;
}

/* The front door's TLS keys together, and the files loaded as the proxy will
 * load them, so a certificate that does not parse is refused at its line. */
static bool check_tls(const loader_t *loader, const config_t *config, const uint32_t lines[SETTING_COUNT])
{
    uint32_t mode_line = line_of(lines, SCOPE_TOP, "tlsMode");
    uint32_t certificate_line = line_of(lines, SCOPE_TOP, "tlsCertificateKeyFile");
    uint32_t ca_line = line_of(lines, SCOPE_TOP, "tlsCAFile");
    if (config->tls_mode == TLS_MODE_DISABLED) {
        if (certificate_line != 0 || ca_line != 0) {
            return fail_at(loader, certificate_line != 0 ? certificate_line : ca_line,
                           "%s is set but tlsMode is disabled: set tlsMode to requireTLS, preferTLS or allowTLS",
                           certificate_line != 0 ? "tlsCertificateKeyFile" : "tlsCAFile");
        }
        return true;
    }
    if (config->tls_certificate_key_file == NULL) {
        return fail_at(loader, mode_line, "tlsMode %s needs tlsCertificateKeyFile (the proxy's certificate and key)",
                       tls_mode_name(config->tls_mode));
    }
    bson_error_t tls_error;
    tls_server_options_t options = {.certificate_key_file = config->tls_certificate_key_file};
    for (int pass = 0; pass < 2; pass++) {
        /* The certificate alone first, so each error lands on its own key's line. */
        if (pass == 1) {
            if (config->tls_ca_file == NULL) {
                break;
            }
            options.ca_file = config->tls_ca_file;
        }
        tls_context_t *context = tls_context_new_server(&options, &tls_error);
        if (context == NULL) {
            return fail_at(loader, pass == 0 ? certificate_line : ca_line, "%s", tls_error.message);
        }
        tls_context_destroy(context);
    }
    return true;
}

static bool load_document(const loader_t *loader, config_t *config)
{
    yaml_node_t *root = yaml_document_get_root_node(loader->document);
    uint32_t lines[SETTING_COUNT] = {0};
    if (root == NULL) {
        return fail_at(loader, 1, "the configuration is empty: archive and fast are required");
    }
    if (root->type != YAML_MAPPING_NODE) {
        return fail_at(loader, node_line(root),
                       "the configuration must be a mapping of keys (listen, archive, fast, namespaces), not %s",
                       node_kind(root));
    }
    if (!apply_defaults(loader, SCOPE_TOP, config) || !load_mapping(loader, root, SCOPE_TOP, config, lines)) {
        return false;
    }
    return check_distinct_tiers(loader, config, line_of(lines, SCOPE_TOP, "fast")) && check_tls(loader, config, lines);
}

config_t *config_load_string(const char *text, size_t length, const char *name, bson_error_t *error)
{
    yaml_parser_t parser;
    yaml_document_t document;
    yaml_document_t extra;
    config_t *config = bson_malloc0(sizeof *config);
    loader_t loader = {name, &document, error};
    bool ok = false;

    mongoc_init(); /* URI parsing needs libmongoc initialised; repeated calls are harmless */
    if (!yaml_parser_initialize(&parser)) {
        tc_error_set(error, TC_ERR_INTERNAL, "%s: cannot initialise the YAML parser", name);
        config_destroy(config);
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, length);
    if (!yaml_parser_load(&parser, &document)) {
        tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "%s:%lu: YAML syntax error: %s%s%s", name,
                     (unsigned long)parser.problem_mark.line + 1, parser.problem ? parser.problem : "unreadable",
                     parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        config_destroy(config);
        return NULL;
    }
    ok = load_document(&loader, config);
    if (ok) {
        /* A second document ("---") would be silently ignored: refuse it. */
        if (!yaml_parser_load(&parser, &extra)) {
            ok = tc_error_set(error, TC_ERR_FAILED_TO_PARSE, "%s:%lu: YAML syntax error: %s", name,
                              (unsigned long)parser.problem_mark.line + 1,
                              parser.problem ? parser.problem : "unreadable");
        } else {
            yaml_node_t *extra_root = yaml_document_get_root_node(&extra);
            if (extra_root != NULL) {
                loader.document = &extra;
                ok = fail_at(&loader, node_line(extra_root),
                             "a second YAML document: the configuration is one document");
            }
            yaml_document_delete(&extra);
        }
    }
    yaml_document_delete(&document);
    yaml_parser_delete(&parser);
    if (!ok) {
        config_destroy(config);
        return NULL;
    }
    return config;
}

config_t *config_load_file(const char *path, bson_error_t *error)
{
    FILE *file = fopen(path, "rb");
    char *text = NULL;
    size_t length = 0;
    config_t *config = NULL;
    if (file == NULL) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "%s: cannot read the configuration: %s", path, strerror(errno));
        return NULL;
    }
    text = bson_malloc(CONFIG_MAX_FILE_SIZE + 1);
    length = fread(text, 1, CONFIG_MAX_FILE_SIZE + 1, file);
    if (ferror(file)) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "%s: cannot read the configuration: %s", path, strerror(errno));
    } else if (length > CONFIG_MAX_FILE_SIZE) {
        tc_error_set(error, TC_ERR_BAD_VALUE, "%s: larger than %d bytes: not a configuration file", path,
                     CONFIG_MAX_FILE_SIZE);
    } else {
        config = config_load_string(text, length, path, error);
    }
    fclose(file);
    bson_free(text);
    return config;
}

void config_destroy(config_t *config)
{
    if (config == NULL) {
        return;
    }
    bson_free(config->listen.host);
    bson_free(config->metrics_listen.host);
    bson_free(config->archive_uri);
    bson_free(config->fast_uri);
    bson_free(config->tls_certificate_key_file);
    bson_free(config->tls_ca_file);
    for (size_t i = 0; i < config->namespace_count; i++) {
        bson_free(config->namespaces[i].ns);
        bson_free(config->namespaces[i].database);
        bson_free(config->namespaces[i].collection);
        bson_free(config->namespaces[i].time_field);
    }
    bson_free(config->namespaces);
    bson_free(config);
}

const config_namespace_t *config_find_namespace(const config_t *config, const char *ns)
{
    for (size_t i = 0; config != NULL && ns != NULL && i < config->namespace_count; i++) {
        if (strcmp(config->namespaces[i].ns, ns) == 0) {
            return &config->namespaces[i];
        }
    }
    return NULL;
}

char *config_uri_redacted(const char *uri)
{
    const char *scheme_end = strstr(uri, "://");
    if (scheme_end == NULL) {
        return bson_strdup(uri);
    }
    const char *authority = scheme_end + 3;
    size_t authority_length = strcspn(authority, "/?");
    const char *at = NULL;
    for (const char *cursor = authority; cursor < authority + authority_length; cursor++) {
        if (*cursor == '@') {
            at = cursor; /* the last one: a user name may not hold an unescaped '@', but be safe */
        }
    }
    const char *colon = at != NULL ? memchr(authority, ':', (size_t)(at - authority)) : NULL;
    if (colon == NULL) {
        return bson_strdup(uri);
    }
    return bson_strdup_printf("%.*s:***%s", (int)(colon - uri), uri, at);
}
