/* `thermocline store`: a MongoDB-compatible server on WiredTiger. This header is
 * what main.c sees: the options and the function that serves until stopped. */
#ifndef TC_STORE_STORE_H
#define TC_STORE_STORE_H

#include "common/error.h"
#include "security/tls.h"

#include <stdint.h>

typedef struct store_options {
    const char *bind_address;  /* default 127.0.0.1 */
    int port;                  /* default 27017 */
    const char *dbpath;
    const char *replica_set;   /* NULL: standalone */
    uint64_t cache_bytes;      /* default 256MB */
    const char *compressor;    /* snappy (default), zlib, none */
    int64_t read_iops;         /* 0: unthrottled */
    int64_t sync_delay_ms;     /* --sync-delay: added to each sync (slow_disk.h); 0: none */
    uint64_t oplog_bytes;      /* --oplog-size (MB), with --replSet; 0: mongod's default */
    int max_connections;       /* --max-conns, default 65536 */
    int worker_count;          /* default: 2 x cores, at least 4 */
    /* Access control and TLS, named as mongod's flags. */
    bool auth;                 /* --auth */
    tls_mode_t tls_mode;       /* --tlsMode, default disabled */
    const char *tls_certificate_key_file; /* --tlsCertificateKeyFile */
    const char *tls_ca_file;   /* --tlsCAFile */
    bool tls_allow_connections_without_certificates; /* --tlsAllowConnectionsWithoutCertificates */
    /* Limits on clients (server.h): 0 takes the network layer's default. */
    uint32_t idle_timeout_ms;    /* --idle-timeout, default off */
    uint32_t receive_timeout_ms; /* --receive-timeout, default 30s */
    uint32_t send_timeout_ms;    /* --send-timeout, default 30s */
    uint64_t max_queued_reply_bytes; /* --max-queued-replies, default 256MB */
    int64_t slow_ms;             /* --slowms: log commands slower than this, default 100 (0: all) */
    /* --metrics-listen HOST:PORT: Prometheus text at GET /metrics (NULL: off). */
    const char *metrics_host;
    int metrics_port;
} store_options_t;

void store_options_init(store_options_t *options);

/* Opens the database, serves until SIGINT/SIGTERM, closes cleanly. */
bool store_run(const store_options_t *options, bson_error_t *error) TC_MUST_CHECK;

/* `thermocline store ARGS`: parses flags, runs, returns the exit status. */
int store_main(int argc, char **argv);

#endif
