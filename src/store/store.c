/* `thermocline store`: flags, start-up and shutdown. Opens the storage, starts
 * the network server whose worker threads each own a storage session, reaps
 * idle cursors and expired transactions, and closes everything in order on
 * SIGINT/SIGTERM. */
#include "store/store.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/units.h"
#include "store/auth.h"
#include "store/dispatch.h"
#include "store/metrics.h"
#include "store/oplog.h"
#include "store/slow_disk.h"
#include "store/slow_ops.h"
#include "store/transactions.h"
#include "store/ttl_monitor.h"
#include "wire/wire.h"

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CURSOR_REAP_INTERVAL_MS 1000

void store_options_init(store_options_t *options)
{
    memset(options, 0, sizeof *options);
    options->bind_address = "127.0.0.1";
    options->port = 27017;
    options->cache_bytes = 256ull * 1024 * 1024;
    options->compressor = "snappy";
    options->max_connections = 65536;
    options->slow_ms = SLOW_OPS_DEFAULT_MS;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    options->worker_count = cores > 2 ? (int)cores * 2 : 4;
}

/* --- worker threads -------------------------------------------------------------- */

static void *worker_start(void *application, int worker_index)
{
    store_t *store = application;
    bson_error_t error;
    storage_session_t *session = storage_session_new(store->storage, &error);
    if (session == NULL) {
        TC_LOG(TC_LOG_ERROR, "STORAGE", 0, "worker %d cannot open a session: %s", worker_index, error.message);
    }
    return session;
}

static void worker_stop(void *application, void *worker_state)
{
    (void)application;
    storage_session_destroy(worker_state);
}

static void worker_handle(void *application, void *worker_state, const server_request_t *request,
                          server_reply_t *reply)
{
    store_t *store = application;
    if (worker_state == NULL) {
        reply->close_after = true;
        return;
    }
    dispatch_message(store, worker_state, request, reply);
}

/* On the loop thread: a point read runs here, not on a worker (dispatch.h). */
static bool loop_handle(void *application, void *loop_state, const server_request_t *request,
                        server_reply_t *reply)
{
    return loop_state != NULL && dispatch_point_read_on_loop(application, loop_state, request, reply);
}

/* A connection is gone: free its state (dispatch.h). */
static void connection_close(void *application, void *connection_data)
{
    dispatch_connection_close(application, connection_data);
}

/* --- janitor ------------------------------------------------------------------------ */

typedef struct janitor {
    store_t *store;
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t wakeup;
    bool stop;
} janitor_t;

static void *janitor_main(void *argument)
{
    janitor_t *janitor = argument;
    pthread_mutex_lock(&janitor->mutex);
    while (!janitor->stop) {
        struct timespec deadline = clock_deadline_after_ms(CLOCK_REALTIME, CURSOR_REAP_INTERVAL_MS);
        pthread_cond_timedwait(&janitor->wakeup, &janitor->mutex, &deadline);
        cursor_table_reap(janitor->store->cursors, clock_monotonic_ms());
        session_cache_reap(janitor->store->sessions, clock_wall_ms());
        transaction_table_reap(janitor->store->transactions);
        storage_retry_pending_drops(janitor->store->storage);
    }
    pthread_mutex_unlock(&janitor->mutex);
    return NULL;
}

/* --- run ---------------------------------------------------------------------------- */

bool store_run(const store_options_t *options, bson_error_t *error)
{
    store_t store = {.options = *options};
    janitor_t janitor = {.store = &store};
    store_metrics_t *metrics = NULL;
    oplog_t *oplog = NULL;
    tls_context_t *tls_context = NULL;
    bool janitor_started = false;
    bool ok = false;

    store.start_time_ms = (int64_t)time(NULL) * 1000;
    bson_oid_init(&store.process_id, NULL);
    storage_options_t storage_options = {
        .dbpath = options->dbpath,
        .cache_bytes = options->cache_bytes,
        .compressor = options->compressor,
        .read_iops = (uint64_t)options->read_iops,
        .sync_delay_ms = (uint64_t)options->sync_delay_ms,
    };
    store.storage = storage_open(&storage_options, error);
    TC_CHECK(store.storage != NULL);
    if (options->read_iops > 0) {
        TC_LOG_ATTRS(TC_LOG_INFO, "STORAGE", 0,
                     "emulated slow disk: data-file reads capped at {readIops} per second ({ioUnitKB} KB per I/O), "
                     "OS page cache bypassed",
                     TC_ATTR_INT("readIops", options->read_iops),
                     TC_ATTR_INT("ioUnitKB", SLOW_DISK_IO_UNIT_BYTES / 1024));
    } else {
        TC_LOG(TC_LOG_INFO, "STORAGE", 0, "data-file reads uncapped (no --read-iops)");
    }
    if (options->sync_delay_ms > 0) {
        TC_LOG_ATTRS(TC_LOG_INFO, "STORAGE", 0, "emulated slow disk: each sync takes {syncDelayMillis} ms longer",
                     TC_ATTR_INT("syncDelayMillis", options->sync_delay_ms));
    }
    store.cursors = cursor_table_new();
    store.operations = current_op_table_new();
    store.sessions = session_cache_new();
    store.transactions = transaction_table_new(&store);
    store.auth = auth_manager_new(options->auth);
    if (options->tls_mode != TLS_MODE_DISABLED) {
        tls_server_options_t tls_options = {
            .certificate_key_file = options->tls_certificate_key_file,
            .ca_file = options->tls_ca_file,
            .allow_connections_without_certificates = options->tls_allow_connections_without_certificates,
        };
        tls_context = tls_context_new_server(&tls_options, error);
        TC_CHECK(tls_context != NULL);
    }
    if (options->replica_set != NULL) {
        /* A replica set member keeps an oplog: change streams, operationTime. */
        oplog = oplog_open(store.storage,
                           options->oplog_bytes > 0 ? options->oplog_bytes : oplog_default_size_bytes(options->dbpath),
                           error);
        TC_CHECK(oplog != NULL);
    }

    server_options_t server_options = {
        .bind_address = options->bind_address,
        .port = options->port,
        .max_connections = options->max_connections,
        .worker_count = options->worker_count,
        .max_message_bytes = WIRE_MAX_MESSAGE_SIZE,
        .tls_mode = options->tls_mode,
        .tls_context = tls_context,
        .idle_timeout_ms = options->idle_timeout_ms,
        .receive_timeout_ms = options->receive_timeout_ms,
        .send_timeout_ms = options->send_timeout_ms,
        .max_queued_reply_bytes = (size_t)options->max_queued_reply_bytes,
    };
    server_callbacks_t callbacks = {
        .application = &store,
        .worker_start = worker_start,
        .worker_stop = worker_stop,
        .handle = worker_handle,
        .handle_inline = loop_handle,
        .connection_close = connection_close,
    };
    store.server = server_new(&server_options, &callbacks, error);
    TC_CHECK(store.server != NULL);
    if (options->metrics_host != NULL) {
        metrics = store_metrics_start(&store, options->metrics_host, options->metrics_port, error);
        TC_CHECK(metrics != NULL);
    }

    pthread_mutex_init(&janitor.mutex, NULL);
    pthread_cond_init(&janitor.wakeup, NULL);
    if (pthread_create(&janitor.thread, NULL, janitor_main, &janitor) != 0) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot start the cursor janitor thread");
        goto done;
    }
    janitor_started = true;
    store.ttl = ttl_monitor_start(&store, error);
    TC_CHECK(store.ttl != NULL);
    TC_LOG_ATTRS(TC_LOG_INFO, "STORAGE", 0, "thermocline store listening on {address}:{port}, dbpath {dbPath}",
                 TC_ATTR_STR("address", options->bind_address), TC_ATTR_INT("port", server_port(store.server)),
                 TC_ATTR_STR("dbPath", options->dbpath), TC_ATTR_STR("replSet", options->replica_set));
    TC_LOG_ATTRS(TC_LOG_INFO, "ACCESS", 0, "{access}; tlsMode {tlsMode}",
                 TC_ATTR_STR("access", options->auth ? "access control enabled (--auth)"
                                                     : "access control is not enabled: read and write access to data "
                                                       "and configuration is unrestricted"),
                 TC_ATTR_STR("tlsMode", tls_mode_name(options->tls_mode)));
    TC_CHECK(server_run(store.server, error));
    TC_LOG(TC_LOG_INFO, "STORAGE", 0, "shutting down");
    ok = true;
done:
    if (janitor_started) {
        pthread_mutex_lock(&janitor.mutex);
        janitor.stop = true;
        pthread_cond_signal(&janitor.wakeup);
        pthread_mutex_unlock(&janitor.mutex);
        pthread_join(janitor.thread, NULL);
    }
    pthread_mutex_destroy(&janitor.mutex);
    pthread_cond_destroy(&janitor.wakeup);
    ttl_monitor_stop(store.ttl);
    store_metrics_stop(metrics);
    server_destroy(store.server);
    tls_context_destroy(tls_context);
    auth_manager_destroy(store.auth);
    transaction_table_destroy(store.transactions);
    cursor_table_destroy(store.cursors);
    session_cache_destroy(store.sessions);
    current_op_table_destroy(store.operations);
    oplog_close(oplog);
    storage_close(store.storage);
    return ok;
}

/* --- flags -------------------------------------------------------------------------- */

static void print_usage(FILE *stream)
{
    fprintf(stream,
            "usage: thermocline store --port P --dbpath DIR [options]\n"
            "\n"
            "A MongoDB-compatible server on WiredTiger.\n"
            "\n"
            "  --port P               TCP port (default 27017)\n"
            "  --dbpath DIR           data directory (created if missing; required)\n"
            "  --bind IP              address to listen on (default 127.0.0.1)\n"
            "  --replSet NAME         act as the primary of a one-node replica set NAME\n"
            "  --cache-size SIZE      WiredTiger cache, e.g. 256MB (default), 16MB, 1GB\n"
            "  --compressor NAME      snappy (default), zlib or none, for new collections\n"
            "  --read-iops N          cap data-file reads at N per second (emulated slow disk)\n"
            "  --sync-delay D         make each sync (the journal's, a checkpoint's) take D longer,\n"
            "                         e.g. 8ms (emulated slow disk; default 0)\n"
            "  --oplog-size MB        with --replSet: oplog size in megabytes (default: 5%% of the\n"
            "                         free disk, 990MB to 50GB, as mongod's --oplogSize)\n"
            "  --max-conns N          refuse connections past N (default 65536)\n"
            "  --workers N            worker threads (default 4, or twice the cores)\n"
            "  --auth                 require authentication (SCRAM-SHA-1, SCRAM-SHA-256) and\n"
            "                         check every command against the user's roles\n"
            "  --tlsMode MODE         disabled (default), allowTLS, preferTLS or requireTLS\n"
            "  --tlsCertificateKeyFile FILE  PEM with the server's certificate and key\n"
            "  --tlsCAFile FILE       PEM with the CAs of client certificates (asked for\n"
            "                         and required unless the next flag is given)\n"
            "  --tlsAllowConnectionsWithoutCertificates  accept clients without one\n"
            "  --idle-timeout DUR     close a connection silent this long, e.g. 10m\n"
            "                         (default: never, as mongod)\n"
            "  --receive-timeout DUR  close a client that leaves a message (or TLS\n"
            "                         handshake) unfinished this long (default 30s)\n"
            "  --send-timeout DUR     close a client that reads nothing of a reply\n"
            "                         this long (default 30s)\n"
            "  --max-queued-replies SIZE  replies waiting for slow readers, server-wide;\n"
            "                         a reply past it closes its connection (default 256MB)\n"
            "  --slowms MS            log each command slower than MS milliseconds, with where\n"
            "                         its time went (default 100; 0: every command)\n"
            "  --metrics-listen HOST:PORT  serve Prometheus metrics at http://HOST:PORT/metrics\n"
            "                         (opcounters, connections, WiredTiger cache; default off)\n"
            "  --log-format FORMAT    text (default) or json (mongod 4.4+'s structured lines)\n"
            "  --verbose              log every failed command\n"
            "  --help                 this text\n");
}

static bool parse_positive(const char *text, const char *flag, int64_t maximum, int64_t *out)
{
    char *end;
    long long value = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || value < 0 || value > maximum) {
        fprintf(stderr, "thermocline store: %s takes a whole number from 0 to %lld, not '%s'\n", flag,
                (long long)maximum, text);
        return false;
    }
    *out = value;
    return true;
}

/* The flags of `thermocline store`, for getopt_long. */
enum store_option {
    OPT_PORT = 256, OPT_DBPATH, OPT_BIND, OPT_REPLSET, OPT_CACHE, OPT_COMPRESSOR, OPT_IOPS, OPT_MAXCONNS, OPT_WORKERS,
    OPT_VERBOSE, OPT_HELP, OPT_OPLOG_SIZE, OPT_AUTH, OPT_TLS_MODE, OPT_TLS_CERTIFICATE_KEY_FILE, OPT_TLS_CA_FILE,
    OPT_TLS_ALLOW_WITHOUT_CERTIFICATES, OPT_IDLE_TIMEOUT, OPT_RECEIVE_TIMEOUT, OPT_SEND_TIMEOUT,
    OPT_MAX_QUEUED_REPLIES, OPT_SLOW_MS, OPT_METRICS_LISTEN, OPT_SYNC_DELAY
};

static const struct option store_long_options[] = {
    {"port", required_argument, NULL, OPT_PORT},
    {"dbpath", required_argument, NULL, OPT_DBPATH},
    {"bind", required_argument, NULL, OPT_BIND},
    {"bind_ip", required_argument, NULL, OPT_BIND},
    {"replSet", required_argument, NULL, OPT_REPLSET},
    {"cache-size", required_argument, NULL, OPT_CACHE},
    {"compressor", required_argument, NULL, OPT_COMPRESSOR},
    {"read-iops", required_argument, NULL, OPT_IOPS},
    {"sync-delay", required_argument, NULL, OPT_SYNC_DELAY},
    {"oplog-size", required_argument, NULL, OPT_OPLOG_SIZE},
    {"oplogSize", required_argument, NULL, OPT_OPLOG_SIZE},
    {"max-conns", required_argument, NULL, OPT_MAXCONNS},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"verbose", no_argument, NULL, OPT_VERBOSE},
    {"auth", no_argument, NULL, OPT_AUTH},
    {"tlsMode", required_argument, NULL, OPT_TLS_MODE},
    {"sslMode", required_argument, NULL, OPT_TLS_MODE},
    {"tlsCertificateKeyFile", required_argument, NULL, OPT_TLS_CERTIFICATE_KEY_FILE},
    {"sslPEMKeyFile", required_argument, NULL, OPT_TLS_CERTIFICATE_KEY_FILE},
    {"tlsCAFile", required_argument, NULL, OPT_TLS_CA_FILE},
    {"sslCAFile", required_argument, NULL, OPT_TLS_CA_FILE},
    {"tlsAllowConnectionsWithoutCertificates", no_argument, NULL, OPT_TLS_ALLOW_WITHOUT_CERTIFICATES},
    {"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
    {"receive-timeout", required_argument, NULL, OPT_RECEIVE_TIMEOUT},
    {"send-timeout", required_argument, NULL, OPT_SEND_TIMEOUT},
    {"max-queued-replies", required_argument, NULL, OPT_MAX_QUEUED_REPLIES},
    {"slowms", required_argument, NULL, OPT_SLOW_MS},
    {"metrics-listen", required_argument, NULL, OPT_METRICS_LISTEN},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* A size flag (--cache-size, --max-queued-replies): units_parse_size, at least 1MB. */
static bool parse_size_flag(const char *text, const char *flag, uint64_t *out)
{
    bson_error_t error;
    if (!units_parse_size(text, out, &error)) {
        fprintf(stderr, "thermocline store: %s: %s\n", flag, error.message);
        return false;
    }
    if (*out < 1024 * 1024) {
        fprintf(stderr, "thermocline store: %s must be at least 1MB\n", flag);
        return false;
    }
    return true;
}

/* A count flag (--max-conns, --workers): a whole number from 1 to maximum. */
static bool parse_count_flag(const char *text, const char *flag, int64_t maximum, int *out)
{
    int64_t number;
    if (!parse_positive(text, flag, maximum, &number)) {
        return false;
    }
    if (number == 0) {
        fprintf(stderr, "thermocline store: %s must be at least 1\n", flag);
        return false;
    }
    *out = (int)number;
    return true;
}

/* --idle-timeout, --receive-timeout, --send-timeout: a duration from 1ms to under 49 days. */
static bool parse_timeout_flag(int option, const char *text, store_options_t *options)
{
    const char *flag = option == OPT_IDLE_TIMEOUT      ? "--idle-timeout"
                       : option == OPT_RECEIVE_TIMEOUT ? "--receive-timeout"
                                                       : "--send-timeout";
    bson_error_t error;
    int64_t milliseconds;
    if (!units_parse_duration_ms(text, &milliseconds, &error)) {
        fprintf(stderr, "thermocline store: %s: %s\n", flag, error.message);
        return false;
    }
    if (milliseconds < 1 || milliseconds >= (int64_t)SERVER_NO_TIMEOUT) {
        fprintf(stderr, "thermocline store: %s must be at least 1ms and under 49 days, not '%s'\n", flag, text);
        return false;
    }
    *(option == OPT_IDLE_TIMEOUT      ? &options->idle_timeout_ms
      : option == OPT_RECEIVE_TIMEOUT ? &options->receive_timeout_ms
                                      : &options->send_timeout_ms) = (uint32_t)milliseconds;
    return true;
}

/* What the flags must satisfy together once all are read; false after saying why. */
static bool check_options(const store_options_t *options)
{
    if (options->dbpath == NULL) {
        fprintf(stderr, "thermocline store: --dbpath is required (see --help)\n");
        return false;
    }
    if (options->tls_mode != TLS_MODE_DISABLED && options->tls_certificate_key_file == NULL) {
        fprintf(stderr, "thermocline store: need tlsCertificateKeyFile or certificateSelector when TLS is enabled\n");
        return false;
    }
    if (options->tls_mode == TLS_MODE_DISABLED &&
        (options->tls_certificate_key_file != NULL || options->tls_ca_file != NULL)) {
        fprintf(stderr, "thermocline store: --tlsCertificateKeyFile and --tlsCAFile need --tlsMode other than "
                        "disabled\n");
        return false;
    }
    return true;
}

int store_main(int argc, char **argv)
{
    store_options_t options;
    bson_error_t error;
    int64_t number;
    char metrics_host[256];
    store_options_init(&options);
    opterr = 0;
    optind = 1;
    int option;
    while ((option = getopt_long(argc, argv, "", store_long_options, NULL)) != -1) {
        switch (option) {
        case OPT_PORT:
            if (!parse_positive(optarg, "--port", 65535, &number)) {
                return 2;
            }
            options.port = (int)number;
            break;
        case OPT_DBPATH:
            options.dbpath = optarg;
            break;
        case OPT_BIND:
            options.bind_address = optarg;
            break;
        case OPT_REPLSET:
            if (optarg[0] == '\0') {
                fprintf(stderr, "thermocline store: --replSet needs a name\n");
                return 2;
            }
            options.replica_set = optarg;
            break;
        case OPT_CACHE:
            if (!parse_size_flag(optarg, "--cache-size", &options.cache_bytes)) {
                return 2;
            }
            break;
        case OPT_COMPRESSOR:
            if (strcmp(optarg, "snappy") != 0 && strcmp(optarg, "zlib") != 0 && strcmp(optarg, "none") != 0) {
                fprintf(stderr, "thermocline store: --compressor takes snappy, zlib or none, not '%s'\n", optarg);
                return 2;
            }
            options.compressor = optarg;
            break;
        case OPT_IOPS:
            if (!parse_positive(optarg, "--read-iops", 10000000, &options.read_iops)) {
                return 2;
            }
            break;
        case OPT_OPLOG_SIZE:
            if (!parse_positive(optarg, "--oplog-size", 1024 * 1024, &number)) {
                return 2;
            }
            if (number == 0) {
                fprintf(stderr, "thermocline store: --oplog-size must be at least 1 (megabyte)\n");
                return 2;
            }
            options.oplog_bytes = (uint64_t)number * 1024 * 1024;
            break;
        case OPT_MAXCONNS:
            if (!parse_count_flag(optarg, "--max-conns", 10000000, &options.max_connections)) {
                return 2;
            }
            break;
        case OPT_WORKERS:
            if (!parse_count_flag(optarg, "--workers", 256, &options.worker_count)) {
                return 2;
            }
            break;
        case OPT_VERBOSE:
            tc_log_set_level(TC_LOG_DEBUG);
            break;
        case OPT_AUTH:
            options.auth = true;
            break;
        case OPT_TLS_MODE:
            if (!tls_mode_from_name(optarg, &options.tls_mode)) {
                fprintf(stderr,
                        "thermocline store: --tlsMode takes disabled, allowTLS, preferTLS or requireTLS, not '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case OPT_TLS_CERTIFICATE_KEY_FILE:
            options.tls_certificate_key_file = optarg;
            break;
        case OPT_TLS_CA_FILE:
            options.tls_ca_file = optarg;
            break;
        case OPT_TLS_ALLOW_WITHOUT_CERTIFICATES:
            options.tls_allow_connections_without_certificates = true;
            break;
        case OPT_SYNC_DELAY:
            if (!units_parse_flag_duration(optarg, "--sync-delay", 1, true, &options.sync_delay_ms, &error)) {
                fprintf(stderr, "thermocline store: %s\n", error.message);
                return 2;
            }
            break;
        case OPT_IDLE_TIMEOUT:
        case OPT_RECEIVE_TIMEOUT:
        case OPT_SEND_TIMEOUT:
            if (!parse_timeout_flag(option, optarg, &options)) {
                return 2;
            }
            break;
        case OPT_MAX_QUEUED_REPLIES:
            if (!parse_size_flag(optarg, "--max-queued-replies", &options.max_queued_reply_bytes)) {
                return 2;
            }
            break;
        case OPT_SLOW_MS:
            if (!parse_positive(optarg, "--slowms", INT32_MAX, &options.slow_ms)) {
                return 2;
            }
            break;
        case OPT_METRICS_LISTEN:
            if (!units_parse_host_port(optarg, "--metrics-listen", metrics_host, sizeof metrics_host,
                                       &options.metrics_port, &error)) {
                fprintf(stderr, "thermocline store: %s\n", error.message);
                return 2;
            }
            options.metrics_host = metrics_host;
            break;
        case OPT_HELP:
            print_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "thermocline store: unknown or incomplete option '%s' (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "thermocline store: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (!check_options(&options)) {
        return 2;
    }
    if (!store_run(&options, &error)) {
        tc_log_failure("thermocline store", error.message);
        return 1;
    }
    return 0;
}
