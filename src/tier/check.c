/* `thermocline check --config FILE`: the preflight an operator runs before
 * switching traffic to the proxy. It reaches both tiers as the proxy would (the
 * config's URIs: credentials, TLS), asks them only commands MongoDB has, and
 * prints one line per finding, each saying what to do: errors make the pair unfit
 * (exit 1), warnings do not. This file: the tiers (reachable, replica sets, one
 * major release), the fast tier's cache against the windows, and its oplog window
 * against the feeder's lag; check_privileges.c and check_namespace.c the rest. */
#include "tier/check.h"
#include "tier/check_private.h"

#include "common/log.h"
#include "config/arguments.h"

#include <stdarg.h>
#include <string.h>

/* WiredTiger starts evicting at 80% of its cache (eviction_target): a window
 * above that share already costs the fast tier evictions. */
#define CACHE_EVICTION_TARGET 0.8
#define MEGABYTE (1024.0 * 1024.0)

void check_report(check_report_t *report, check_severity_t severity, const char *format, ...)
{
    static const char *const labels[] = {"error", "warning", "note"};
    if (severity == CHECK_NOTE && !report->verbose) {
        return;
    }
    report->errors += severity == CHECK_ERROR;
    report->warnings += severity == CHECK_WARNING;
    va_list arguments;
    va_start(arguments, format);
    fprintf(report->out, "%s: ", labels[severity]);
    vfprintf(report->out, format, arguments);
    fputc('\n', report->out);
    va_end(arguments);
    fflush(report->out);
}

const char *check_reason(const bson_error_t *error)
{
    return tier_error_code(error) == TC_ERR_UNAUTHORIZED ? "not authorized (Unauthorized 13)" : error->message;
}

/* --- the tiers ---------------------------------------------------------------------- */

static const char *utf8_field(const bson_t *document, const char *key)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, document, key) && BSON_ITER_HOLDS_UTF8(&iter) ? bson_iter_utf8(&iter, NULL)
                                                                                    : NULL;
}

/* Reaches tier with uri: hello answers. An unreachable tier is an error, and
 * tier->client stays NULL. */
static void connect_tier(check_report_t *report, check_tier_t *tier, const char *uri)
{
    bson_error_t error;
    char *shown = config_uri_redacted(uri);
    tier->pool = tier_pool_new(uri, "thermocline-check", &error);
    if (tier->pool == NULL) {
        check_report(report, CHECK_ERROR, "%s: %s: fix the %s URI in the config", tier->name, check_reason(&error),
                     tier->name);
        bson_free(shown);
        return;
    }
    mongoc_client_t *client = mongoc_client_pool_pop(tier->pool);
    bson_t command = BSON_INITIALIZER, reply;
    BSON_APPEND_INT32(&command, "hello", 1);
    if (tier_command(client, "admin", &command, &reply, &error)) {
        tier->client = client;
        const char *set_name = utf8_field(&reply, "setName");
        const char *message = utf8_field(&reply, "msg");
        if (set_name != NULL) {
            check_report(report, CHECK_NOTE, "%s: %s reached, replica set %s", tier->name, shown, set_name);
        } else if (message != NULL && strcmp(message, "isdbgrid") == 0) {
            check_report(report, CHECK_WARNING,
                         "%s: %s is a mongos (a sharded cluster): thermocline is tested against replica sets "
                         "only; point the %s URI at a replica set",
                         tier->name, shown, tier->name);
        } else {
            check_report(report, CHECK_ERROR,
                         "%s: %s is not a replica set member (hello has no setName): change streams, which the "
                         "feeder and the warmer read, need one; start it as a replica set (mongod "
                         "--replSet NAME and rs.initiate(); thermocline store --replSet NAME) and name it in the "
                         "URI (?replicaSet=NAME)",
                         tier->name, shown);
        }
    } else {
        mongoc_client_pool_push(tier->pool, client);
        check_report(report, CHECK_ERROR,
                     "%s: cannot reach %s (%s): check that it runs and that the %s URI's host, credentials "
                     "(user, password, authSource, authMechanism) and TLS options (tls, tlsCAFile, "
                     "tlsCertificateKeyFile) are right",
                     tier->name, shown, check_reason(&error), tier->name);
    }
    bson_destroy(&reply);
    bson_destroy(&command);
    bson_free(shown);
}

static void close_tier(check_tier_t *tier)
{
    if (tier->client != NULL) {
        mongoc_client_pool_push(tier->pool, tier->client);
    }
    if (tier->pool != NULL) {
        mongoc_client_pool_destroy(tier->pool);
    }
    bson_destroy(&tier->privileges);
}

/* The release a tier runs (buildInfo's version), and its major release: the first
 * two numbers of versionArray ("6.0" of 6.0.5). */
static bool read_release(check_tier_t *tier, char *out_version, size_t size, int *out_major, int *out_minor,
                         bson_error_t *error)
{
    bson_t command = BSON_INITIALIZER, reply;
    bson_iter_t iter, element;
    BSON_APPEND_INT32(&command, "buildInfo", 1);
    bool ok = tier_command(tier->client, "admin", &command, &reply, error);
    const char *version = ok ? utf8_field(&reply, "version") : NULL;
    snprintf(out_version, size, "%s", version != NULL ? version : "?");
    *out_major = *out_minor = -1;
    if (ok && bson_iter_init_find(&iter, &reply, "versionArray") && BSON_ITER_HOLDS_ARRAY(&iter) &&
        bson_iter_recurse(&iter, &element) && bson_iter_next(&element)) {
        *out_major = (int)bson_iter_as_int64(&element);
        *out_minor = bson_iter_next(&element) ? (int)bson_iter_as_int64(&element) : -1;
    } else if (ok && (version == NULL || sscanf(version, "%d.%d", out_major, out_minor) != 2)) {
        ok = tc_error_set(error, TC_ERR_OPERATION_FAILED, "buildInfo shows no version");
    }
    bson_destroy(&reply);
    bson_destroy(&command);
    return ok;
}

/* The archive answers the application's queries and the fast tier answers them
 * in its place: one major release on both, so that both answer alike (I4). */
static void check_releases(check_report_t *report, check_tier_t *archive, check_tier_t *fast)
{
    char versions[2][64];
    int major[2], minor[2];
    check_tier_t *tiers[2] = {archive, fast};
    for (int i = 0; i < 2; i++) {
        bson_error_t error;
        if (!read_release(tiers[i], versions[i], sizeof versions[i], &major[i], &minor[i], &error)) {
            check_report(report, CHECK_WARNING, "%s: cannot read its release (buildInfo: %s): compare it with the "
                         "other tier's by hand (db.version())", tiers[i]->name, check_reason(&error));
            return;
        }
    }
    if (major[0] != major[1] || minor[0] != minor[1]) {
        check_report(report, CHECK_ERROR,
                     "the archive runs MongoDB %s and the fast tier %s: run the same major release on both (%d.%d), "
                     "or the fast tier may answer a query differently from the archive",
                     versions[0], versions[1], major[0], minor[0]);
    } else {
        check_report(report, CHECK_NOTE, "both tiers run MongoDB %d.%d (archive %s, fast %s)", major[0], minor[0],
                     versions[0], versions[1]);
    }
}

/* --- the fast tier's cache and oplog ------------------------------------------------------ */

/* The cache the windows must fit in: WiredTiger's "maximum bytes configured". */
static void check_cache(check_report_t *report, const bson_t *status, const check_window_t *windows, size_t count,
                        const config_t *config)
{
    bool found = false;
    bson_iter_t iter, cache, maximum;
    double cache_bytes = 0;
    if (bson_iter_init(&iter, status) && bson_iter_find_descendant(&iter, "wiredTiger.cache", &cache) &&
        BSON_ITER_HOLDS_DOCUMENT(&cache) && bson_iter_recurse(&cache, &maximum) &&
        bson_iter_find(&maximum, "maximum bytes configured") && BSON_ITER_HOLDS_NUMBER(&maximum)) {
        cache_bytes = bson_iter_as_double(&maximum);
        found = true;
    }
    if (!found) {
        check_report(report, CHECK_WARNING,
                     "fast: serverStatus shows no wiredTiger.cache \"maximum bytes configured\": compare the "
                     "windows' sizes with its cache by hand");
        return;
    }
    double total = 0;
    char parts[1024] = "";
    size_t used = 0;
    for (size_t i = 0; i < count; i++) {
        if (!windows[i].measured) {
            continue;
        }
        double bytes = windows[i].data_bytes + windows[i].index_bytes;
        total += bytes;
        int written = snprintf(parts + used, sizeof parts - used, "%s%s %lld documents, ~%.1f MB", used ? "; " : "",
                               config->namespaces[i].ns, (long long)windows[i].documents, bytes / MEGABYTE);
        used = written > 0 && (size_t)written < sizeof parts - used ? used + (size_t)written : used;
    }
    if (total > cache_bytes) {
        check_report(report, CHECK_ERROR,
                     "fast: the windows (%s: estimated from the archive, with their indexes) need ~%.1f MB, more "
                     "than the fast tier's WiredTiger cache of %.1f MB: its reads would go to disk, which tiering "
                     "is meant to avoid; give the fast tier a larger cache (storage.wiredTiger.engineConfig."
                     "cacheSizeGB; thermocline store --cache-size) or shorten maxAge",
                     parts, total / MEGABYTE, cache_bytes / MEGABYTE);
    } else if (total > cache_bytes * CACHE_EVICTION_TARGET) {
        check_report(report, CHECK_WARNING,
                     "fast: the windows (%s) need ~%.1f MB, more than %.0f%% of the fast tier's WiredTiger cache of "
                     "%.1f MB, where WiredTiger starts evicting: give it a larger cache or shorten maxAge",
                     parts, total / MEGABYTE, CACHE_EVICTION_TARGET * 100, cache_bytes / MEGABYTE);
    } else if (used > 0) {
        check_report(report, CHECK_NOTE, "fast: the windows (%s) need ~%.1f MB of its %.1f MB cache", parts,
                     total / MEGABYTE, cache_bytes / MEGABYTE);
    }
}

/* The feeder resumes the fast tier's change stream from its checkpoint: the oplog
 * must still hold every entry after it. */
static void check_oplog_window(check_report_t *report, mongoc_client_t *fast, const bson_t *status)
{
    bson_iter_t iter;
    uint64_t earliest = 0, latest = 0;
    if (bson_iter_init(&iter, status) && bson_iter_find_descendant(&iter, "oplog.earliestOptime", &iter)) {
        earliest = timestamp_of_iter(&iter);
    }
    if (bson_iter_init(&iter, status) && bson_iter_find_descendant(&iter, "oplog.latestOptime", &iter)) {
        latest = timestamp_of_iter(&iter);
    }
    if (earliest == 0 || latest == 0) {
        check_report(report, CHECK_WARNING,
                     "fast: serverStatus {oplog: 1} shows no oplog window: check by hand "
                     "(db.getReplicationInfo()) that it is longer than the feeder may fall behind");
        return;
    }
    int64_t window_seconds = (int64_t)(latest >> 32) - (int64_t)(earliest >> 32);
    bson_t filter = BSON_INITIALIZER, documents;
    bson_error_t error;
    BSON_APPEND_UTF8(&filter, "_id", "stream");
    uint64_t applied = 0;
    if (!tier_read_state(fast, TIER_FEEDER_COLLECTION, &filter, &documents, &error)) {
        check_report(report, CHECK_WARNING, "fast: cannot read the feeder's checkpoint (%s.%s: %s)", TIER_DATABASE,
                     TIER_FEEDER_COLLECTION, check_reason(&error));
    } else if (bson_iter_init(&iter, &documents) && bson_iter_next(&iter) && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
        bson_t checkpoint;
        bson_view_of(&iter, &checkpoint);
        applied = timestamp_find(&checkpoint, "appliedTime");
    }
    int64_t lag_seconds = applied != 0 && latest > applied ? (int64_t)(latest >> 32) - (int64_t)(applied >> 32) : 0;
    if (applied != 0 && applied < earliest) {
        check_report(report, CHECK_ERROR,
                     "fast: the feeder's checkpoint (%lld s behind) is older than the fast tier's oldest oplog entry "
                     "(a window of %lld s): the writes in between are no longer in its change stream, so the "
                     "archive misses them; copy the tiered namespaces' fast-tier documents to the archive, then "
                     "delete the checkpoint (db.getSiblingDB(\"%s\").%s.deleteOne({_id: \"stream\"})) and enlarge "
                     "the fast tier's oplog (replSetResizeOplog; thermocline store --oplog-size)",
                     (long long)lag_seconds, (long long)window_seconds, TIER_DATABASE, TIER_FEEDER_COLLECTION);
    } else if (applied != 0 && lag_seconds * 2 > window_seconds) {
        check_report(report, CHECK_WARNING,
                     "fast: the feeder is %lld s behind and the fast tier's oplog holds %lld s: past that lag it "
                     "loses its place; enlarge the oplog (replSetResizeOplog; thermocline store --oplog-size) or "
                     "find why the feeder lags (thermoclineStatus)",
                     (long long)lag_seconds, (long long)window_seconds);
    } else {
        check_report(report, CHECK_NOTE, "fast: oplog window %lld s, feeder %s", (long long)window_seconds,
                     applied != 0 ? "checkpointed inside it" : "not started yet");
    }
    bson_destroy(&documents);
    bson_destroy(&filter);
}

static void check_fast_status(check_report_t *report, const config_t *config, check_tier_t *fast,
                              const check_window_t *windows)
{
    bson_t command = BSON_INITIALIZER, status;
    bson_error_t error;
    BSON_APPEND_INT32(&command, "serverStatus", 1);
    BSON_APPEND_INT32(&command, "oplog", 1);
    if (tier_command(fast->client, "admin", &command, &status, &error)) {
        check_cache(report, &status, windows, config->namespace_count, config);
        check_oplog_window(report, fast->client, &status);
    } else {
        check_report(report, CHECK_WARNING,
                     "fast: serverStatus refused (%s): its cache and oplog window are not checked; grant the "
                     "fast URI's user clusterMonitor on admin to check them",
                     check_reason(&error));
    }
    bson_destroy(&status);
    bson_destroy(&command);
}

/* --- the command ----------------------------------------------------------------------- */

static int run_check(const config_t *config, check_report_t *report)
{
    check_tier_t archive = {.name = "archive"}, fast = {.name = "fast", .is_fast = true};
    bson_init(&archive.privileges);
    bson_init(&fast.privileges);
    connect_tier(report, &archive, config->archive_uri);
    connect_tier(report, &fast, config->fast_uri);
    if (archive.client != NULL && fast.client != NULL) {
        check_releases(report, &archive, &fast);
    }
    bool archive_usable = archive.client != NULL && check_privileges(report, config, &archive);
    bool fast_usable = fast.client != NULL && check_privileges(report, config, &fast);
    check_window_t *windows = bson_malloc0((config->namespace_count + 1) * sizeof *windows);
    for (size_t i = 0; archive_usable && i < config->namespace_count; i++) {
        check_namespace(report, archive.client, fast_usable ? fast.client : NULL, &config->namespaces[i],
                        &windows[i]);
    }
    if (fast_usable) {
        check_fast_status(report, config, &fast, windows);
    }
    bson_free(windows);
    close_tier(&archive);
    close_tier(&fast);
    if (report->errors > 0) {
        fprintf(report->out, "thermocline check: not ready: %zu error(s), %zu warning(s)\n", report->errors,
                report->warnings);
        return 1;
    }
    fprintf(report->out, "thermocline check: ready (%zu warning(s))\n", report->warnings);
    return 0;
}

static void print_usage(FILE *stream, const char *name)
{
    (void)name;
    fprintf(stream,
            "usage: thermocline check --config FILE [--verbose]\n"
            "\n"
            "The preflight before traffic is switched to the proxy: reaches both tiers with the\n"
            "config's URIs (credentials, TLS) and prints one line per finding, each saying what\n"
            "to do, then a summary line.\n"
            "\n"
            "  error (exit 1): a tier unreachable; not a replica set; the tiers on different\n"
            "      major releases; the proxy's user short of a privilege it needs; a collection\n"
            "      that cannot be tiered or has no index starting with timeField in the archive\n"
            "      (a warning with requireTimeFieldIndex: false); the windows larger than the fast\n"
            "      tier's WiredTiger cache; the feeder's checkpoint older than the fast tier's oplog.\n"
            "  warning (exit 0): documents without a date in timeField; the windows above 80%% of\n"
            "      the cache; the feeder lagging more than half the oplog window; the fast tier's\n"
            "      indexes or validator differing from the archive's (the index sync will change\n"
            "      them); a collection not in the archive yet; what could not be measured.\n"
            "\n"
            "  --config FILE   the proxy's YAML config\n"
            "  --verbose       also print what was measured (note: lines)\n"
            "  --help          this text\n"
            "\n"
            "Exit status: 0 ready, 1 not ready (or the config cannot be read), 2 bad usage.\n");
}

int check_main(int argc, char **argv)
{
    config_arguments_t arguments;
    int usage_status = config_arguments_parse(argc, argv, print_usage, &arguments);
    if (usage_status >= 0) {
        return usage_status;
    }
    check_report_t report = {.out = stdout, .verbose = arguments.verbose};
    bson_error_t error;
    config_t *config = config_load_file(arguments.config_path, &error);
    if (config == NULL) {
        fprintf(stderr, "thermocline check: %s\n", error.message);
        return 1;
    }
    /* libmongoc's own warnings (a server it could not reach) would repeat the findings. */
    tc_log_set_level(TC_LOG_ERROR);
    tier_libmongoc_init();
    int status = run_check(config, &report);
    config_destroy(config);
    mongoc_cleanup();
    return status;
}
