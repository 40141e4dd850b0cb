/* Shared by the files of src/lab: the settings of one lab, the processes it
 * starts, the figures of one run, and each file's entry points (process.c,
 * machine.c, probe.c, run.c, report.c, plot.c). Not for use outside src/lab. */
#ifndef TC_LAB_LAB_PRIVATE_H
#define TC_LAB_LAB_PRIVATE_H

#include "common/error.h"

#include <limits.h>
#include <mongoc/mongoc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* The namespace and policy of the tiered runs: bench's collection, and a window
 * of 33 days, the newest 9% of a year of orders (see README.md). */
#define LAB_DATABASE "ycsb"
#define LAB_COLLECTION "usertable"
#define LAB_NAMESPACE LAB_DATABASE "." LAB_COLLECTION
#define LAB_TIME_FIELD "createdAt"
#define LAB_MAX_AGE "33d"

#define LAB_WORKLOAD_COUNT 4
/* --proxies at most: the tiered runs' proxies, each with its own port and log
 * (and its own line in the timeline's CPU panel, whose legend holds eight). */
#define LAB_MAX_PROXIES 6
#define LAB_NOTE_COUNT 16
#define LAB_NOTE_SIZE 512
/* Directories the lab makes; --output is refused if longer, so every file path
 * built under them fits in PATH_MAX. */
#define LAB_DIRECTORY_SIZE 1024

typedef struct lab_settings {
    const char *preset;           /* "faithful", "quick" or "tiny" */
    int64_t record_count;         /* documents loaded into the archive */
    uint64_t archive_cache_bytes; /* the archive's WiredTiger cache: data is ~40x this */
    uint64_t fast_cache_bytes;    /* the fast tier's: holds the window with room to spare */
    int64_t read_iops;            /* the archive's emulated read cap */
    int64_t sync_delay_ms;        /* added to each sync of both stores (--sync-delay); 0: none */
    int64_t archive_oplog_mb;
    int64_t fast_oplog_mb;
    int archive_workers;          /* a thread per client connection, as mongod */
    int thread_count;             /* bench clients */
    int proxy_count;              /* proxies of each run through the proxy (--proxies) */
    int load_thread_count;
    int64_t warmup_ms;
    int64_t duration_ms;
    int64_t empty_start_ms;
    int64_t warm_wait_ms;         /* how long a tiered run waits for the warmer's first pass */
    int64_t drain_wait_ms;        /* how long after a tiered run it waits for the feeder */
    int64_t stop_wait_ms;         /* SIGTERM to SIGKILL */
    uint64_t seed;
    const char *output_dir;
    const char *json_path;        /* NULL: only <output>/lab.json */
    bool keep;                    /* keep the data directories */
} lab_settings_t;

/* The lab's children, in the order of the CPU figures: the servers, then bench.
 * With several proxies, LAB_ROLE_PROXY is their sum. */
typedef enum lab_role { LAB_ROLE_ARCHIVE, LAB_ROLE_FAST, LAB_ROLE_PROXY, LAB_ROLE_BENCH, LAB_ROLE_COUNT } lab_role_t;

/* One child process: this executable, run again with a subcommand. */
typedef struct lab_process {
    pid_t pid;        /* 0: not running */
    char name[32];    /* "archive", "fast", "proxy" (with several: "proxy 1", ...), "bench" */
    char log_path[PATH_MAX];
    int wait_status;  /* from waitpid, once it has exited */
    bool exited;
} lab_process_t;

typedef struct lab_latency {
    double p50_ms, p95_ms, p99_ms, p999_ms, max_ms;
} lab_latency_t;

typedef enum lab_mode {
    LAB_MODE_DIRECT,      /* bench against the archive */
    LAB_MODE_TIERED,      /* through the proxy, after the warmer's first pass */
    LAB_MODE_EMPTY_START, /* through the proxy, from an empty fast tier, no warm-up */
} lab_mode_t;

/* The per-second series of a run (timeline.c). */
typedef enum lab_series {
    LAB_SERIES_ARCHIVE_PAGES_READ, /* pages read into the archive's cache */
    LAB_SERIES_CPU_ARCHIVE,        /* CPU percent of one core (100: one core busy) */
    LAB_SERIES_CPU_FAST,
    LAB_SERIES_CPU_PROXY,          /* every proxy together */
    LAB_SERIES_FEEDER_LAG_MS,      /* at the end of the second */
    LAB_SERIES_FEEDER_EVENTS,      /* change events applied to the archive */
    LAB_SERIES_READS_WAITED,       /* reads that waited on the read-your-writes barrier */
    LAB_SERIES_READS_WAITING,      /* reads waiting on it at the end of the second */
    LAB_SERIES_JOURNAL_SYNC_ARCHIVE, /* ms the archive's journal spent in fsync (at most 1,000) */
    LAB_SERIES_JOURNAL_SYNC_FAST,    /* the same for the fast tier */
    LAB_SERIES_CPU_EACH_PROXY,     /* LAB_MAX_PROXIES series from here: each proxy's CPU */
    LAB_SERIES_COUNT = LAB_SERIES_CPU_EACH_PROXY + LAB_MAX_PROXIES
} lab_series_t;

/* What one run measured. */
typedef struct lab_run {
    bool attempted;
    bool ok;
    char failure[LAB_NOTE_SIZE]; /* why it failed, when !ok */
    /* From bench's JSON. */
    double ops_per_second; /* every operation */
    double read_ops_per_second, update_ops_per_second, insert_ops_per_second;
    int64_t operations, errors, not_found;
    char first_error[LAB_NOTE_SIZE / 2]; /* bench's first error message, "" if none */
    lab_latency_t read, update;
    int64_t started_at_ms; /* wall clock of the measured window */
    double measured_seconds;
    int second_count;
    double *ops_series; /* operations per second of the measured window; owned */
    double *read_p99_series; /* bench's read p99 per second in ms, NAN without reads; owned */
    /* What the servers did in each second of the measured window, beside the
     * throughput (timeline.c): NULL when not sampled; NAN for a second or a
     * server without the figure. Owned. */
    double *series[LAB_SERIES_COUNT];
    /* From the archive's serverStatus over the measured window. */
    double archive_pages_read_per_second;
    double archive_disk_reads_per_second;
    double archive_read_mean_ms; /* its reads' mean latency (opLatencies.reads); -1: not known */
    /* A loopback round trip just before the run's servers start (machine.c): how
     * fast the machine was for this run, beside its CPU per operation. -1: not measured. */
    double round_trip_us;
    /* CPU microseconds each child spent per operation over the measured window
     * (lab_role_t order): where a CPU-bound run's time goes. -1: not running. */
    double cpu_us_per_operation[LAB_ROLE_COUNT];
    /* The proxies bench's clients were spread over (0 in a direct run), each one's
     * port, its share of the CPU above and the operations bench completed through
     * it (bench's per-host figures, -1 when it gave none). */
    int proxy_count;
    int proxy_ports[LAB_MAX_PROXIES];
    double proxy_cpu_us_per_operation[LAB_MAX_PROXIES];
    int64_t proxy_operations[LAB_MAX_PROXIES];
    /* Through the proxy: what the workers said. -1: not reported. */
    bool warmer_reported;
    bool fast_tier_warm;
    double warm_wait_seconds;
    int64_t documents_warmed;
    bool feeder_reported;
    int64_t feeder_lag_ms_at_end;
    double feeder_drain_seconds; /* after bench stopped; -1 if it did not drain in time */
    bson_t proxy_namespace_status; /* the (first) proxy's thermoclineStatus for the namespace at the end; empty if none */
} lab_run_t;

/* The fast tier warmed once, before the tiered runs, which each start from a
 * copy of it. */
typedef struct lab_warm_up {
    bool attempted;
    bool ok;              /* the fast tier stopped cleanly: its copy is usable */
    char failure[LAB_NOTE_SIZE];
    bool warmer_reported; /* the proxy runs a warmer */
    bool complete;        /* its first pass finished within warm_wait_ms */
    double seconds;       /* how long that took (or how long the lab waited) */
    int64_t documents;    /* copied; -1 if not reported */
} lab_warm_up_t;

/* How fast the machine was at one moment (machine.c): the CPU-bound runs and the
 * fixed-load tail follow these, which vary between days on a shared VM. */
typedef struct lab_machine_speed {
    bool measured;
    double sync_median_ms; /* a 4 KB write and fdatasync on the output's disk */
    double sync_p99_ms;
    double round_trip_us;  /* a 64-byte message there and back over TCP loopback, two threads */
} lab_machine_speed_t;

/* Everything one `thermocline lab` owns: settings, paths, children, results.
 * Passed to every function instead of globals. */
typedef struct lab {
    lab_settings_t settings;
    char work_dir[LAB_DIRECTORY_SIZE];     /* data directories, removed at the end unless --keep */
    char snapshot_dir[LAB_DIRECTORY_SIZE + 16]; /* the archive as loaded; every run starts from a copy */
    char fast_snapshot_dir[LAB_DIRECTORY_SIZE + 16]; /* the fast tier after the warm-up */
    char logs_dir[LAB_DIRECTORY_SIZE];
    char runs_dir[LAB_DIRECTORY_SIZE];
    lab_process_t archive, fast, bench;
    lab_process_t proxies[LAB_MAX_PROXIES];
    int proxy_count;             /* proxies running in this run (the warm-up has one) */
    int64_t documents;           /* in the archive after the load */
    int64_t data_bytes;          /* BSON size of the collection */
    int64_t storage_bytes;       /* on disk: collection plus indexes */
    int64_t disk_free_bytes;     /* on the output's file system when the lab began, -1 unknown */
    lab_machine_speed_t machine_before, machine_after; /* before the load, after the last run */
    const char *workloads[LAB_WORKLOAD_COUNT];
    lab_run_t direct[LAB_WORKLOAD_COUNT];
    lab_run_t tiered[LAB_WORKLOAD_COUNT];
    lab_run_t empty_start;
    /* store at a fixed offered load, direct's maximum (the proof of concept's
     * second row): read latency compared at equal throughput. */
    double fixed_target_ops; /* 0: not run (store direct failed) */
    lab_run_t fixed_direct, fixed_tiered;
    lab_warm_up_t warm_up;
    char notes[LAB_NOTE_COUNT][LAB_NOTE_SIZE];
    int note_count;
    bool stderr_is_terminal;
} lab_t;

/* Adds a line to the report's notes, once (a repeated text is dropped). */
void lab_note(lab_t *lab, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* --- process.c: signals, children, files, ports ----------------------------------- */

/* SIGINT, SIGTERM and SIGHUP set a flag that every wait of the lab checks;
 * SIGPIPE is ignored. */
void lab_signals_install(void);
bool lab_interrupted(void);
int lab_interrupt_signal(void); /* the last one received, 0 if none */

/* Sleeps up to milliseconds; false if a signal asked the lab to stop. */
bool lab_sleep_ms(int64_t milliseconds);

/* Starts /proc/self/exe with argv ("thermocline", the subcommand, its flags) in its own process group (Ctrl-C reaches the lab, which stops its children
 * in order) with SIGTERM as its parent-death signal (a lab killed outright leaves
 * nothing running). stdout, and stderr unless stderr_to_terminal, go to log_path. */
bool lab_process_start(lab_process_t *process, const char *name, char *const argv[], const char *log_path,
                       bool stderr_to_terminal, bson_error_t *error) TC_MUST_CHECK;

/* Whether it is still running; reaps it when it has exited. */
bool lab_process_running(lab_process_t *process);

/* SIGTERM, then SIGKILL after timeout_ms (or at once on a second Ctrl-C); reaps.
 * Does nothing for a process that is not running. */
void lab_process_stop(lab_process_t *process, int64_t timeout_ms);

/* Whether it exited by itself with status 0. */
bool lab_process_succeeded(const lab_process_t *process);

/* CPU seconds it has used so far, user and system, every thread (from
 * /proc/PID/stat); -1 when it is not running. */
double lab_process_cpu_seconds(const lab_process_t *process);

/* "exited with status 1", "was killed by signal 9". */
void lab_process_describe_exit(const lab_process_t *process, char *out, size_t size);

/* A loopback port nothing listens on right now. 0 on failure. */
int lab_free_port(void);

/* count such ports, all different (each held until all are chosen: the kernel
 * may hand out a port again once it is released). false, every port 0, on failure. */
bool lab_free_ports(int *ports, size_t count);

/* Whether something accepts TCP connections on 127.0.0.1:port. */
bool lab_port_open(int port);

/* mkdir -p. */
bool lab_make_directory(const char *path, bson_error_t *error) TC_MUST_CHECK;

/* Copies the directory tree from into to (created), regular files and directories. */
bool lab_copy_tree(const char *from, const char *to, bson_error_t *error) TC_MUST_CHECK;

/* Writes what the lab copied or removed on path's file system to disk (syncfs),
 * so that the kernel does not flush it in the middle of the next measurement. */
bool lab_flush_file_system(const char *path, bson_error_t *error) TC_MUST_CHECK;

/* Free bytes on path's file system, -1 if unknown. */
int64_t lab_free_disk_bytes(const char *path);

/* rm -rf; quiet when path does not exist. */
void lab_remove_tree(const char *path);

/* Writes text to path, replacing it. */
bool lab_write_file(const char *path, const char *text, bson_error_t *error) TC_MUST_CHECK;

/* Reads the whole file; free with bson_free(). NULL with error. */
char *lab_read_file(const char *path, size_t *out_length, bson_error_t *error) TC_MUST_CHECK;

/* --- machine.c: how fast the machine is ---------------------------------------------- */

/* Times 100 synced 4 KB writes in directory and 5,000 loopback round trips
 * (about a second in all). */
bool lab_measure_machine(const char *directory, lab_machine_speed_t *out, bson_error_t *error) TC_MUST_CHECK;
/* The round trip alone (about 0.1 s), before each run. */
bool lab_measure_round_trip(double *out_us, bson_error_t *error) TC_MUST_CHECK;

/* --- probe.c: what the lab asks its servers over the wire -------------------------- */

/* A single-threaded client for 127.0.0.1:port (directConnection, timeouts of a
 * few seconds). Free with mongoc_client_destroy(). */
mongoc_client_t *lab_client_new(int port, bson_error_t *error) TC_MUST_CHECK;

/* Waits until process answers ping on port (it listens and serves), failing
 * early if it exits or the lab is interrupted. */
bool lab_wait_ready(lab_process_t *process, int port, int64_t timeout_ms, bson_error_t *error) TC_MUST_CHECK;

/* The cumulative counters the lab samples every second during a run. */
typedef enum lab_counter {
    LAB_COUNTER_PAGES_READ,  /* the archive's wiredTiger.cache."pages read into cache" */
    LAB_COUNTER_DISK_READS,  /* the archive's thermocline.readIops.reads: data-file reads */
    /* The archive's opLatencies.reads: the microseconds its reads took, and how
     * many there were (the proxy's, bench's and the workers'). */
    LAB_COUNTER_READ_LATENCY_US,
    LAB_COUNTER_READ_OPS,
    /* CPU seconds (user + system, every thread) of each server, from /proc; -1
     * when it is not running. In the order of lab_role_t (bench measures its
     * own, over its measured window exactly). */
    LAB_COUNTER_CPU_ARCHIVE,
    LAB_COUNTER_CPU_FAST,
    LAB_COUNTER_CPU_PROXY,
    /* The proxies' thermoclineStatus, -1 without a proxy: the feeder's lag in ms
     * and the reads waiting on the read-your-writes barrier now (gauges), the
     * events it applied and the reads that waited (cumulative). The feeder's
     * figures come from the proxy that runs it (the holder of its lease), the
     * reads' are summed over the proxies. LAB_COUNTER_CPU_PROXY is the sum of
     * the proxies' CPU. */
    LAB_COUNTER_FEEDER_LAG_MS,
    LAB_COUNTER_FEEDER_EVENTS,
    LAB_COUNTER_READS_WAITED,
    LAB_COUNTER_READS_WAITING,
    /* Microseconds each store's journal spent syncing (WiredTiger's "log sync
     * time duration (usecs)"): every write waits for it (w: majority implies j),
     * so a disk whose syncs stall holds up the writes, and then the clients
     * waiting on them. -1 where the store is not sampled. */
    LAB_COUNTER_JOURNAL_SYNC_US_ARCHIVE,
    LAB_COUNTER_JOURNAL_SYNC_US_FAST,
    LAB_COUNTER_CPU_EACH_PROXY, /* LAB_MAX_PROXIES counters from here: each proxy's CPU seconds */
    LAB_COUNTER_COUNT = LAB_COUNTER_CPU_EACH_PROXY + LAB_MAX_PROXIES
} lab_counter_t;

/* One reading of them. */
typedef struct lab_counters {
    int64_t at_ms; /* wall clock: serverStatus's localTime (midway through the call if absent) */
    double values[LAB_COUNTER_COUNT];
} lab_counters_t;

/* Fills at_ms and the archive's counters; the CPU counters are the caller's. */
bool lab_read_counters(mongoc_client_t *client, lab_counters_t *out, bson_error_t *error) TC_MUST_CHECK;

/* The fast tier's LAB_COUNTER_JOURNAL_SYNC_US_FAST, -1 if it cannot be read. */
double lab_read_journal_sync_us(mongoc_client_t *client);

/* Fills the proxies' counters from their thermoclineStatus (-1 each when one
 * does not answer, or count is 0). */
void lab_read_proxy_counters(mongoc_client_t *const *proxies, int count, lab_counters_t *out);

/* The collection's count, BSON size and on-disk size (collection and indexes). */
bool lab_collection_sizes(mongoc_client_t *client, int64_t *out_count, int64_t *out_data_bytes,
                          int64_t *out_storage_bytes, bson_error_t *error) TC_MUST_CHECK;

/* Creates the collection with an ascending index on the time field. */
bool lab_create_time_index(mongoc_client_t *client, bson_error_t *error) TC_MUST_CHECK;

/* What the workers reported in a thermoclineStatus reply, for the namespace. */
typedef struct lab_worker_view {
    bool namespace_found;
    bson_t namespace_status;  /* a copy of namespaces[LAB_NAMESPACE]; empty when not found */
    bool coverage_valid;      /* coverageHorizon is a date */
    bool warmer_reported;     /* the namespace has a warmer section */
    char warmer_state[32];
    int64_t warmer_copied;    /* -1: not reported */
    bool warm;                /* coverage valid, or the warmer says its first pass is complete */
    bool feeder_reported;     /* some feeder section reports lagMillis */
    int64_t feeder_lag_ms;
} lab_worker_view_t;

void lab_worker_view_cleanup(lab_worker_view_t *view);

/* The view of count proxies sharing one config, from their thermoclineStatus:
 * the feeder's figures from the proxy that runs the feeder, the warmer's from the
 * one that runs the warmer (the first proxy's when none says it runs it), warm
 * only when every proxy says so (each routes its own reads), the rest the first
 * proxy's. False when one does not answer. Free with lab_worker_view_cleanup(). */
bool lab_proxies_view(mongoc_client_t *const *proxies, int count, lab_worker_view_t *out,
                      bson_error_t *error) TC_MUST_CHECK;

/* --- run.c: the load and the runs ---------------------------------------------------- */

/* Starts the archive, creates the collection and its time index, loads
 * record_count documents with `bench --workload load` (its progress bar on
 * stderr), measures the collection and stops the archive cleanly: its data
 * directory is the snapshot every run copies. */
bool lab_load(lab_t *lab, bson_error_t *error) TC_MUST_CHECK;

/* Starts the archive (a copy of the snapshot), an empty fast tier and the proxy,
 * waits up to warm_wait_ms for the warmer's first pass, and stops them cleanly:
 * the fast tier's directory is then the snapshot the tiered runs copy. Fills
 * lab->warm_up and notes what the warmer did; false if it could not run. */
bool lab_warm_fast_tier(lab_t *lab, bson_error_t *error) TC_MUST_CHECK;

/* One run of workload in mode, from a fresh copy of the snapshot; fills run.
 * target_ops > 0: bench offers that many operations a second (--target-ops),
 * latency counted from each operation's intended start. False when it could
 * not be run (run->failure says why) or the lab was interrupted. Stops
 * everything it started before returning. */
bool lab_run(lab_t *lab, const char *workload, lab_mode_t mode, int64_t target_ops, lab_run_t *run) TC_MUST_CHECK;

/* Stops every child still running, newest first. */
void lab_stop_all(lab_t *lab);

void lab_run_cleanup(lab_run_t *run);

/* --- report.c: reading bench's JSON, the table, the lab's JSON ---------------------- */

/* Reads bench's --json report into run's figures and series. */
bool lab_read_bench_report(const char *path, lab_run_t *run, bson_error_t *error) TC_MUST_CHECK;

/* The value of a cumulative counter at at_ms, linearly between the samples
 * around it (the first or last sample outside them). samples in time order. */
double lab_counter_at(const lab_counters_t *samples, size_t count, int64_t at_ms, lab_counter_t counter);

/* The empty start against the direct reference: the first second at which the
 * trailing window-second average reaches reference (-1: never), and the
 * averages of the first and last part_seconds. */
typedef struct lab_catch_up {
    int passed_after_seconds;
    int part_seconds;
    double first_part_ops_per_second;
    double last_part_ops_per_second;
} lab_catch_up_t;

void lab_catch_up_compute(const double *series, int count, double reference, int window_seconds,
                          lab_catch_up_t *out);

/* --- timeline.c: each second of a run -------------------------------------------------- */

/* Fills run->series from the samples (time order) over bench's measured window
 * (run->started_at_ms, run->second_count). */
void lab_timeline_compute(lab_run_t *run, const lab_counters_t *samples, size_t count);

/* Appends {second: [...], ops: [...], read_p99_ms: [...], archive_pages_read:
 * [...], cpu_percent: {archive, fast, proxy, proxies: [one per proxy]},
 * feeder_lag_ms, feeder_events_applied, reads_waited_for_feeder,
 * reads_waiting_for_feeder} under key. */
void lab_timeline_append_json(bson_t *parent, const char *key, const lab_run_t *run);

/* Stacked panels over the run's seconds: throughput, read p99, feeder lag and
 * the reads on the barrier, CPU per process (each proxy's with several). */
bool lab_timeline_plot(const lab_run_t *run, const char *title, const char *path, bson_error_t *error) TC_MUST_CHECK;

void lab_timeline_cleanup(lab_run_t *run);

/* The comparison table and notes, as printed at the end. */
void lab_report_table(FILE *stream, const lab_t *lab);

/* Every figure of the table, per workload and mode, as JSON. */
bool lab_report_json(const lab_t *lab, const char *path, bson_error_t *error) TC_MUST_CHECK;

/* The store workload's direct run: the reference of the fixed-load runs and of
 * the empty start. NULL if the lab has no store workload. */
const lab_run_t *lab_direct_store(const lab_t *lab);

/* "1,234,567" into out. */
const char *lab_grouped(double value, char *out, size_t size);

/* --- plot.c: SVG charts ------------------------------------------------------------- */

typedef struct lab_plot_line {
    const char *label;
    const char *color;
    const double *values; /* y at x = 1 .. count */
    int count;
    double width;
    bool dashed;
} lab_plot_line_t;

/* A line chart with linear axes from 0. */
bool lab_plot_lines(const char *path, const char *title, const char *x_label, const char *y_label,
                    const lab_plot_line_t *lines, size_t line_count, bson_error_t *error) TC_MUST_CHECK;

/* One chart of a stack sharing the x axis. */
typedef struct lab_plot_panel {
    const char *y_label;
    const lab_plot_line_t *lines;
    size_t line_count;
} lab_plot_panel_t;

/* Line charts stacked one above the other, each with its own y axis. */
bool lab_plot_panels(const char *path, const char *title, const char *x_label, const lab_plot_panel_t *panels,
                     size_t panel_count, bson_error_t *error) TC_MUST_CHECK;

typedef struct lab_plot_bars {
    const char *label;
    const char *color;
    const double *values; /* one per category; negative or NaN: missing */
} lab_plot_bars_t;

/* Grouped bars, one group per category; a log-scale y axis when log_scale. */
bool lab_plot_bars(const char *path, const char *title, const char *y_label, bool log_scale,
                   const char *const *categories, size_t category_count, const lab_plot_bars_t *groups,
                   size_t group_count, bson_error_t *error) TC_MUST_CHECK;

/* Writes every plot of the lab into the output directory; the paths written are
 * listed on stream. */
bool lab_report_plots(const lab_t *lab, FILE *stream, bson_error_t *error) TC_MUST_CHECK;

#endif
