/* The emulated slow disk: this file defines pread(), which WiredTiger's POSIX
 * layer calls for every block it reads, so each read of a data file first waits
 * for a slot of a token bucket of N reads per second and drops its range from
 * the OS page cache, then reads from the device; and fdatasync(), WiredTiger's
 * one way to sync a file, which can be made to take longer.
 *
 * Why at the libc boundary: WiredTiger 3.2.1 accepts a custom WT_FILE_SYSTEM
 * only from an early-loaded extension whose entry point it finds with dlsym(),
 * and our executable exports no symbols (it is linked without -rdynamic). A
 * pread() defined here is exported anyway, because libwiredtiger.so refers to
 * it, and wins over libc's. The state is process-wide for the same reason:
 * pread() carries no context. */
#include "store/slow_disk.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NANOSECONDS_PER_SECOND 1000000000LL
#define BURST_FRACTION_OF_A_SECOND 20 /* an idle volume banks 50 ms of reads */
#define DESCRIPTOR_SLOTS 4096

static _Atomic uint64_t cap_reads_per_second;
static _Atomic uint64_t sync_delay_ms;
static slow_disk_bucket_t bucket;

static struct {
    _Atomic uint64_t reads, io_units, bytes_read, throttled_reads, throttled_wait_micros, syncs;
} counters;

/* Per descriptor: the identity of the file it was last seen on, with the low
 * bit saying whether that file is a data file; 0 while unknown. The identity
 * tells a descriptor number reused for another file, even one that got the
 * inode of a deleted file (WiredTiger removes old journal files all the time). */
static _Atomic uint64_t descriptor_kinds[DESCRIPTOR_SLOTS];

/* --- the token bucket ------------------------------------------------------ */

void slow_disk_bucket_init(slow_disk_bucket_t *bucket_to_init, uint64_t reads_per_second)
{
    bucket_to_init->interval_ns = NANOSECONDS_PER_SECOND / (int64_t)reads_per_second;
    if (bucket_to_init->interval_ns < 1) {
        bucket_to_init->interval_ns = 1;
    }
    uint64_t burst_reads = reads_per_second / BURST_FRACTION_OF_A_SECOND;
    bucket_to_init->burst_ns = (int64_t)(burst_reads > 0 ? burst_reads : 1) * bucket_to_init->interval_ns;
    atomic_store(&bucket_to_init->next_free_ns, 0);
}

int64_t slow_disk_bucket_reserve(slow_disk_bucket_t *bucket_to_use, int64_t now_ns, uint64_t io_units)
{
    int64_t next_free = atomic_load(&bucket_to_use->next_free_ns);
    int64_t start;
    do {
        /* Slots left unused while idle are banked only up to burst_ns. */
        start = next_free > now_ns - bucket_to_use->burst_ns ? next_free : now_ns - bucket_to_use->burst_ns;
    } while (!atomic_compare_exchange_weak(&bucket_to_use->next_free_ns, &next_free,
                                           start + (int64_t)io_units * bucket_to_use->interval_ns));
    return start;
}

/* --- classifying descriptors -------------------------------------------------- */

static bool path_is_data_file(int descriptor)
{
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", descriptor);
    ssize_t length = readlink(link, path, sizeof path - 1);
    if (length < 3) {
        return false;
    }
    path[length] = '\0';
    return strcmp(path + length - 3, ".wt") == 0;
}

/* Device, inode and birth time, mixed into 64 bits (splitmix64's finalizer). */
static uint64_t file_identity(const struct statx *status)
{
    uint64_t mixed = status->stx_ino;
    uint64_t parts[] = {(uint64_t)status->stx_dev_major << 32 | status->stx_dev_minor,
                        (uint64_t)status->stx_btime.tv_sec, status->stx_btime.tv_nsec};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        mixed ^= parts[i] + 0x9e3779b97f4a7c15ull + (mixed << 6) + (mixed >> 2);
    }
    mixed = (mixed ^ (mixed >> 30)) * 0xbf58476d1ce4e5b9ull;
    mixed = (mixed ^ (mixed >> 27)) * 0x94d049bb133111ebull;
    return mixed ^ (mixed >> 31);
}

/* True for WiredTiger's tables (*.wt). The journal, the turtle file and
 * anything else are read as they come: recovery reads the journal in small
 * sequential pieces that a real volume serves from read-ahead. */
static bool is_data_file(int descriptor)
{
    int saved_errno = errno;
    struct statx status;
    bool data = false;
    if (descriptor < 0 ||
        statx(descriptor, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE | STATX_INO | STATX_BTIME,
              &status) != 0 ||
        !S_ISREG(status.stx_mode)) {
        goto done;
    }
    if (descriptor >= DESCRIPTOR_SLOTS || (status.stx_mask & STATX_BTIME) == 0) {
        data = path_is_data_file(descriptor); /* no reliable identity: look every time */
        goto done;
    }
    uint64_t identity = (file_identity(&status) | 2) & ~(uint64_t)1;
    uint64_t known = atomic_load_explicit(&descriptor_kinds[descriptor], memory_order_relaxed);
    if ((known & ~(uint64_t)1) == identity) {
        data = (known & 1) != 0;
        goto done;
    }
    data = path_is_data_file(descriptor);
    atomic_store_explicit(&descriptor_kinds[descriptor], identity | (data ? 1 : 0), memory_order_relaxed);
done:
    errno = saved_errno;
    return data;
}

/* --- the read path ------------------------------------------------------------ */

/* Sleeps until until_ns on CLOCK_MONOTONIC, through signals. */
static void sleep_until_ns(int64_t until_ns)
{
    struct timespec deadline = {.tv_sec = until_ns / NANOSECONDS_PER_SECOND,
                                .tv_nsec = until_ns % NANOSECONDS_PER_SECOND};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, NULL) == EINTR) {
    }
}

/* The calling thread's reads: a command's own, for its slow-operation log line. */
static _Thread_local slow_disk_thread_reads_t thread_reads;

static void wait_for_slot(uint64_t io_units)
{
    int64_t now = clock_monotonic_ns();
    int64_t start = slow_disk_bucket_reserve(&bucket, now, io_units);
    if (start <= now) {
        return;
    }
    thread_reads.throttled_wait_micros += (uint64_t)(start - now) / 1000;
    sleep_until_ns(start);
    atomic_fetch_add_explicit(&counters.throttled_reads, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&counters.throttled_wait_micros, (uint64_t)(start - now) / 1000,
                              memory_order_relaxed);
}

ssize_t slow_disk_pread(int descriptor, void *buffer, size_t count, off_t offset) __asm__("pread");

ssize_t slow_disk_pread(int descriptor, void *buffer, size_t count, off_t offset)
{
    if (is_data_file(descriptor)) {
        uint64_t io_units = count == 0 ? 1 : (count + SLOW_DISK_IO_UNIT_BYTES - 1) / SLOW_DISK_IO_UNIT_BYTES;
        int64_t started = clock_monotonic_ns();
        atomic_fetch_add_explicit(&counters.reads, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&counters.io_units, io_units, memory_order_relaxed);
        atomic_fetch_add_explicit(&counters.bytes_read, count, memory_order_relaxed);
        if (atomic_load_explicit(&cap_reads_per_second, memory_order_acquire) > 0) {
            wait_for_slot(io_units);
            /* Dropping the range first makes this read reach the device, and
             * the random-access hint stops read-ahead from caching neighbours
             * for free. Both return an error number and leave errno alone. */
            posix_fadvise(descriptor, offset, (off_t)count, POSIX_FADV_DONTNEED);
            posix_fadvise(descriptor, 0, 0, POSIX_FADV_RANDOM);
        }
        ssize_t result = (ssize_t)syscall(SYS_pread64, descriptor, buffer, count, offset);
        thread_reads.reads++;
        thread_reads.bytes_read += count;
        thread_reads.read_micros += (uint64_t)(clock_monotonic_ns() - started) / 1000;
        return result;
    }
    return (ssize_t)syscall(SYS_pread64, descriptor, buffer, count, offset);
}

/* --- the sync path ------------------------------------------------------------ */

int slow_disk_fdatasync(int descriptor) __asm__("fdatasync");

int slow_disk_fdatasync(int descriptor)
{
    atomic_fetch_add_explicit(&counters.syncs, 1, memory_order_relaxed);
    int64_t delay_ns = (int64_t)atomic_load_explicit(&sync_delay_ms, memory_order_acquire) * 1000000;
    if (delay_ns > 0) {
        sleep_until_ns(clock_monotonic_ns() + delay_ns);
    }
    return (int)syscall(SYS_fdatasync, descriptor);
}

slow_disk_thread_reads_t slow_disk_thread_reads(void)
{
    return thread_reads;
}

/* --- control and statistics ------------------------------------------------- */

void slow_disk_set_cap(uint64_t reads_per_second)
{
    if (reads_per_second > 0) {
        slow_disk_bucket_init(&bucket, reads_per_second);
    }
    atomic_store_explicit(&cap_reads_per_second, reads_per_second, memory_order_release);
}

void slow_disk_set_sync_delay(uint64_t delay_ms)
{
    atomic_store_explicit(&sync_delay_ms, delay_ms, memory_order_release);
}

slow_disk_stats_t slow_disk_stats(void)
{
    slow_disk_stats_t stats = {
        .cap = atomic_load(&cap_reads_per_second),
        .reads = atomic_load(&counters.reads),
        .io_units = atomic_load(&counters.io_units),
        .bytes_read = atomic_load(&counters.bytes_read),
        .throttled_reads = atomic_load(&counters.throttled_reads),
        .throttled_wait_micros = atomic_load(&counters.throttled_wait_micros),
        .sync_delay_ms = atomic_load(&sync_delay_ms),
        .syncs = atomic_load(&counters.syncs),
    };
    return stats;
}
