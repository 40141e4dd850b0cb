/* Handshake and server information: hello/isMaster (with awaitable hello and
 * compression negotiation), ping, buildInfo, getParameter, setParameter
 * (transactionLifetimeLimitSeconds, cursorTimeoutMillis, ttlMonitorSleepSecs,
 * ttlMonitorEnabled), hostInfo, whatsmyuri,
 * endSessions and the small commands mongosh and the drivers send on connect;
 * serverStatus (the sections operators watch) and fsync (a checkpoint). */
#include "store/auth.h"
#include "store/commands.h"
#include "store/oplog.h"
#include "store/slow_disk.h"
#include "store/transactions.h"
#include "store/ttl_monitor.h"
#include "wire/wire.h"
#include "common/clock.h"

#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define MAX_WIRE_VERSION 17 /* MongoDB 6.0 */
#define LOGICAL_SESSION_TIMEOUT_MINUTES 30
#define MONGODB_VERSION "6.0.0"

static void append_host_and_port(const store_t *store, char *buffer, size_t size)
{
    const char *host = store->options.bind_address;
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) {
        host = "127.0.0.1";
    }
    snprintf(buffer, size, "%s:%d", host, server_port(store->server));
}

/* An awaitable hello (topologyVersion + maxAwaitTimeMS) whose topologyVersion is
 * current waits maxAwaitTimeMS before answering: our topology never changes. */
static void plan_awaitable_reply(command_context_t *context)
{
    bson_iter_t iter, version;
    int64_t max_await_ms;
    bson_error_t ignored;
    if (!bson_iter_init_find(&iter, context->command, "topologyVersion") || !BSON_ITER_HOLDS_DOCUMENT(&iter) ||
        !command_get_int64(context, "maxAwaitTimeMS", -1, &max_await_ms, &ignored) || max_await_ms < 0) {
        return;
    }
    bson_iter_recurse(&iter, &version);
    if (bson_iter_find(&version, "processId") && BSON_ITER_HOLDS_OID(&version) &&
        bson_oid_equal(bson_iter_oid(&version), &context->store->process_id)) {
        context->reply_delay_ms = (uint32_t)(max_await_ms > 600000 ? 600000 : max_await_ms);
    }
}

static void append_op_time(bson_t *out, const char *key, uint64_t time)
{
    bson_t op_time;
    bson_append_document_begin(out, key, -1, &op_time);
    BSON_APPEND_TIMESTAMP(&op_time, "ts", OPLOG_TIME_SECONDS(time), OPLOG_TIME_INCREMENT(time));
    BSON_APPEND_INT64(&op_time, "t", 1);
    bson_append_document_end(out, &op_time);
}

/* hello's lastWrite: the newest committed write and the newest the majority
 * (here: the journal) holds, as a one-node replica set reports them. */
static void append_last_write(const store_t *store, bson_t *reply)
{
    oplog_t *oplog = oplog_for(store->storage);
    if (oplog == NULL) {
        return;
    }
    uint64_t last = oplog_committed_time(oplog);
    uint64_t majority = oplog_majority_time(oplog);
    bson_t last_write;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "lastWrite", &last_write);
    append_op_time(&last_write, "opTime", last);
    BSON_APPEND_DATE_TIME(&last_write, "lastWriteDate", (int64_t)OPLOG_TIME_SECONDS(last) * 1000);
    append_op_time(&last_write, "majorityOpTime", majority);
    BSON_APPEND_DATE_TIME(&last_write, "majorityWriteDate", (int64_t)OPLOG_TIME_SECONDS(majority) * 1000);
    bson_append_document_end(reply, &last_write);
}

/* hello's `client` document (driver, os, application.name), which currentOp
 * shows as clientMetadata and appName. */
static void note_client_metadata(command_context_t *context)
{
    bson_iter_t iter;
    bson_t metadata;
    if (context->connection == NULL || !bson_iter_init_find(&iter, context->command, "client") ||
        !BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        return;
    }
    const bson_value_t *value = bson_iter_value(&iter);
    if (bson_init_static(&metadata, value->value.v_doc.data, value->value.v_doc.data_len)) {
        current_op_set_client_metadata(context->store->operations, &context->connection->operation, &metadata);
    }
}

static bool handle_hello(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    store_t *store = context->store;
    bool legacy_name = strcmp(context->name, "hello") != 0;
    char host[300];
    append_host_and_port(store, host, sizeof host);
    (void)error;

    BSON_APPEND_BOOL(reply, legacy_name ? "ismaster" : "isWritablePrimary", true);
    bson_t topology;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "topologyVersion", &topology);
    BSON_APPEND_OID(&topology, "processId", &store->process_id);
    BSON_APPEND_INT64(&topology, "counter", 0);
    bson_append_document_end(reply, &topology);
    if (store->options.replica_set != NULL) {
        bson_t hosts;
        BSON_APPEND_ARRAY_BEGIN(reply, "hosts", &hosts);
        BSON_APPEND_UTF8(&hosts, "0", host);
        bson_append_array_end(reply, &hosts);
        BSON_APPEND_UTF8(reply, "setName", store->options.replica_set);
        BSON_APPEND_INT32(reply, "setVersion", 1);
        BSON_APPEND_BOOL(reply, "secondary", false);
        BSON_APPEND_UTF8(reply, "primary", host);
        BSON_APPEND_UTF8(reply, "me", host);
        bson_oid_t election_id;
        bson_oid_init_from_string(&election_id, "7fffffff0000000000000001");
        BSON_APPEND_OID(reply, "electionId", &election_id);
        append_last_write(store, reply);
    }
    wire_append_hello_limits(reply);
    BSON_APPEND_DATE_TIME(reply, "localTime", clock_wall_ms());
    BSON_APPEND_INT32(reply, "logicalSessionTimeoutMinutes", LOGICAL_SESSION_TIMEOUT_MINUTES);
    BSON_APPEND_INT64(reply, "connectionId", (int64_t)context->connection_id);
    BSON_APPEND_INT32(reply, "minWireVersion", 0);
    BSON_APPEND_INT32(reply, "maxWireVersion", MAX_WIRE_VERSION);
    BSON_APPEND_BOOL(reply, "readOnly", false);
    wire_negotiate_compression(context->command, reply);
    auth_append_hello(context, reply);
    plan_awaitable_reply(context);
    note_client_metadata(context);
    return true;
}

static bool handle_ping(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)context, (void)reply, (void)error;
    return true;
}

/* mongod's _isSelf: replica set members ask it to learn which host is this process. */
static bool handle_is_self(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)error;
    BSON_APPEND_OID(reply, "id", &context->store->process_id);
    return true;
}

static bool handle_build_info(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)context, (void)error;
    bson_t array, storage_engines;
    BSON_APPEND_UTF8(reply, "version", MONGODB_VERSION);
    BSON_APPEND_UTF8(reply, "gitVersion", "thermocline-store");
    BSON_APPEND_ARRAY_BEGIN(reply, "versionArray", &array);
    BSON_APPEND_INT32(&array, "0", 6);
    BSON_APPEND_INT32(&array, "1", 0);
    BSON_APPEND_INT32(&array, "2", 0);
    BSON_APPEND_INT32(&array, "3", 0);
    bson_append_array_end(reply, &array);
    BSON_APPEND_UTF8(reply, "sysInfo", "deprecated");
    BSON_APPEND_INT32(reply, "bits", 64);
    BSON_APPEND_BOOL(reply, "debug", false);
    BSON_APPEND_INT32(reply, "maxBsonObjectSize", WIRE_MAX_BSON_OBJECT_SIZE);
    BSON_APPEND_ARRAY_BEGIN(reply, "storageEngines", &storage_engines);
    BSON_APPEND_UTF8(&storage_engines, "0", "wiredTiger");
    bson_append_array_end(reply, &storage_engines);
    BSON_APPEND_ARRAY_BEGIN(reply, "modules", &array);
    bson_append_array_end(reply, &array);
    BSON_APPEND_UTF8(reply, "thermocline", "store");
    return true;
}

static bool handle_get_parameter(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    /* The parameters drivers and shells ask for; others are answered as mongod
     * answers an unknown one. */
    bson_iter_t iter;
    bool all = false;
    if (bson_iter_init_find(&iter, context->command, "getParameter")) {
        if (BSON_ITER_HOLDS_UTF8(&iter) && strcmp(bson_iter_utf8(&iter, NULL), "*") == 0) {
            all = true;
        }
        if (BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            bson_iter_t options;
            bson_iter_recurse(&iter, &options);
            if (bson_iter_find(&options, "allParameters") && bson_iter_as_bool(&options)) {
                all = true;
            }
        }
    }
    bool found = false;
    if (all || bson_has_field(context->command, "featureCompatibilityVersion")) {
        bson_t version;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "featureCompatibilityVersion", &version);
        BSON_APPEND_UTF8(&version, "version", "6.0");
        bson_append_document_end(reply, &version);
        found = true;
    }
    if (all || bson_has_field(context->command, "authenticationMechanisms")) {
        bson_t mechanisms;
        BSON_APPEND_ARRAY_BEGIN(reply, "authenticationMechanisms", &mechanisms);
        BSON_APPEND_UTF8(&mechanisms, "0", "SCRAM-SHA-1");
        BSON_APPEND_UTF8(&mechanisms, "1", "SCRAM-SHA-256");
        bson_append_array_end(reply, &mechanisms);
        found = true;
    }
    if (all || bson_has_field(context->command, "maxBSONDepth")) {
        BSON_APPEND_INT32(reply, "maxBSONDepth", WIRE_MAX_BSON_DEPTH);
        found = true;
    }
    if (all || bson_has_field(context->command, "cursorTimeoutMillis")) {
        BSON_APPEND_INT64(reply, "cursorTimeoutMillis", cursor_table_timeout_ms(context->store->cursors));
        found = true;
    }
    if (all || bson_has_field(context->command, "ttlMonitorSleepSecs")) {
        BSON_APPEND_INT32(reply, "ttlMonitorSleepSecs", (int32_t)ttl_monitor_sleep_seconds(context->store->ttl));
        found = true;
    }
    if (all || bson_has_field(context->command, "ttlMonitorEnabled")) {
        BSON_APPEND_BOOL(reply, "ttlMonitorEnabled", ttl_monitor_enabled(context->store->ttl));
        found = true;
    }
    if (all || bson_has_field(context->command, "transactionLifetimeLimitSeconds")) {
        BSON_APPEND_INT32(reply, "transactionLifetimeLimitSeconds",
                          (int32_t)transaction_lifetime_seconds(context->store->transactions));
        found = true;
    }
    if (!found) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "no option found to get");
    }
    return true;
}

/* setParameter: the runtime parameters the store has, as mongod names them. */
static bool handle_set_parameter(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    bson_iter_t iter;
    if (strcmp(context->database, "admin") != 0) {
        return tc_error_set(error, TC_ERR_UNAUTHORIZED, "setParameter may only be run against the admin database.");
    }
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter); /* setParameter: 1 */
    bool found = false;
    while (bson_iter_next(&iter)) {
        const char *name = bson_iter_key(&iter);
        if (name[0] == '$' || strcmp(name, "lsid") == 0 || strcmp(name, "comment") == 0) {
            continue;
        }
        if (strcmp(name, "ttlMonitorEnabled") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&iter)) {
                return tc_error_set(error, TC_ERR_BAD_VALUE, "Invalid value for parameter %s: not a boolean", name);
            }
            BSON_APPEND_BOOL(reply, "was", ttl_monitor_enabled(context->store->ttl));
            ttl_monitor_set_enabled(context->store->ttl, bson_iter_bool(&iter));
            found = true;
            continue;
        }
        bool is_lifetime = strcmp(name, "transactionLifetimeLimitSeconds") == 0;
        bool is_ttl_sleep = strcmp(name, "ttlMonitorSleepSecs") == 0;
        if (!is_lifetime && !is_ttl_sleep && strcmp(name, "cursorTimeoutMillis") != 0) {
            return tc_error_set(error, TC_ERR_INVALID_OPTIONS,
                                "attempted to set unrecognized parameter [%s], use help:true to see options ", name);
        }
        if (!BSON_ITER_HOLDS_NUMBER(&iter)) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Invalid value for parameter %s: not a number", name);
        }
        int64_t value = bson_iter_as_int64(&iter);
        if (is_lifetime) {
            if (value < 1 || value > INT32_MAX) {
                return tc_error_set(error, TC_ERR_BAD_VALUE,
                                    "transactionLifetimeLimitSeconds must be greater than or equal to 1s");
            }
            BSON_APPEND_INT32(reply, "was", (int32_t)transaction_lifetime_seconds(context->store->transactions));
            transaction_set_lifetime_seconds(context->store->transactions, value);
        } else if (is_ttl_sleep) {
            if (value < 1 || value > INT32_MAX) {
                return tc_error_set(error, TC_ERR_BAD_VALUE, "ttlMonitorSleepSecs must be at least 1 (second)");
            }
            BSON_APPEND_INT32(reply, "was", (int32_t)ttl_monitor_sleep_seconds(context->store->ttl));
            ttl_monitor_set_sleep_seconds(context->store->ttl, value);
        } else {
            /* No bound, as mongod: 0 or less reaps every idle cursor on the next pass. */
            BSON_APPEND_INT64(reply, "was", cursor_table_timeout_ms(context->store->cursors));
            cursor_table_set_timeout_ms(context->store->cursors, value);
        }
        found = true;
    }
    if (!found) {
        return tc_error_set(error, TC_ERR_INVALID_OPTIONS, "no option found to set, use help:true to see options ");
    }
    return true;
}

static bool handle_host_info(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)context, (void)error;
    struct utsname name;
    char hostname[256] = "localhost";
    uname(&name);
    gethostname(hostname, sizeof hostname - 1);
    bson_t system, os, extra;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "system", &system);
    BSON_APPEND_DATE_TIME(&system, "currentTime", clock_wall_ms());
    BSON_APPEND_UTF8(&system, "hostname", hostname);
    BSON_APPEND_INT32(&system, "cpuAddrSize", 64);
    BSON_APPEND_INT64(&system, "memSizeMB", (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE) / (1024 * 1024));
    BSON_APPEND_INT32(&system, "numCores", (int32_t)sysconf(_SC_NPROCESSORS_ONLN));
    BSON_APPEND_UTF8(&system, "cpuArch", name.machine);
    BSON_APPEND_BOOL(&system, "numaEnabled", false);
    bson_append_document_end(reply, &system);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "os", &os);
    BSON_APPEND_UTF8(&os, "type", name.sysname);
    BSON_APPEND_UTF8(&os, "name", name.sysname);
    BSON_APPEND_UTF8(&os, "version", name.release);
    bson_append_document_end(reply, &os);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "extra", &extra);
    BSON_APPEND_UTF8(&extra, "versionString", name.version);
    BSON_APPEND_INT64(&extra, "pageSize", sysconf(_SC_PAGESIZE));
    bson_append_document_end(reply, &extra);
    return true;
}

static bool handle_whats_my_uri(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)error;
    BSON_APPEND_UTF8(reply, "you", context->peer_address);
    return true;
}

/* endSessions and killSessions: the sessions' open transactions are aborted;
 * endSessions also drops them from the session cache. killSessions: [] (every
 * session of the user, on mongod) is refused here rather than guessed. */
static bool end_or_kill_sessions(command_context_t *context, const char *name, bool end, bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, context->command, name) || !BSON_ITER_HOLDS_ARRAY(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '%s.%s' is the wrong type, expected type 'array'",
                            name, name);
    }
    bson_t lsids;
    uint32_t length;
    const uint8_t *data;
    bson_iter_array(&iter, &length, &data);
    bson_init_static(&lsids, data, length);
    if (!end && bson_empty(&lsids)) {
        return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED,
                            "killSessions with an empty list (every session) is not supported: name the sessions");
    }
    transaction_end_sessions(context->store->transactions, &lsids, end);
    if (end) {
        session_cache_end(context->store->sessions, &lsids);
    }
    return true;
}

static bool handle_end_sessions(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)reply;
    return end_or_kill_sessions(context, "endSessions", true, error);
}

static bool handle_kill_sessions(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)reply;
    return end_or_kill_sessions(context, "killSessions", false, error);
}

static bool handle_get_cmd_line_opts(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)error;
    bson_t argv, parsed, net, storage;
    BSON_APPEND_ARRAY_BEGIN(reply, "argv", &argv);
    BSON_APPEND_UTF8(&argv, "0", "thermocline");
    BSON_APPEND_UTF8(&argv, "1", "store");
    bson_append_array_end(reply, &argv);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "parsed", &parsed);
    BSON_APPEND_DOCUMENT_BEGIN(&parsed, "net", &net);
    BSON_APPEND_UTF8(&net, "bindIp", context->store->options.bind_address);
    BSON_APPEND_INT32(&net, "port", server_port(context->store->server));
    bson_append_document_end(&parsed, &net);
    BSON_APPEND_DOCUMENT_BEGIN(&parsed, "storage", &storage);
    BSON_APPEND_UTF8(&storage, "dbPath", context->store->options.dbpath);
    bson_append_document_end(&parsed, &storage);
    bson_append_document_end(reply, &parsed);
    return true;
}

static bool handle_get_log(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    bson_iter_t iter;
    if (!bson_iter_init_find(&iter, context->command, "getLog") || !BSON_ITER_HOLDS_UTF8(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "Argument to getLog must be of type String");
    }
    const char *which = bson_iter_utf8(&iter, NULL);
    bson_t names;
    if (strcmp(which, "*") == 0) {
        BSON_APPEND_ARRAY_BEGIN(reply, "names", &names);
        BSON_APPEND_UTF8(&names, "0", "global");
        BSON_APPEND_UTF8(&names, "1", "startupWarnings");
        bson_append_array_end(reply, &names);
        return true;
    }
    if (strcmp(which, "global") != 0 && strcmp(which, "startupWarnings") != 0) {
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "No log named '%s'", which);
    }
    BSON_APPEND_INT32(reply, "totalLinesWritten", 0);
    BSON_APPEND_ARRAY_BEGIN(reply, "log", &names);
    bson_append_array_end(reply, &names);
    return true;
}

static bool handle_connection_status(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)error;
    auth_append_connection_status(context, reply);
    return true;
}

/* mongod's serverStatus leaves out a section the command names with a false
 * value ({serverStatus: 1, wiredTiger: 0}). */
static bool section_wanted(const command_context_t *context, const char *section)
{
    bson_iter_t iter;
    return !bson_iter_init_find(&iter, context->command, section) || bson_iter_as_bool(&iter);
}

/* VmRSS and VmSize of this process, in megabytes as serverStatus.mem shows them. */
static void append_memory(bson_t *reply)
{
    int64_t resident_kib = 0, virtual_kib = 0;
    char line[256];
    FILE *status = fopen("/proc/self/status", "r");
    if (status != NULL) {
        while (fgets(line, sizeof line, status) != NULL) {
            long long value;
            if (sscanf(line, "VmRSS: %lld kB", &value) == 1) {
                resident_kib = value;
            } else if (sscanf(line, "VmSize: %lld kB", &value) == 1) {
                virtual_kib = value;
            }
        }
        fclose(status);
    }
    bson_t memory;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "mem", &memory);
    BSON_APPEND_INT32(&memory, "bits", (int32_t)(sizeof(void *) * 8));
    BSON_APPEND_INT32(&memory, "resident", (int32_t)(resident_kib / 1024));
    BSON_APPEND_INT32(&memory, "virtual", (int32_t)(virtual_kib / 1024));
    BSON_APPEND_BOOL(&memory, "supported", status != NULL);
    bson_append_document_end(reply, &memory);
}

/* Not a mongod section: the emulated volume under --read-iops and --sync-delay
 * (slow_disk.h) and the network limits (server.h). */
static void append_thermocline(const store_t *store, bson_t *reply)
{
    slow_disk_stats_t disk = slow_disk_stats();
    server_connection_stats_t connections = server_connection_stats(store->server);
    bson_t thermocline, read_iops, syncs, network;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "thermocline", &thermocline);
    BSON_APPEND_DOCUMENT_BEGIN(&thermocline, "readIops", &read_iops);
    BSON_APPEND_INT64(&read_iops, "cap", (int64_t)disk.cap);
    BSON_APPEND_INT64(&read_iops, "reads", (int64_t)disk.reads);
    BSON_APPEND_INT64(&read_iops, "ioUnits", (int64_t)disk.io_units);
    BSON_APPEND_INT64(&read_iops, "bytesRead", (int64_t)disk.bytes_read);
    BSON_APPEND_INT64(&read_iops, "throttledReads", (int64_t)disk.throttled_reads);
    BSON_APPEND_INT64(&read_iops, "throttledWaitMicros", (int64_t)disk.throttled_wait_micros);
    bson_append_document_end(&thermocline, &read_iops);
    BSON_APPEND_DOCUMENT_BEGIN(&thermocline, "syncs", &syncs);
    BSON_APPEND_INT64(&syncs, "delayMillis", (int64_t)disk.sync_delay_ms);
    BSON_APPEND_INT64(&syncs, "count", (int64_t)disk.syncs);
    bson_append_document_end(&thermocline, &syncs);
    /* The network layer's limits (server.h): what they refused, what waits. */
    BSON_APPEND_DOCUMENT_BEGIN(&thermocline, "network", &network);
    BSON_APPEND_INT64(&network, "tlsConnections", (int64_t)connections.tls);
    BSON_APPEND_INT64(&network, "timedOut", (int64_t)connections.timed_out);
    BSON_APPEND_INT64(&network, "queuedReplyBytes", (int64_t)connections.queued_reply_bytes);
    BSON_APPEND_INT64(&network, "pointReadsOnLoop", (int64_t)atomic_load(&store->loop_point_reads.count));
    bson_append_document_end(&thermocline, &network);
    bson_append_document_end(reply, &thermocline);
}

/* mongod's oplog section, left out unless asked for ({serverStatus: 1, oplog: 1})
 * and on a replica set member only: the oplog window, which an operator compares
 * with how long a change stream's reader may fall behind. */
static bool append_oplog_window(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    bson_iter_t iter;
    oplog_t *oplog = oplog_for(context->store->storage);
    if (oplog == NULL || !bson_iter_init_find(&iter, context->command, "oplog") || !bson_iter_as_bool(&iter)) {
        return true;
    }
    uint64_t first = 0, last = 0;
    if (!oplog_read_bounds(context->session, &first, &last, error)) {
        return false;
    }
    uint64_t latest = oplog_committed_time(oplog);
    bson_t section;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "oplog", &section);
    BSON_APPEND_TIMESTAMP(&section, "latestOptime", OPLOG_TIME_SECONDS(latest), OPLOG_TIME_INCREMENT(latest));
    BSON_APPEND_TIMESTAMP(&section, "earliestOptime", OPLOG_TIME_SECONDS(first), OPLOG_TIME_INCREMENT(first));
    bson_append_document_end(reply, &section);
    return true;
}

static bool handle_server_status(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    store_t *store = context->store;
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    BSON_APPEND_UTF8(reply, "host", host);
    BSON_APPEND_UTF8(reply, "version", MONGODB_VERSION);
    BSON_APPEND_UTF8(reply, "process", "thermocline-store");
    BSON_APPEND_INT64(reply, "pid", (int64_t)getpid());
    int64_t uptime_ms = clock_wall_ms() - store->start_time_ms;
    BSON_APPEND_DOUBLE(reply, "uptime", (double)(uptime_ms / 1000));
    BSON_APPEND_INT64(reply, "uptimeMillis", uptime_ms);
    BSON_APPEND_INT64(reply, "uptimeEstimate", uptime_ms / 1000);
    BSON_APPEND_DATE_TIME(reply, "localTime", clock_wall_ms());

    if (section_wanted(context, "connections")) {
        bson_t connections;
        server_connection_stats_t stats = server_connection_stats(store->server);
        BSON_APPEND_DOCUMENT_BEGIN(reply, "connections", &connections);
        BSON_APPEND_INT32(&connections, "current", (int32_t)stats.current);
        BSON_APPEND_INT32(&connections, "available", (int32_t)stats.available);
        BSON_APPEND_INT32(&connections, "totalCreated", (int32_t)stats.total_created);
        bson_append_document_end(reply, &connections);
    }
    if (section_wanted(context, "mem")) {
        append_memory(reply);
    }
    if (section_wanted(context, "opLatencies")) {
        bson_t latencies;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "opLatencies", &latencies);
        op_latency_append(&store->latencies, &latencies);
        bson_append_document_end(reply, &latencies);
    }
    if (section_wanted(context, "opcounters")) {
        bson_t opcounters;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "opcounters", &opcounters);
        BSON_APPEND_INT64(&opcounters, "insert", atomic_load(&store->opcounters.insert));
        BSON_APPEND_INT64(&opcounters, "query", atomic_load(&store->opcounters.query));
        BSON_APPEND_INT64(&opcounters, "update", atomic_load(&store->opcounters.update));
        BSON_APPEND_INT64(&opcounters, "delete", atomic_load(&store->opcounters.delete_));
        BSON_APPEND_INT64(&opcounters, "getmore", atomic_load(&store->opcounters.getmore));
        BSON_APPEND_INT64(&opcounters, "command", atomic_load(&store->opcounters.command));
        bson_append_document_end(reply, &opcounters);
    }
    if (section_wanted(context, "transactions")) {
        bson_t transactions;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "transactions", &transactions);
        transaction_append_statistics(store->transactions, &transactions);
        bson_append_document_end(reply, &transactions);
    }
    if (section_wanted(context, "metrics")) {
        bson_t metrics, ttl;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "metrics", &metrics);
        BSON_APPEND_DOCUMENT_BEGIN(&metrics, "ttl", &ttl);
        ttl_monitor_append_metrics(store->ttl, &ttl);
        bson_append_document_end(&metrics, &ttl);
        bson_append_document_end(reply, &metrics);
    }
    if (section_wanted(context, "storageEngine")) {
        bson_t engine;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "storageEngine", &engine);
        BSON_APPEND_UTF8(&engine, "name", "wiredTiger");
        BSON_APPEND_BOOL(&engine, "supportsCommittedReads", true);
        BSON_APPEND_BOOL(&engine, "readOnly", false);
        BSON_APPEND_BOOL(&engine, "persistent", true);
        bson_append_document_end(reply, &engine);
    }
    if (section_wanted(context, "thermocline")) {
        append_thermocline(store, reply);
    }
    if (!append_oplog_window(context, reply, error)) {
        return false;
    }
    if (section_wanted(context, "wiredTiger")) {
        bson_t wired_tiger;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "wiredTiger", &wired_tiger);
        BSON_APPEND_UTF8(&wired_tiger, "uri", "statistics:");
        bool ok = storage_append_cache_statistics(context->session, &wired_tiger, error);
        bson_append_document_end(reply, &wired_tiger);
        if (!ok) {
            return false;
        }
    }
    return true;
}

/* A checkpoint, so everything written so far is in the data files (and
 * collStats.storageSize counts it). fsync's lock mode is not offered. */
static bool handle_fsync(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    bool lock;
    if (strcmp(context->database, "admin") != 0) {
        return tc_error_set(error, TC_ERR_UNAUTHORIZED, "fsync may only be run against the admin database.");
    }
    if (!command_get_bool(context, "lock", false, &lock, error)) {
        return false;
    }
    if (lock) {
        return tc_error_set(error, TC_ERR_COMMAND_NOT_SUPPORTED,
                            "thermocline store does not support fsync with lock: true (fsyncLock)");
    }
    if (!storage_checkpoint(context->session, error)) {
        return false;
    }
    BSON_APPEND_INT32(reply, "numFiles", 1);
    return true;
}

const command_definition_t admin_commands[] = {
    {"hello", handle_hello},
    {"isMaster", handle_hello},
    {"ismaster", handle_hello},
    {"ping", handle_ping},
    {"buildInfo", handle_build_info},
    {"buildinfo", handle_build_info},
    {"_isSelf", handle_is_self},
    {"getParameter", handle_get_parameter},
    {"setParameter", handle_set_parameter},
    {"hostInfo", handle_host_info},
    {"whatsmyuri", handle_whats_my_uri},
    {"endSessions", handle_end_sessions},
    {"killSessions", handle_kill_sessions},
    {"getCmdLineOpts", handle_get_cmd_line_opts},
    {"getLog", handle_get_log},
    {"connectionStatus", handle_connection_status},
    {"serverStatus", handle_server_status},
    {"fsync", handle_fsync},
    {NULL, NULL},
};
