/* The emulated slow disk under WiredTiger: --read-iops N caps reads of the
 * store's data files at N per second, shared by all threads, and keeps the OS
 * page cache from serving them; --sync-delay D makes each sync (fdatasync, the
 * journal's and the checkpoints') take D longer. Both counted for serverStatus. */
#ifndef TC_STORE_SLOW_DISK_H
#define TC_STORE_SLOW_DISK_H

#include <stdatomic.h>
#include <stdint.h>

/* A read of up to this many bytes costs one I/O; a larger one costs one per
 * started unit, as a cloud SSD volume counts its IOPS. */
#define SLOW_DISK_IO_UNIT_BYTES (256 * 1024)

typedef struct slow_disk_stats {
    uint64_t cap;                   /* reads per second; 0: uncapped */
    uint64_t reads;                 /* read calls on data files (*.wt) */
    uint64_t io_units;              /* what they cost against the cap */
    uint64_t bytes_read;
    uint64_t throttled_reads;       /* reads that had to wait for a slot */
    uint64_t throttled_wait_micros; /* total time those reads waited */
    uint64_t sync_delay_ms;         /* added to each sync; 0: none */
    uint64_t syncs;                 /* fdatasync calls */
} slow_disk_stats_t;

/* The calling thread's data-file reads since it started: a command's own are
 * the difference across it (its slow-operation log line). */
typedef struct slow_disk_thread_reads {
    uint64_t reads;
    uint64_t bytes_read;
    uint64_t read_micros;           /* in pread, the cap's wait included */
    uint64_t throttled_wait_micros; /* waiting for the cap alone */
} slow_disk_thread_reads_t;

slow_disk_thread_reads_t slow_disk_thread_reads(void);

/* Caps data-file reads at reads_per_second; 0 lifts the cap (reads are still
 * counted). Under a cap each read also bypasses the OS page cache. Call before
 * the storage opens: the emulation is process-wide, as a volume is, one store
 * per process. */
void slow_disk_set_cap(uint64_t reads_per_second);

/* Makes every fdatasync of the process wait delay_ms first, as a volume whose
 * syncs are slow (a cloud disk on a busy day); 0 lifts it. */
void slow_disk_set_sync_delay(uint64_t delay_ms);

/* A snapshot of the counters since the process started. */
slow_disk_stats_t slow_disk_stats(void);

/* --- the token bucket, exposed for unit tests ---------------------------------
 * A virtual schedule (GCRA): each reservation of k I/Os takes the next k slots
 * of interval_ns each; an idle bucket banks at most burst_ns of slots. */
typedef struct slow_disk_bucket {
    _Atomic int64_t next_free_ns; /* start of the first unreserved slot */
    int64_t interval_ns;          /* 1e9 / cap */
    int64_t burst_ns;             /* how far behind now the schedule may lag */
} slow_disk_bucket_t;

/* A bucket of reads_per_second (> 0) that banks up to 1/20 s of slots. */
void slow_disk_bucket_init(slow_disk_bucket_t *bucket, uint64_t reads_per_second);

/* Reserves io_units slots at now_ns (CLOCK_MONOTONIC) and returns when the read
 * may start: at or before now_ns when the bucket had slots banked. */
int64_t slow_disk_bucket_reserve(slow_disk_bucket_t *bucket, int64_t now_ns, uint64_t io_units);

#endif
