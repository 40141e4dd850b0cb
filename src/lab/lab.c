/* `thermocline lab`: flags and sizes (the faithful default, --quick, --tiny),
 * the order of the runs, and the report at the end. The runs live in run.c,
 * the processes in process.c, the table and JSON in report.c, plots in plot.c. */
#include "lab/lab.h"
#include "lab/lab_private.h"

#include "common/units.h"

#include <errno.h>
#include <math.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LAB_DEFAULT_SEED 1

static void print_usage(FILE *stream)
{
    fprintf(stream,
            "usage: thermocline lab [--quick] [--proxies N] [--json FILE] [--output DIR] [--keep]\n"
            "\n"
            "Starts a memory-starved archive store (data about 40x its WiredTiger cache, reads\n"
            "capped as a cloud volume's), an empty fast-tier store and the proxy with its tier\n"
            "workers; loads the archive; runs the store, readheavy, concentrated and uniform\n"
            "workloads straight against the archive and through the proxy, each from the same\n"
            "data with the same seed; the store workload again on both sides at a fixed offered\n"
            "load (direct's maximum: latency at equal throughput); then the store workload from\n"
            "an empty fast tier; prints the comparison, writes SVG plots and stops everything\n"
            "it started.\n"
            "\n"
            "  --quick              smaller data and shorter runs: under 5 minutes\n"
            "  --proxies N          runs through the proxy use N proxies with one config, bench's\n"
            "                       clients spread over them (default 1, at most %d); the leases\n"
            "                       run each tier worker in one of them\n"
            "  --json FILE          also write every figure of the table as JSON to FILE\n"
            "  --output DIR         plots, logs, bench reports and lab.json (default lab-results)\n"
            "  --keep               keep each run's data directories under DIR/work.*\n"
            "  --help               this text\n"
            "\n"
            "Sizes (the default is the faithful run, about 45 minutes):\n"
            "  --tiny               a seconds-long lab for tests\n"
            "  --records N          documents loaded (faithful 600000, quick 200000)\n"
            "  --cache-size SIZE    the archive's WiredTiger cache (faithful 16MB, quick 6MB)\n"
            "  --read-iops N        the archive's read cap, 0 for none (default 3000)\n"
            "  --sync-delay D       make each sync of both stores' disks take D longer (default\n"
            "                       0): a day whose disk syncs slowly, on any machine\n"
            "  --threads N          bench clients (default 64)\n"
            "  --warmup D           unmeasured time before each run (faithful 30s, quick 3s)\n"
            "  --duration D         measured time of each run (faithful 180s, quick 10s)\n"
            "  --empty-duration D   the empty start's measured time (faithful 540s, quick 30s)\n"
            "  --seed N             bench's seed, the same for every run (default %d)\n"
            "\n"
            "Exit status: 0 when every run succeeded, 1 when one failed, 2 on bad usage,\n"
            "130 after Ctrl-C (128 + the signal).\n",
            LAB_MAX_PROXIES, LAB_DEFAULT_SEED);
}

static void preset_faithful(lab_settings_t *settings)
{
    settings->preset = "faithful";
    settings->record_count = 600000;
    settings->archive_cache_bytes = 16 * 1024 * 1024;
    settings->fast_cache_bytes = (uint64_t)1024 * 1024 * 1024;
    settings->archive_oplog_mb = 256;
    settings->fast_oplog_mb = 2048;
    settings->warmup_ms = 30000;
    settings->duration_ms = 180000;
    settings->empty_start_ms = 540000;
    settings->warm_wait_ms = 600000;
    settings->drain_wait_ms = 120000;
    settings->stop_wait_ms = 60000;
}

static void preset_quick(lab_settings_t *settings)
{
    settings->preset = "quick";
    settings->record_count = 200000;
    settings->archive_cache_bytes = 6 * 1024 * 1024;
    settings->fast_cache_bytes = 512 * 1024 * 1024;
    settings->archive_oplog_mb = 64;
    settings->fast_oplog_mb = 512;
    settings->warmup_ms = 3000;
    settings->duration_ms = 10000;
    settings->empty_start_ms = 30000;
    settings->warm_wait_ms = 40000;
    settings->drain_wait_ms = 10000;
    settings->stop_wait_ms = 20000;
}

static void preset_tiny(lab_settings_t *settings)
{
    settings->preset = "tiny";
    settings->record_count = 5000;
    settings->archive_cache_bytes = 4 * 1024 * 1024;
    settings->fast_cache_bytes = 64 * 1024 * 1024;
    settings->archive_oplog_mb = 16;
    settings->fast_oplog_mb = 64;
    settings->thread_count = 8;
    settings->load_thread_count = 4;
    settings->warmup_ms = 0;
    settings->duration_ms = 1000;
    settings->empty_start_ms = 2000;
    settings->warm_wait_ms = 10000;
    settings->drain_wait_ms = 5000;
    settings->stop_wait_ms = 10000;
}

/* Prints a flag's error as the usage line and gives the exit status of bad usage. */
static int usage_error(const bson_error_t *error)
{
    fprintf(stderr, "thermocline lab: %s\n", error->message);
    return 2;
}

/* Flags given on the command line, applied over the preset. */
typedef struct lab_overrides {
    int64_t records, read_iops, threads, seed, warmup_ms, duration_ms, empty_ms, proxies, sync_delay_ms;
    uint64_t cache_bytes;
    bool has_records, has_read_iops, has_threads, has_seed, has_warmup, has_duration, has_empty, has_cache,
        has_proxies;
} lab_overrides_t;

/* The flags of `thermocline lab`, for getopt_long. */
enum lab_option {
    OPT_QUICK = 256, OPT_TINY, OPT_JSON, OPT_OUTPUT, OPT_KEEP, OPT_RECORDS, OPT_CACHE, OPT_IOPS, OPT_THREADS,
    OPT_WARMUP, OPT_DURATION, OPT_EMPTY, OPT_SEED, OPT_PROXIES, OPT_SYNC_DELAY, OPT_HELP
};

static const struct option lab_long_options[] = {
    {"quick", no_argument, NULL, OPT_QUICK},
    {"tiny", no_argument, NULL, OPT_TINY},
    {"json", required_argument, NULL, OPT_JSON},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"keep", no_argument, NULL, OPT_KEEP},
    {"records", required_argument, NULL, OPT_RECORDS},
    {"cache-size", required_argument, NULL, OPT_CACHE},
    {"read-iops", required_argument, NULL, OPT_IOPS},
    {"sync-delay", required_argument, NULL, OPT_SYNC_DELAY},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"empty-duration", required_argument, NULL, OPT_EMPTY},
    {"seed", required_argument, NULL, OPT_SEED},
    {"proxies", required_argument, NULL, OPT_PROXIES},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* The run's sizes: the preset (NULL: the faithful one), then the flags that
 * override it. */
static void apply_sizes(lab_settings_t *settings, const char *size_preset, const lab_overrides_t *overrides)
{
    /* The PoC's client and volume: 64 YCSB threads, 3,000 reads/s. */
    settings->thread_count = 64;
    settings->load_thread_count = 8;
    settings->read_iops = 3000;
    settings->seed = LAB_DEFAULT_SEED;
    settings->proxy_count = overrides->has_proxies ? (int)overrides->proxies : 1;
    if (size_preset == NULL) {
        preset_faithful(settings);
    } else if (strcmp(size_preset, "quick") == 0) {
        preset_quick(settings);
    } else {
        preset_tiny(settings);
    }
    if (overrides->has_records) {
        settings->record_count = overrides->records;
    }
    if (overrides->has_cache) {
        settings->archive_cache_bytes = overrides->cache_bytes;
    }
    if (overrides->has_read_iops) {
        settings->read_iops = overrides->read_iops;
    }
    settings->sync_delay_ms = overrides->sync_delay_ms;
    if (overrides->has_threads) {
        settings->thread_count = (int)overrides->threads;
    }
    if (overrides->has_seed) {
        settings->seed = (uint64_t)overrides->seed;
    }
    if (overrides->has_warmup) {
        settings->warmup_ms = overrides->warmup_ms;
    }
    if (overrides->has_duration) {
        settings->duration_ms = overrides->duration_ms;
    }
    if (overrides->has_empty) {
        settings->empty_start_ms = overrides->empty_ms;
    }
    /* mongod serves each connection on its own thread; so does the archive here,
     * so a read that waits for the disk does not hold up one that hits the cache. */
    settings->archive_workers = settings->thread_count < 4 ? 4 : settings->thread_count;
}

/* --json's file can be written (it is created empty now); false after saying why. */
static bool check_json_path(const lab_settings_t *settings)
{
    if (settings->json_path != NULL) {
        FILE *probe = fopen(settings->json_path, "w");
        if (probe == NULL) {
            fprintf(stderr, "thermocline lab: cannot write --json %s: %s\n", settings->json_path, strerror(errno));
            return false;
        }
        fclose(probe);
    }
    return true;
}

/* Returns 0 to go on, -1 after --help, 2 after bad usage (its line on stderr). */
static int parse_options(int argc, char **argv, lab_settings_t *settings)
{
    lab_overrides_t overrides;
    const char *size_preset = NULL;
    bson_error_t error;
    memset(&overrides, 0, sizeof overrides);
    memset(settings, 0, sizeof *settings);
    settings->output_dir = "lab-results";
    opterr = 0;
    optind = 1;
    int option;
    while ((option = getopt_long(argc, argv, "", lab_long_options, NULL)) != -1) {
        switch (option) {
        case OPT_QUICK:
        case OPT_TINY:
            if (size_preset != NULL && strcmp(size_preset, option == OPT_QUICK ? "quick" : "tiny") != 0) {
                fprintf(stderr, "thermocline lab: --quick and --tiny exclude each other\n");
                return 2;
            }
            size_preset = option == OPT_QUICK ? "quick" : "tiny";
            break;
        case OPT_JSON:
            settings->json_path = optarg;
            break;
        case OPT_OUTPUT:
            if (optarg[0] == '\0') {
                fprintf(stderr, "thermocline lab: --output needs a directory\n");
                return 2;
            }
            settings->output_dir = optarg;
            break;
        case OPT_KEEP:
            settings->keep = true;
            break;
        case OPT_RECORDS:
            if (!units_parse_count(optarg, "--records", 100, INT64_C(1) << 36, &overrides.records, &error)) {
                return usage_error(&error);
            }
            overrides.has_records = true;
            break;
        case OPT_CACHE:
            if (!units_parse_size(optarg, &overrides.cache_bytes, &error) || overrides.cache_bytes < 1024 * 1024) {
                fprintf(stderr, "thermocline lab: --cache-size takes a size of at least 1MB (16MB, 1GB), not '%s'\n",
                        optarg);
                return 2;
            }
            overrides.has_cache = true;
            break;
        case OPT_IOPS:
            if (!units_parse_count(optarg, "--read-iops", 0, 10000000, &overrides.read_iops, &error)) {
                return usage_error(&error);
            }
            overrides.has_read_iops = true;
            break;
        case OPT_SYNC_DELAY:
            if (!units_parse_flag_duration(optarg, "--sync-delay", 1, true, &overrides.sync_delay_ms, &error)) {
                return usage_error(&error);
            }
            break;
        case OPT_THREADS:
            if (!units_parse_count(optarg, "--threads", 1, 256, &overrides.threads, &error)) {
                return usage_error(&error);
            }
            overrides.has_threads = true;
            break;
        case OPT_WARMUP:
            if (!units_parse_flag_duration(optarg, "--warmup", 1000, true, &overrides.warmup_ms, &error)) {
                return usage_error(&error);
            }
            overrides.has_warmup = true;
            break;
        case OPT_DURATION:
            if (!units_parse_flag_duration(optarg, "--duration", 1000, false, &overrides.duration_ms, &error)) {
                return usage_error(&error);
            }
            overrides.has_duration = true;
            break;
        case OPT_EMPTY:
            if (!units_parse_flag_duration(optarg, "--empty-duration", 1000, false, &overrides.empty_ms, &error)) {
                return usage_error(&error);
            }
            overrides.has_empty = true;
            break;
        case OPT_SEED:
            if (!units_parse_count(optarg, "--seed", 0, INT64_MAX, &overrides.seed, &error)) {
                return usage_error(&error);
            }
            overrides.has_seed = true;
            break;
        case OPT_PROXIES:
            if (!units_parse_count(optarg, "--proxies", 1, LAB_MAX_PROXIES, &overrides.proxies, &error)) {
                return usage_error(&error);
            }
            overrides.has_proxies = true;
            break;
        case OPT_HELP:
            print_usage(stdout);
            return -1;
        default:
            fprintf(stderr, "thermocline lab: unknown or incomplete option '%s' (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "thermocline lab: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }

    apply_sizes(settings, size_preset, &overrides);
    if (!check_json_path(settings)) {
        return 2;
    }
    return 0;
}

void lab_note(lab_t *lab, const char *format, ...)
{
    char text[LAB_NOTE_SIZE];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(text, sizeof text, format, arguments);
    va_end(arguments);
    for (int i = 0; i < lab->note_count; i++) {
        if (strcmp(lab->notes[i], text) == 0) {
            return;
        }
    }
    if (lab->note_count < LAB_NOTE_COUNT) {
        memcpy(lab->notes[lab->note_count++], text, sizeof text);
    }
}

static void log_libmongoc(mongoc_log_level_t level, const char *domain, const char *message, void *context)
{
    (void)context;
    if (level <= MONGOC_LOG_LEVEL_WARNING) {
        fprintf(stderr, "thermocline lab: libmongoc %s %s: %s\n", mongoc_log_level_str(level), domain, message);
    }
}

static bool prepare_directories(lab_t *lab, bson_error_t *error)
{
    const char *output = lab->settings.output_dir;
    if (strlen(output) > LAB_DIRECTORY_SIZE - 64) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "--output %s is too long a path", output);
    }
    snprintf(lab->logs_dir, sizeof lab->logs_dir, "%s/logs", output);
    snprintf(lab->runs_dir, sizeof lab->runs_dir, "%s/runs", output);
    if (!lab_make_directory(output, error) || !lab_make_directory(lab->logs_dir, error) ||
        !lab_make_directory(lab->runs_dir, error)) {
        return false;
    }
    lab->disk_free_bytes = lab_free_disk_bytes(output);
    snprintf(lab->work_dir, sizeof lab->work_dir, "%s/work.XXXXXX", output);
    if (mkdtemp(lab->work_dir) == NULL) {
        int saved = errno;
        lab->work_dir[0] = '\0';
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot create a work directory in %s: %s", output,
                            strerror(saved));
    }
    return true;
}

/* Times the machine into speed; a failure is a note, not the end of the lab. */
static void measure_machine(lab_t *lab, lab_machine_speed_t *speed, const char *when)
{
    bson_error_t error;
    if (!lab_measure_machine(lab->work_dir, speed, &error)) {
        lab_note(lab, "the machine's speed was not measured %s: %s", when, error.message);
    }
}

static void print_plan(const lab_t *lab)
{
    const lab_settings_t *settings = &lab->settings;
    char records[32];
    int64_t per_run_ms = settings->warmup_ms + settings->duration_ms;
    /* Runs, plus about 8 s of set-up each, the load (~12,000 documents/s here),
     * the fast tier's warm-up and the empty start. */
    int64_t estimate_s = ((LAB_WORKLOAD_COUNT + 1) * 2 * (per_run_ms + 8000) + settings->empty_start_ms + 8000 + 20000) /
                             1000 + settings->record_count / 12000;
    char proxies[48] = "", syncs[48] = "";
    if (settings->proxy_count > 1) {
        snprintf(proxies, sizeof proxies, ", tiered through %d proxies", settings->proxy_count);
    }
    if (settings->sync_delay_ms > 0) {
        snprintf(syncs, sizeof syncs, ", syncs %lld ms slower", (long long)settings->sync_delay_ms);
    }
    fprintf(stderr,
            "thermocline lab (%s): %s documents, archive cache %llu MB, reads capped at %lld/s%s, %d threads%s;\n"
            "%d workloads direct and tiered, and store at direct's rate, %lld s each after %lld s of warm-up,\n"
            "then a %lld s empty start: "
            "about %lld min\n"
            "output: %s (logs in %s), %.1f GB free there\n",
            settings->preset, lab_grouped((double)settings->record_count, records, sizeof records),
            (unsigned long long)(settings->archive_cache_bytes / (1024 * 1024)), (long long)settings->read_iops, syncs,
            settings->thread_count, proxies, LAB_WORKLOAD_COUNT, (long long)(settings->duration_ms / 1000),
            (long long)(settings->warmup_ms / 1000), (long long)(settings->empty_start_ms / 1000),
            (long long)((estimate_s + 59) / 60), settings->output_dir, lab->logs_dir,
            (double)lab->disk_free_bytes / 1e9);
    const lab_machine_speed_t *machine = &lab->machine_before;
    if (machine->measured) {
        fprintf(stderr, "machine: a synced 4 KB write %.2f ms (median; p99 %.2f ms), a loopback round trip %.1f us\n",
                machine->sync_median_ms, machine->sync_p99_ms, machine->round_trip_us);
    }
    fputc('\n', stderr);
}

/* The load, the fast tier's warm-up, each workload direct and tiered, then the
 * empty start. False when the load failed or the lab was interrupted; a failed
 * run is recorded in its row and the others still run. */
static bool run_all(lab_t *lab, bool *out_all_ok, bson_error_t *error)
{
    *out_all_ok = true;
    if (!lab_load(lab, error)) {
        return false;
    }
    bson_error_t warm_error;
    if (!lab_warm_fast_tier(lab, &warm_error)) {
        *out_all_ok = false; /* noted; the tiered runs then start from an empty fast tier */
    }
    if (lab_interrupted()) {
        return tc_error_set(error, TC_ERR_INTERRUPTED, "interrupted");
    }
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        if (!lab_run(lab, lab->workloads[i], LAB_MODE_DIRECT, 0, &lab->direct[i])) {
            *out_all_ok = false;
        }
        if (lab_interrupted()) {
            return tc_error_set(error, TC_ERR_INTERRUPTED, "interrupted");
        }
        if (!lab_run(lab, lab->workloads[i], LAB_MODE_TIERED, 0, &lab->tiered[i])) {
            *out_all_ok = false;
        }
        if (lab_interrupted()) {
            return tc_error_set(error, TC_ERR_INTERRUPTED, "interrupted");
        }
    }
    /* Both sides offered what direct managed at most: latency at equal throughput. */
    const lab_run_t *store_direct = lab_direct_store(lab);
    if (store_direct != NULL && store_direct->ok && store_direct->ops_per_second >= 1) {
        lab->fixed_target_ops = floor(store_direct->ops_per_second);
        int64_t target = (int64_t)lab->fixed_target_ops;
        if (!lab_run(lab, "store", LAB_MODE_DIRECT, target, &lab->fixed_direct) ||
            !lab_run(lab, "store", LAB_MODE_TIERED, target, &lab->fixed_tiered)) {
            *out_all_ok = false;
        }
        if (lab_interrupted()) {
            return tc_error_set(error, TC_ERR_INTERRUPTED, "interrupted");
        }
    }
    if (!lab_run(lab, "store", LAB_MODE_EMPTY_START, 0, &lab->empty_start)) {
        *out_all_ok = false;
    }
    if (lab_interrupted()) {
        return tc_error_set(error, TC_ERR_INTERRUPTED, "interrupted");
    }
    return true;
}

static bool write_results(lab_t *lab, bson_error_t *error)
{
    char path[PATH_MAX];
    lab_report_table(stdout, lab);
    fflush(stdout);
    snprintf(path, sizeof path, "%s/lab.json", lab->settings.output_dir);
    if (!lab_report_json(lab, path, error)) {
        return false;
    }
    if (lab->settings.json_path != NULL && !lab_report_json(lab, lab->settings.json_path, error)) {
        return false;
    }
    printf("\nwritten:\n  %s\n", lab->settings.json_path != NULL ? lab->settings.json_path : path);
    bool ok = lab_report_plots(lab, stdout, error);
    fflush(stdout);
    return ok;
}

int lab_main(int argc, char **argv)
{
    lab_t *lab = bson_malloc0(sizeof *lab);
    bson_error_t error = {0};
    int status = parse_options(argc, argv, &lab->settings);
    if (status != 0) {
        bson_free(lab);
        return status < 0 ? 0 : status;
    }
    static const char *const workloads[LAB_WORKLOAD_COUNT] = {"store", "readheavy", "concentrated", "uniform"};
    memcpy(lab->workloads, workloads, sizeof workloads);
    lab->stderr_is_terminal = isatty(STDERR_FILENO);
    lab_signals_install();
    mongoc_log_set_handler(log_libmongoc, NULL);
    mongoc_init();

    status = 1;
    bool all_ok = false;
    if (!prepare_directories(lab, &error)) {
        fprintf(stderr, "thermocline lab: %s\n", error.message);
        goto done;
    }
    measure_machine(lab, &lab->machine_before, "before the runs");
    print_plan(lab);
    if (!run_all(lab, &all_ok, &error)) {
        if (!lab_interrupted()) {
            fprintf(stderr, "thermocline lab: %s\n", error.message);
        }
        goto done;
    }
    measure_machine(lab, &lab->machine_after, "after the runs");
    if (!write_results(lab, &error)) {
        fprintf(stderr, "thermocline lab: %s\n", error.message);
        goto done;
    }
    status = all_ok ? 0 : 1;
done:
    lab_stop_all(lab);
    if (lab_interrupted()) {
        int signal_number = lab_interrupt_signal();
        fprintf(stderr, "\nthermocline lab: interrupted (%s); every process it started is stopped\n",
                signal_number == SIGINT ? "SIGINT" : signal_number == SIGTERM ? "SIGTERM" : "SIGHUP");
        status = 128 + lab_interrupt_signal();
    }
    if (lab->work_dir[0] != '\0') {
        if (lab->settings.keep) {
            fprintf(stderr, "thermocline lab: data kept in %s\n", lab->work_dir);
        } else {
            lab_remove_tree(lab->work_dir);
        }
    }
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        lab_run_cleanup(&lab->direct[i]);
        lab_run_cleanup(&lab->tiered[i]);
    }
    lab_run_cleanup(&lab->empty_start);
    lab_run_cleanup(&lab->fixed_direct);
    lab_run_cleanup(&lab->fixed_tiered);
    bson_free(lab);
    mongoc_cleanup();
    return status;
}
