/* Unit tests for src/store/slow_disk.c (the --read-iops emulation: its token
 * bucket, and the pread() it puts under WiredTiger) and src/store/op_latency.c
 * (serverStatus.opLatencies). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/op_latency.h"
#include "store/slow_disk.h"

#define SECOND_NS 1000000000LL

/* ---- the token bucket ------------------------------------------------------ */

static void bucket_banks_a_twentieth_of_a_second_when_idle(void **state)
{
    (void)state;
    slow_disk_bucket_t bucket;
    slow_disk_bucket_init(&bucket, 1000); /* one slot per millisecond, 50 banked */
    int64_t now = 100 * SECOND_NS;
    for (int i = 0; i < 50; i++) {
        assert_true(slow_disk_bucket_reserve(&bucket, now, 1) <= now);
    }
    int64_t start = slow_disk_bucket_reserve(&bucket, now, 1);
    assert_true(start == now);
    /* From here each read waits one more interval. */
    assert_int_equal(slow_disk_bucket_reserve(&bucket, now, 1), now + 1000000);
    assert_int_equal(slow_disk_bucket_reserve(&bucket, now, 1), now + 2000000);
}

static void bucket_rate_holds_over_a_long_run(void **state)
{
    (void)state;
    slow_disk_bucket_t bucket;
    slow_disk_bucket_init(&bucket, 200);
    int64_t now = 10 * SECOND_NS;
    int64_t last_start = 0;
    /* 2,000 back-to-back reads at 200/s take 10 s less the 10 banked reads. */
    for (int i = 0; i < 2000; i++) {
        last_start = slow_disk_bucket_reserve(&bucket, now, 1);
    }
    int64_t expected = now + (2000 - 10 - 1) * (SECOND_NS / 200);
    assert_true(last_start >= expected - SECOND_NS / 200 && last_start <= expected + SECOND_NS / 200);
}

static void bucket_charges_large_reads_per_unit(void **state)
{
    (void)state;
    slow_disk_bucket_t bucket;
    slow_disk_bucket_init(&bucket, 10); /* 100 ms slots, one banked */
    int64_t now = 50 * SECOND_NS;
    assert_true(slow_disk_bucket_reserve(&bucket, now, 3) <= now);
    /* The 3-unit read used three slots: the next starts 200 ms from now. */
    assert_int_equal(slow_disk_bucket_reserve(&bucket, now, 1), now + 200 * 1000000LL);
}

static void bucket_does_not_bank_unlimited_idle_time(void **state)
{
    (void)state;
    slow_disk_bucket_t bucket;
    slow_disk_bucket_init(&bucket, 100); /* 10 ms slots, 5 banked */
    int64_t now = SECOND_NS;
    (void)slow_disk_bucket_reserve(&bucket, now, 1);
    now += 3600 * SECOND_NS; /* an hour idle banks only 5 slots on top of the current one */
    int immediate = 0;
    while (slow_disk_bucket_reserve(&bucket, now, 1) <= now) {
        immediate++;
        assert_true(immediate < 100);
    }
    assert_int_equal(immediate, 6);
}

/* ---- the read path ------------------------------------------------------------ */

static char directory[64];

static int make_directory(void **state)
{
    (void)state;
    snprintf(directory, sizeof directory, "/tmp/test_slow_disk.XXXXXX");
    return mkdtemp(directory) == NULL ? -1 : 0;
}

static int remove_directory(void **state)
{
    (void)state;
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", directory);
    slow_disk_set_cap(0);
    return system(command) == 0 ? 0 : -1;
}

/* A file of size bytes where byte i holds i % 251. */
static int create_file(const char *name, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", directory, name);
    int descriptor = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(descriptor >= 0);
    unsigned char *content = malloc(size);
    for (size_t i = 0; i < size; i++) {
        content[i] = (unsigned char)(i % 251);
    }
    assert_int_equal(write(descriptor, content, size), (ssize_t)size);
    free(content);
    return descriptor;
}

static double seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

static void capped_reads_of_a_data_file_wait_for_slots(void **state)
{
    (void)state;
    int descriptor = create_file("collection-1.wt", 64 * 1024);
    slow_disk_set_cap(400); /* 2.5 ms slots, 20 banked */
    slow_disk_stats_t before = slow_disk_stats();
    assert_int_equal(before.cap, 400);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    unsigned char block[4096];
    for (int i = 0; i < 100; i++) {
        off_t offset = (off_t)(i % 16) * 4096;
        assert_int_equal(pread(descriptor, block, sizeof block, offset), (ssize_t)sizeof block);
        assert_int_equal(block[0], (unsigned char)(offset % 251)); /* the right bytes */
    }
    double elapsed = seconds_since(&start);
    slow_disk_stats_t after = slow_disk_stats();
    /* 100 reads at 400/s with 20 banked: at least 79 slots of 2.5 ms. No upper
     * bound: a loaded machine may be slower than the cap. */
    assert_true(elapsed >= 0.19);
    assert_int_equal(after.reads - before.reads, 100);
    assert_int_equal(after.io_units - before.io_units, 100);
    assert_int_equal(after.bytes_read - before.bytes_read, 100 * 4096);
    assert_true(after.throttled_reads - before.throttled_reads >= 1);
    assert_true(after.throttled_wait_micros > before.throttled_wait_micros);
    close(descriptor);
}

static void other_files_are_neither_counted_nor_throttled(void **state)
{
    (void)state;
    int descriptor = create_file("WiredTigerLog.0000000001", 16 * 1024);
    slow_disk_set_cap(10);
    slow_disk_stats_t before = slow_disk_stats();
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    unsigned char block[512];
    for (int i = 0; i < 50; i++) {
        assert_int_equal(pread(descriptor, block, sizeof block, 512), (ssize_t)sizeof block);
    }
    assert_true(seconds_since(&start) < 1.0); /* 50 capped reads at 10/s would take 5 s */
    assert_int_equal(slow_disk_stats().reads, before.reads);
    close(descriptor);
}

static void a_large_read_costs_one_unit_per_256_kib(void **state)
{
    (void)state;
    size_t size = 600 * 1024;
    int descriptor = create_file("index-2.wt", size);
    slow_disk_set_cap(0);
    slow_disk_stats_t before = slow_disk_stats();
    unsigned char *buffer = malloc(size);
    assert_int_equal(pread(descriptor, buffer, size, 0), (ssize_t)size);
    assert_int_equal(buffer[size - 1], (unsigned char)((size - 1) % 251));
    free(buffer);
    slow_disk_stats_t after = slow_disk_stats();
    assert_int_equal(after.reads - before.reads, 1);
    assert_int_equal(after.io_units - before.io_units, 3); /* 600 KiB: three 256 KiB units */
    assert_int_equal(after.throttled_reads, before.throttled_reads); /* uncapped */
    close(descriptor);
}

static void a_failed_read_keeps_errno(void **state)
{
    (void)state;
    unsigned char block[16];
    errno = 0;
    assert_int_equal(pread(-1, block, sizeof block, 0), -1);
    assert_int_equal(errno, EBADF);
    int descriptor = create_file("collection-3.wt", 100);
    /* Past the end: 0 bytes, no error. */
    assert_int_equal(pread(descriptor, block, sizeof block, 4096), 0);
    close(descriptor);
}

/* ---- opLatencies -------------------------------------------------------------- */

static void commands_are_classed_as_mongod_classes_them(void **state)
{
    (void)state;
    assert_int_equal(op_latency_class_of("find"), OP_LATENCY_READS);
    assert_int_equal(op_latency_class_of("getMore"), OP_LATENCY_READS);
    assert_int_equal(op_latency_class_of("aggregate"), OP_LATENCY_READS);
    assert_int_equal(op_latency_class_of("count"), OP_LATENCY_READS);
    assert_int_equal(op_latency_class_of("distinct"), OP_LATENCY_READS);
    assert_int_equal(op_latency_class_of("insert"), OP_LATENCY_WRITES);
    assert_int_equal(op_latency_class_of("update"), OP_LATENCY_WRITES);
    assert_int_equal(op_latency_class_of("delete"), OP_LATENCY_WRITES);
    assert_int_equal(op_latency_class_of("findAndModify"), OP_LATENCY_WRITES);
    assert_int_equal(op_latency_class_of("hello"), OP_LATENCY_COMMANDS);
    assert_int_equal(op_latency_class_of("serverStatus"), OP_LATENCY_COMMANDS);
    assert_int_equal(op_latency_class_of("createIndexes"), OP_LATENCY_COMMANDS);
    assert_int_equal(op_latency_class_of("Find"), OP_LATENCY_COMMANDS); /* names are case-sensitive */
}

static int64_t field_int64(const bson_t *document, const char *path)
{
    bson_iter_t iter, found;
    assert_true(bson_iter_init(&iter, document));
    assert_true(bson_iter_find_descendant(&iter, path, &found));
    assert_true(BSON_ITER_HOLDS_INT64(&found));
    return bson_iter_int64(&found);
}

static void latencies_sum_per_class(void **state)
{
    (void)state;
    op_latency_t latency = {0};
    op_latency_record(&latency, "find", 120);
    op_latency_record(&latency, "getMore", 30);
    op_latency_record(&latency, "insert", 500);
    op_latency_record(&latency, "ping", 7);
    bson_t out = BSON_INITIALIZER;
    op_latency_append(&latency, &out);
    assert_int_equal(field_int64(&out, "reads.latency"), 150);
    assert_int_equal(field_int64(&out, "reads.ops"), 2);
    assert_int_equal(field_int64(&out, "writes.latency"), 500);
    assert_int_equal(field_int64(&out, "writes.ops"), 1);
    assert_int_equal(field_int64(&out, "commands.latency"), 7);
    assert_int_equal(field_int64(&out, "commands.ops"), 1);
    assert_int_equal(field_int64(&out, "transactions.ops"), 0);
    assert_int_equal(bson_count_keys(&out), 4);
    bson_destroy(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bucket_banks_a_twentieth_of_a_second_when_idle),
        cmocka_unit_test(bucket_rate_holds_over_a_long_run),
        cmocka_unit_test(bucket_charges_large_reads_per_unit),
        cmocka_unit_test(bucket_does_not_bank_unlimited_idle_time),
        cmocka_unit_test_setup_teardown(capped_reads_of_a_data_file_wait_for_slots, make_directory, remove_directory),
        cmocka_unit_test_setup_teardown(other_files_are_neither_counted_nor_throttled, make_directory,
                                        remove_directory),
        cmocka_unit_test_setup_teardown(a_large_read_costs_one_unit_per_256_kib, make_directory, remove_directory),
        cmocka_unit_test_setup_teardown(a_failed_read_keeps_errno, make_directory, remove_directory),
        cmocka_unit_test(commands_are_classed_as_mongod_classes_them),
        cmocka_unit_test(latencies_sum_per_class),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
