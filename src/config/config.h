/* The configuration of the proxy and the tier workers: the YAML file of the design
 * brief (`thermocline proxy --config FILE`, `thermocline feeder|evictor|warmer
 * --config FILE`), read once at start. Every bad value is refused with
 * "FILE:LINE: reason"; nothing is guessed. Settings are one table in config.c.
 *
 *   listen: 127.0.0.1:27017
 *   archive: mongodb://127.0.0.1:27018/?replicaSet=rs0
 *   fast: mongodb://127.0.0.1:27019/?replicaSet=rs1
 *   namespaces:
 *     - ns: shop.orders
 *       timeField: createdAt
 *       maxAge: 30d
 *
 * Top-level settings
 *   name                type      default            meaning
 *   listen              host:port 127.0.0.1:27017    where clients connect ([::1]:27017 for IPv6)
 *   archive             URI       (required)         the deployment that holds everything
 *   fast                URI       (required)         the small deployment holding the recent window;
 *                                                    must not share a host:port with archive
 *   namespaces          list      (none)             tiering policies, below; others go to the archive
 *   maxConnections      integer   1000               client connections open at once (1-1000000)
 *   readYourWritesWait  duration  5s                 how long a read sent to the archive waits for
 *                                                    the feeder before failing (0-1h)
 *   failoverWait        duration  10s                how long a command the proxy retries (retryable
 *                                                    reads and writes, after a network error or a
 *                                                    "not primary" reply) waits for its tier's primary
 *                                                    to be found again (0-1h; 0: the proxy never retries)
 *   faultInLimit        integer   1000               archive documents one write may fault in (and
 *                                                    documents whose unique keys its updates compute);
 *                                                    past it the write fails (0-10000000)
 *   slowOpThresholdMs   integer   100                log every command slower than this many ms, with
 *                                                    where its time went (0-86400000; mongod's name)
 *   feederEnabled       boolean   true               run the feeder in this process
 *   evictorEnabled      boolean   true               run the evictor in this process
 *   warmerEnabled       boolean   true               run the warmer in this process
 *   leaseTimeout        duration  10s                each worker runs in one process of those sharing
 *                                                    this config, the holder of its lease in the fast
 *                                                    tier; a holder silent this long is replaced
 *                                                    (500ms-1h; src/tier/lease.h)
 *   warmerRateLimit     integer   0                  archive documents the warmer reads per second at
 *                                                    most (0-10000000; 0: only its adaptive pace)
 *   authorization       enabled|disabled  disabled   enabled: clients authenticate (SCRAM) against
 *                                                    the archive's users and every command is checked
 *                                                    against their roles, whichever tier serves it
 *   idleTimeout         duration  0s (never)         close a client connection silent this long (0s-1d)
 *   receiveTimeout      duration  30s                close a client that leaves a message or TLS handshake
 *                                                    unfinished this long (slowloris; 1ms-1d)
 *   sendTimeout         duration  30s                close a client that reads nothing of a reply this
 *                                                    long (1ms-1d)
 *   tlsMode             mode      disabled           TLS for clients, as mongod's net.tls.mode: disabled,
 *                                                    allowTLS, preferTLS or requireTLS
 *   tlsCertificateKeyFile  file   (none)             PEM with the proxy's certificate and key; required
 *                                                    unless tlsMode is disabled
 *   tlsCAFile           file      (none)             PEM with the CAs that sign client certificates; when
 *                                                    given, clients must present one that they signed
 *   tlsAllowConnectionsWithoutCertificates  boolean  false   with tlsCAFile: a client without a
 *                                                    certificate is accepted (an invalid one never is)
 *   metricsListen       host:port (none: off)        serve GET /metrics, Prometheus' text format
 *   logFormat           text|json text               json: mongod 4.4+'s structured log lines
 *
 * The tier URIs take MongoDB's TLS options (tls=true or ssl=true, tlsCAFile,
 * tlsCertificateKeyFile, tlsAllowInvalidCertificates, tlsAllowInvalidHostnames,
 * tlsInsecure) for the proxy's own connections and the tier workers' alike.
 *
 * Namespace settings (each entry of namespaces)
 *   ns                  string    (required)         "database.collection", once per file
 *   timeField           string    (required)         the BSON date field the window is measured on
 *   maxAge              duration  (required)         how far back the fast tier holds documents
 *   coverage            warm|complete  warm          warm: the horizon is +infinity until the warmer
 *                                                    has copied the window once; complete: the fast
 *                                                    tier holds the window from the start (both tiers
 *                                                    started empty)
 *   safetySlack         duration  maxAge/10, <= 15m  horizon = now - maxAge + safetySlack; < maxAge
 *   evictorPeriod       duration  maxAge/20, 100ms-1m  how often the evictor runs
 *   warmerPeriod        duration  maxAge/20, 100ms-1m  how often the warmer runs
 *   indexSyncPeriod     duration  1m (100ms-1h)    how often the archive's indexes and validator are
 *                                                    copied to the fast tier again (src/tier/README.md)
 *   requireTimeFieldIndex  boolean  true           refuse to start when the archive's collection has
 *                                                    no index whose first key is timeField (every
 *                                                    warmer pass would scan it); false: a warning
 *
 * Durations carry a unit (500ms, 20s, 15m, 6h, 30d: common/units.h). */
#ifndef TC_CONFIG_CONFIG_H
#define TC_CONFIG_CONFIG_H

#include "common/error.h"
#include "common/log.h"
#include "security/tls.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum config_coverage {
    CONFIG_COVERAGE_WARM,     /* horizon valid once the warmer's first pass ends */
    CONFIG_COVERAGE_COMPLETE, /* horizon valid from the start */
} config_coverage_t;

/* One tiered namespace: its policy, and its names split once at load, so that no
 * caller splits the ns string again. The proxy and the tier workers keep their
 * own per-namespace state in structs that point at it. */
typedef struct config_namespace {
    char *ns;         /* "database.collection" */
    char *database;   /* ns up to its first '.' */
    char *collection; /* the rest of ns (may hold dots: "events.2024") */
    size_t index;     /* its position in config_t.namespaces: its slot in tier/progress.h */
    char *time_field; /* a field path such as "createdAt" or "meta.ts" */
    int64_t max_age_ms;
    config_coverage_t coverage;
    int64_t safety_slack_ms;
    int64_t evictor_period_ms;
    int64_t warmer_period_ms;
    int64_t index_sync_period_ms;  /* tier/index_sync.c */
    bool require_time_field_index; /* checked at start (tier_preflight) */
    uint32_t line; /* where the entry starts in the file, for later messages */
} config_namespace_t;

typedef struct config_address {
    char *host; /* "127.0.0.1", "::1" (without its brackets), "localhost" */
    uint16_t port;
} config_address_t;

/* A loaded configuration; every string is owned by it. */
typedef struct config {
    config_address_t listen;
    char *archive_uri;
    char *fast_uri;
    config_namespace_t *namespaces;
    size_t namespace_count;
    int64_t max_connections;
    int64_t read_your_writes_wait_ms;
    int64_t failover_wait_ms;
    int64_t fault_in_limit;
    int64_t slow_op_threshold_ms; /* log commands slower than this (mongod's slowOpThresholdMs) */
    bool feeder_enabled;
    bool evictor_enabled;
    bool warmer_enabled;
    int64_t lease_timeout_ms; /* tier/lease.h */
    int64_t warmer_rate_limit; /* documents per second; 0: no cap beyond the adaptive pace */
    bool authorization_enabled; /* authorization: enabled */
    /* Client connections' limits (src/net/server.h): slowloris, clients that never read. */
    int64_t idle_timeout_ms; /* 0: never */
    int64_t receive_timeout_ms;
    int64_t send_timeout_ms;
    /* The front door's TLS, as mongod's net.tls (files checked at load). */
    tls_mode_t tls_mode;
    char *tls_certificate_key_file; /* NULL unless given */
    char *tls_ca_file;              /* NULL unless given: then client certificates are asked for */
    bool tls_allow_connections_without_certificates;
    /* Operating: Prometheus scrapes (host NULL: off) and the log's format. */
    config_address_t metrics_listen;
    tc_log_format_t log_format;
} config_t;

/* Reads and validates the file at path. NULL on any error, with BadValue (2) or,
 * for YAML syntax, FailedToParse (9), and a message "PATH:LINE: reason" (just
 * "PATH: reason" when the file cannot be read). Free with config_destroy(). */
config_t *config_load_file(const char *path, bson_error_t *error) TC_MUST_CHECK;

/* The same for text already in memory; name stands for the file in messages. */
config_t *config_load_string(const char *text, size_t length, const char *name, bson_error_t *error) TC_MUST_CHECK;

/* Safe on NULL. */
void config_destroy(config_t *config);

/* uri with its password replaced by "***", for logs and messages. The caller
 * frees it with bson_free(). */
char *config_uri_redacted(const char *uri);

/* The entry for ns ("database.collection"), or NULL; borrows config. */
const config_namespace_t *config_find_namespace(const config_t *config, const char *ns);

#endif
