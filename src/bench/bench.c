/* `thermocline bench`: flags, the connection pool, finding how many documents a
 * run starts from, and the exit status. The threads live in run.c, the table
 * and the JSON in report.c. */
#include "bench/bench.h"
#include "bench/bench_private.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/units.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BENCH_MAX_THREADS 4096
#define BENCH_SERVER_SELECTION_TIMEOUT_MS 5000

static void print_usage(FILE *stream)
{
    fprintf(stream,
            "usage: thermocline bench --uri URI --workload NAME [options]\n"
            "\n"
            "A YCSB-style load generator: documents of 10 fields of 100 bytes, int64 _id in\n"
            "insertion order, a createdAt date spread over the year before the load (an insert's:\n"
            "now). insertunique and insertemail add an email distinct per _id and, before the run,\n"
            "create the indexes {createdAt: 1} (which a proxy tiering by createdAt requires) and\n"
            "{email: 1}, unique for insertunique; through a proxy, on both tiers.\n"
            "\n"
            "  --uri URI            MongoDB connection string (required); with several hosts\n"
            "                       and no replicaSet= (mongos or proxies), the timed runs\n"
            "                       spread their clients over them round-robin\n"
            "  --workload NAME      what to run (required; see below)\n"
            "  --threads N          concurrent clients, one connection each (default 64)\n"
            "  --duration D         measured time: 500ms, 10s, 15m ... (default 60s)\n"
            "  --warmup D           unmeasured time before it (default 0s)\n"
            "  --target-ops N       offered load, operations per second over all threads\n"
            "                       (default: as fast as possible); latency then counts from\n"
            "                       each operation's scheduled start\n"
            "  --records N          load: documents to insert (default %d); other workloads:\n"
            "                       documents present (default: highest _id + 1)\n"
            "  --database NAME      database (default ycsb)\n"
            "  --collection NAME    collection (default usertable)\n"
            "  --json FILE          also write every figure, with a per-second series, as JSON\n"
            "  --seed N             random seed (default: from the clock; the report shows it)\n"
            "  --reply-timeout D    how long a reply may take past the end, or a first one, or\n"
            "                       any of the load's, before bench fails it and exits (default 30s)\n"
            "  --help               this text\n"
            "\n"
            "workloads:\n",
            BENCH_DEFAULT_LOAD_RECORDS);
    for (const bench_workload_t *workload = bench_workload_all(); workload->name != NULL; workload++) {
        fprintf(stream, "  %-13s %s\n", workload->name, workload->summary);
    }
    fprintf(stream, "\nExit status: 0 success, 2 bad usage, 1 failure (server unreachable, documents\n"
                    "lost by the load, every operation failed).\n");
}

/* Prints a flag's error as the usage line and gives the exit status of bad usage. */
static int usage_error(const bson_error_t *error)
{
    fprintf(stderr, "thermocline bench: %s\n", error->message);
    return 2;
}

static void print_workload_names(FILE *stream)
{
    const char *separator = "";
    for (const bench_workload_t *workload = bench_workload_all(); workload->name != NULL; workload++) {
        fprintf(stream, "%s%s", separator, workload->name);
        separator = ", ";
    }
}

/* Parses argv into options and opens the JSON file. Returns 0 to go on, or the
 * exit status (0 after --help, 2 after bad usage, with its line on stderr). */
static int parse_options(int argc, char **argv, bench_options_t *options, FILE **out_json)
{
    enum { OPT_URI = 256, OPT_WORKLOAD, OPT_THREADS, OPT_DURATION, OPT_WARMUP, OPT_TARGET, OPT_RECORDS,
           OPT_DATABASE, OPT_COLLECTION, OPT_JSON, OPT_SEED, OPT_REPLY_TIMEOUT, OPT_HELP };
    static const struct option long_options[] = {
        {"uri", required_argument, NULL, OPT_URI},
        {"workload", required_argument, NULL, OPT_WORKLOAD},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"duration", required_argument, NULL, OPT_DURATION},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"target-ops", required_argument, NULL, OPT_TARGET},
        {"records", required_argument, NULL, OPT_RECORDS},
        {"database", required_argument, NULL, OPT_DATABASE},
        {"collection", required_argument, NULL, OPT_COLLECTION},
        {"json", required_argument, NULL, OPT_JSON},
        {"seed", required_argument, NULL, OPT_SEED},
        {"reply-timeout", required_argument, NULL, OPT_REPLY_TIMEOUT},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    const char *workload_name = NULL;
    const char *timed_flag = NULL; /* a flag that makes no sense for the load */
    int64_t number;
    bson_error_t error;
    memset(options, 0, sizeof *options);
    options->database = "ycsb";
    options->collection = "usertable";
    options->thread_count = 64;
    options->duration_ms = 60000;
    options->reply_timeout_ms = 30000;
    options->seed = (uint64_t)clock_wall_ms() ^ ((uint64_t)getpid() << 40) ^ (uint64_t)clock_monotonic_ns();
    *out_json = NULL;
    opterr = 0;
    optind = 1;
    int option;
    while ((option = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
        switch (option) {
        case OPT_URI:
            options->uri_string = optarg;
            break;
        case OPT_WORKLOAD:
            workload_name = optarg;
            break;
        case OPT_THREADS:
            if (!units_parse_count(optarg, "--threads", 1, BENCH_MAX_THREADS, &number, &error)) {
                return usage_error(&error);
            }
            options->thread_count = (int)number;
            break;
        case OPT_DURATION:
            if (!units_parse_flag_duration(optarg, "--duration", 1, false, &options->duration_ms, &error)) {
                return usage_error(&error);
            }
            timed_flag = "--duration";
            break;
        case OPT_WARMUP:
            if (!units_parse_flag_duration(optarg, "--warmup", 1, true, &options->warmup_ms, &error)) {
                return usage_error(&error);
            }
            timed_flag = "--warmup";
            break;
        case OPT_TARGET:
            if (!units_parse_count(optarg, "--target-ops", 1, 100000000, &options->target_ops, &error)) {
                return usage_error(&error);
            }
            timed_flag = "--target-ops";
            break;
        case OPT_RECORDS:
            if (!units_parse_count(optarg, "--records", 1, INT64_C(1) << 40, &options->record_count, &error)) {
                return usage_error(&error);
            }
            break;
        case OPT_DATABASE:
        case OPT_COLLECTION:
            if (optarg[0] == '\0' || strchr(optarg, '$') != NULL ||
                (option == OPT_DATABASE && strpbrk(optarg, "/\\. \"") != NULL)) {
                fprintf(stderr, "thermocline bench: '%s' is not a valid %s name\n", optarg,
                        option == OPT_DATABASE ? "database" : "collection");
                return 2;
            }
            *(option == OPT_DATABASE ? &options->database : &options->collection) = optarg;
            break;
        case OPT_JSON:
            options->json_path = optarg;
            break;
        case OPT_SEED:
            if (!units_parse_count(optarg, "--seed", 0, INT64_MAX, &number, &error)) {
                return usage_error(&error);
            }
            options->seed = (uint64_t)number;
            break;
        case OPT_REPLY_TIMEOUT:
            if (!units_parse_flag_duration(optarg, "--reply-timeout", 1, false, &options->reply_timeout_ms, &error)) {
                return usage_error(&error);
            }
            break;
        case OPT_HELP:
            print_usage(stdout);
            return -1;
        default:
            fprintf(stderr, "thermocline bench: unknown or incomplete option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "thermocline bench: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (options->uri_string == NULL) {
        fprintf(stderr, "thermocline bench: --uri is required (see --help)\n");
        return 2;
    }
    if (workload_name == NULL) {
        fprintf(stderr, "thermocline bench: --workload is required: one of ");
        print_workload_names(stderr);
        fprintf(stderr, "\n");
        return 2;
    }
    options->workload = bench_workload_find(workload_name);
    if (options->workload == NULL) {
        fprintf(stderr, "thermocline bench: unknown workload '%s': one of ", workload_name);
        print_workload_names(stderr);
        fprintf(stderr, "\n");
        return 2;
    }
    if (options->workload->is_load && timed_flag != NULL) {
        fprintf(stderr, "thermocline bench: %s does not apply to --workload load (it inserts --records and stops)\n",
                timed_flag);
        return 2;
    }
    if (options->workload->is_load && options->record_count == 0) {
        options->record_count = BENCH_DEFAULT_LOAD_RECORDS;
    }
    if (options->json_path != NULL) {
        *out_json = fopen(options->json_path, "w");
        if (*out_json == NULL) {
            fprintf(stderr, "thermocline bench: cannot write --json %s: %s\n", options->json_path, strerror(errno));
            return 2;
        }
    }
    return 0;
}

/* The number of documents a run starts from: the highest _id + 1. */
static bool discover_record_count(mongoc_client_t *client, bench_options_t *options, bson_error_t *error)
{
    mongoc_collection_t *collection = mongoc_client_get_collection(client, options->database, options->collection);
    bson_t filter = BSON_INITIALIZER;
    bson_t *find_options = BCON_NEW("sort", "{", "_id", BCON_INT32(-1), "}", "limit", BCON_INT64(1),
                                    "projection", "{", "_id", BCON_INT32(1), "}");
    mongoc_cursor_t *cursor = mongoc_collection_find_with_opts(collection, &filter, find_options, NULL);
    const bson_t *document;
    bson_iter_t iter;
    bson_error_t cursor_error;
    bool ok = false;
    if (mongoc_cursor_next(cursor, &document)) {
        if (!bson_iter_init_find(&iter, document, "_id") || !BSON_ITER_HOLDS_NUMBER(&iter) ||
            bson_iter_as_int64(&iter) < 0) {
            tc_error_set(error, TC_ERR_BAD_VALUE,
                         "%s.%s holds _id values that are not bench's numbers: pass --records N",
                         options->database, options->collection);
            goto done;
        }
        options->record_count = bson_iter_as_int64(&iter) + 1;
    } else if (mongoc_cursor_error(cursor, &cursor_error)) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot find the newest document of %s.%s: %s",
                     options->database, options->collection, cursor_error.message);
        goto done;
    } else if (options->workload->read_fraction + options->workload->update_fraction > 0) {
        tc_error_set(error, TC_ERR_NAMESPACE_NOT_FOUND,
                     "%s.%s has no documents: load it first (thermocline bench --workload load)",
                     options->database, options->collection);
        goto done;
    }
    ok = true;
done:
    mongoc_cursor_destroy(cursor);
    bson_destroy(find_options);
    bson_destroy(&filter);
    mongoc_collection_destroy(collection);
    return ok;
}

/* MongoDB's codes for an index that exists with other options or another name. */
#define BENCH_INDEX_OPTIONS_CONFLICT 85
#define BENCH_INDEX_KEY_SPECS_CONFLICT 86

/* The indexes of a workload with an email field: {createdAt: 1}, which a proxy
 * tiering the collection by createdAt requires, and {email: 1}, unique or not.
 * One createIndexes, the same command straight to a server and through a proxy
 * (which runs it on both tiers); indexes already there as asked are kept. */
static bool prepare_collection(mongoc_client_t *client, const bench_options_t *options, bson_error_t *error)
{
    bool unique = options->workload->email_index == BENCH_EMAIL_INDEX_UNIQUE;
    bson_t command = BSON_INITIALIZER, indexes, index, key;
    BSON_APPEND_UTF8(&command, "createIndexes", options->collection);
    BSON_APPEND_ARRAY_BEGIN(&command, "indexes", &indexes);
    BSON_APPEND_DOCUMENT_BEGIN(&indexes, "0", &index);
    BSON_APPEND_DOCUMENT_BEGIN(&index, "key", &key);
    BSON_APPEND_INT32(&key, BENCH_TIME_FIELD, 1);
    bson_append_document_end(&index, &key);
    BSON_APPEND_UTF8(&index, "name", BENCH_TIME_INDEX_NAME);
    bson_append_document_end(&indexes, &index);
    BSON_APPEND_DOCUMENT_BEGIN(&indexes, "1", &index);
    BSON_APPEND_DOCUMENT_BEGIN(&index, "key", &key);
    BSON_APPEND_INT32(&key, BENCH_EMAIL_FIELD, 1);
    bson_append_document_end(&index, &key);
    BSON_APPEND_UTF8(&index, "name", BENCH_EMAIL_INDEX_NAME);
    if (unique) {
        BSON_APPEND_BOOL(&index, "unique", true); /* absent otherwise, as a driver's create_index leaves it */
    }
    bson_append_document_end(&indexes, &index);
    bson_append_array_end(&command, &indexes);
    bson_error_t command_error;
    bool ok = mongoc_client_command_simple(client, options->database, &command, NULL, NULL, &command_error);
    if (!ok && (command_error.code == BENCH_INDEX_OPTIONS_CONFLICT ||
                command_error.code == BENCH_INDEX_KEY_SPECS_CONFLICT)) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED,
                     "cannot create the %s indexes on %s.%s: %s (an {email: 1} index %s unique, or a {createdAt: 1} "
                     "index of another name, is there: drop it first)",
                     options->workload->name, options->database, options->collection, command_error.message,
                     unique ? "not" : "that is");
    } else if (!ok) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot create the %s indexes on %s.%s: %s",
                     options->workload->name, options->database, options->collection, command_error.message);
    }
    bson_destroy(&command);
    return ok;
}

static bool check_server(mongoc_client_pool_t *pool, bench_options_t *options, bson_error_t *error)
{
    mongoc_client_t *client = mongoc_client_pool_pop(pool);
    bson_t ping = BSON_INITIALIZER;
    bson_error_t ping_error;
    bool ok = false;
    BSON_APPEND_INT32(&ping, "ping", 1);
    if (!mongoc_client_command_simple(client, "admin", &ping, NULL, NULL, &ping_error)) {
        tc_error_set(error, TC_ERR_HOST_UNREACHABLE, "cannot reach %s: %s", options->uri_string,
                     ping_error.message);
        goto done;
    }
    if (options->workload->email_index != BENCH_EMAIL_INDEX_NONE) {
        TC_CHECK(prepare_collection(client, options, error));
    }
    if (!options->workload->is_load && options->record_count == 0) {
        TC_CHECK(discover_record_count(client, options, error));
    }
    ok = true;
done:
    bson_destroy(&ping);
    mongoc_client_pool_push(pool, client);
    return ok;
}

/* libmongoc's default handler prints its info and debug records on stdout,
 * into the report; keep warnings and worse, on stderr, marked as libmongoc's. */
static void log_libmongoc(mongoc_log_level_t level, const char *domain, const char *message, void *context)
{
    (void)context;
    if (level <= MONGOC_LOG_LEVEL_WARNING && tc_log_get_format() == TC_LOG_FORMAT_JSON) {
        TC_LOG_ATTRS(level <= MONGOC_LOG_LEVEL_ERROR ? TC_LOG_ERROR : TC_LOG_WARNING, "MONGOC", 0,
                     "{domain}: {message}", TC_ATTR_STR("domain", domain), TC_ATTR_STR("message", message));
    } else if (level <= MONGOC_LOG_LEVEL_WARNING) {
        fprintf(stderr, "thermocline bench: libmongoc %s %s: %s\n", mongoc_log_level_str(level), domain, message);
    }
}

/* Failures worth a line on stderr even when the run as a whole succeeded. */
static void print_errors(const bench_results_t *results)
{
    for (int operation = 0; operation < BENCH_OP_COUNT; operation++) {
        const bench_operation_result_t *result = &results->operations[operation];
        if (result->errors > 0 && tc_log_get_format() == TC_LOG_FORMAT_JSON) {
            TC_LOG_ATTRS(TC_LOG_WARNING, "BENCH", 0, "{errors} {operation} errors; the first: {error}",
                         TC_ATTR_INT("errors", result->errors),
                         TC_ATTR_STR("operation", bench_operation_name(operation)),
                         TC_ATTR_STR("error", result->first_error));
        } else if (result->errors > 0) {
            fprintf(stderr, "thermocline bench: %llu %s errors; the first: %s\n",
                    (unsigned long long)result->errors, bench_operation_name(operation), result->first_error);
        }
    }
}

static int run(bench_options_t *options, FILE *json, bool *out_json_written)
{
    bson_error_t error;
    mongoc_uri_t *uri = NULL;
    mongoc_client_pool_t *pool = NULL;
    bench_results_t results;
    bool results_ready = false;
    int status = 1;

    uri = mongoc_uri_new_with_error(options->uri_string, &error);
    if (uri == NULL) {
        fprintf(stderr, "thermocline bench: --uri: %s\n", error.message);
        status = 2;
        goto done;
    }
    /* Fail in seconds, not libmongoc's 30, when nothing listens; and wait for a
     * reply --reply-timeout, not libmongoc's 300 s (the pool's closing
     * endSessions to a server that stopped answering). */
    if (!mongoc_uri_has_option(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS)) {
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, BENCH_SERVER_SELECTION_TIMEOUT_MS);
    }
    if (!mongoc_uri_has_option(uri, MONGOC_URI_SOCKETTIMEOUTMS)) {
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS,
                                       (int32_t)(options->reply_timeout_ms < INT32_MAX ? options->reply_timeout_ms
                                                                                       : INT32_MAX));
    }
    pool = mongoc_client_pool_new_with_error(uri, &error);
    if (pool == NULL) {
        fprintf(stderr, "thermocline bench: --uri: %s\n", error.message);
        status = 2;
        goto done;
    }
    mongoc_client_pool_set_error_api(pool, MONGOC_ERROR_API_VERSION_2);
    mongoc_client_pool_set_appname(pool, "thermocline-bench");
    mongoc_client_pool_max_size(pool, (uint32_t)options->thread_count + 1);
    if (!check_server(pool, options, &error)) {
        tc_log_failure("thermocline bench", error.message);
        goto done;
    }

    const bench_workload_t *workload = options->workload;
    int second_count = workload->is_load ? 0 : (int)((options->duration_ms + 999) / 1000);
    if (!bench_results_init(&results, second_count, workload->read_fraction > 0, &error)) {
        tc_log_failure("thermocline bench", error.message);
        bench_results_cleanup(&results);
        goto done;
    }
    results_ready = true;
    bool ran = workload->is_load ? bench_run_load(options, pool, &results, &error)
                                 : bench_run_mix(options, &results, &error);
    if (!ran) {
        tc_log_failure("thermocline bench", error.message);
        goto done;
    }
    bench_report_table(stdout, options, &results);
    fflush(stdout);
    print_errors(&results);
    status = 0;
    if (json != NULL) {
        if (bench_report_json(json, options, &results, &error)) {
            *out_json_written = true;
        } else {
            char message[1024];
            snprintf(message, sizeof message, "--json %s: %s", options->json_path, error.message);
            tc_log_failure("thermocline bench", message);
            status = 1;
        }
    }
    if (workload->is_load && results.documents_failed > 0) {
        char message[160];
        snprintf(message, sizeof message, "the load failed: %llu of %lld documents were not inserted",
                 (unsigned long long)results.documents_failed, (long long)options->record_count);
        tc_log_failure("thermocline bench", message);
        status = 1;
    } else if (!workload->is_load && bench_results_total(&results) == 0) {
        tc_log_failure("thermocline bench", "the run failed: no operation succeeded");
        status = 1;
    }
done:
    if (results_ready) {
        bench_results_cleanup(&results);
    }
    mongoc_client_pool_destroy(pool);
    mongoc_uri_destroy(uri);
    return status;
}

int bench_main(int argc, char **argv)
{
    bench_options_t options;
    FILE *json = NULL;
    int status = parse_options(argc, argv, &options, &json);
    if (status != 0) {
        return status < 0 ? 0 : status;
    }
    bool json_written = false;
    mongoc_log_set_handler(log_libmongoc, NULL);
    mongoc_init();
    status = run(&options, json, &json_written);
    mongoc_cleanup();
    if (json != NULL) {
        if (fclose(json) != 0 && json_written) {
            fprintf(stderr, "thermocline bench: cannot write --json %s: %s\n", options.json_path,
                    strerror(errno));
            json_written = false;
            status = 1;
        }
        if (!json_written) {
            /* No half-written or empty report left behind for a tool to misread. */
            unlink(options.json_path);
        }
    }
    return status;
}
