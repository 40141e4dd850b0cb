/* How fast this machine is while the lab runs: the output disk's sync latency
 * and a loopback round trip, before the first run and after the last (the round
 * trip also before each run). The
 * CPU-bound tiered runs and the fixed-load tail scale with these, which change
 * from day to day on a shared VM while the code does not. */
#include "lab/lab_private.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"

/* Syncs timed: each a 4 KB write then fdatasync, as a journal's group commit. */
#define MACHINE_SYNC_COUNT 100
#define MACHINE_SYNC_BYTES 4096
/* Round trips timed, after MACHINE_WARM_TRIPS untimed ones. */
#define MACHINE_ROUND_TRIPS 5000
#define MACHINE_WARM_TRIPS 200
#define MACHINE_MESSAGE_BYTES 64

static int compare_doubles(const void *left, const void *right)
{
    double a = *(const double *)left, b = *(const double *)right;
    return a < b ? -1 : a > b ? 1 : 0;
}

static bool measure_syncs(const char *directory, lab_machine_speed_t *out, bson_error_t *error)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/machine-probe", directory);
    int descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (descriptor < 0) {
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot create %s: %s", path, strerror(errno));
    }
    static const char block[MACHINE_SYNC_BYTES];
    double milliseconds[MACHINE_SYNC_COUNT];
    bool ok = true;
    for (int i = 0; i < MACHINE_SYNC_COUNT && ok; i++) {
        int64_t started = clock_monotonic_ns();
        ok = pwrite(descriptor, block, sizeof block, (off_t)i * MACHINE_SYNC_BYTES) == (ssize_t)sizeof block &&
             fdatasync(descriptor) == 0;
        milliseconds[i] = (double)(clock_monotonic_ns() - started) / 1e6;
    }
    if (!ok) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot write and sync %s: %s", path, strerror(errno));
    }
    close(descriptor);
    unlink(path);
    if (ok) {
        qsort(milliseconds, MACHINE_SYNC_COUNT, sizeof milliseconds[0], compare_doubles);
        out->sync_median_ms = milliseconds[MACHINE_SYNC_COUNT / 2];
        out->sync_p99_ms = milliseconds[MACHINE_SYNC_COUNT * 99 / 100];
    }
    return ok;
}

static bool transfer_all(int descriptor, char *buffer, bool sending)
{
    size_t done = 0;
    while (done < MACHINE_MESSAGE_BYTES) {
        ssize_t count = sending ? send(descriptor, buffer + done, MACHINE_MESSAGE_BYTES - done, MSG_NOSIGNAL)
                                : recv(descriptor, buffer + done, MACHINE_MESSAGE_BYTES - done, 0);
        if (count <= 0 && !(count < 0 && errno == EINTR)) {
            return false;
        }
        done += count > 0 ? (size_t)count : 0;
    }
    return true;
}

/* The other end of the round trips: sends back every message until the
 * connection closes. */
static void *echo_messages(void *argument)
{
    int descriptor = *(int *)argument;
    char buffer[MACHINE_MESSAGE_BYTES];
    while (transfer_all(descriptor, buffer, false) && transfer_all(descriptor, buffer, true)) {
    }
    return NULL;
}

static int connect_loopback_pair(int *out_accepted)
{
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    *out_accepted = -1;
    if (listener >= 0 && client >= 0 && bind(listener, (struct sockaddr *)&address, sizeof address) == 0 &&
        listen(listener, 1) == 0 && getsockname(listener, (struct sockaddr *)&address, &length) == 0 &&
        connect(client, (struct sockaddr *)&address, sizeof address) == 0) {
        *out_accepted = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
    }
    if (listener >= 0) {
        close(listener);
    }
    if (*out_accepted < 0) {
        if (client >= 0) {
            close(client);
        }
        return -1;
    }
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(*out_accepted, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return client;
}

/* Round trips of a small message over TCP loopback between two threads on one
 * CPU: the kernel's network path and a thread's wake-up, what each proxied
 * operation pays several times over. */
static bool measure_round_trips(lab_machine_speed_t *out, bson_error_t *error)
{
    int accepted;
    int client = connect_loopback_pair(&accepted);
    if (client < 0) {
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot connect over loopback: %s", strerror(errno));
    }
    /* Both ends on the CPU this thread is on: a round trip then costs the
     * network path and two wake-ups, not whatever placement the scheduler chose
     * (15 to 31 us on one idle machine within minutes, unpinned). The lab's
     * children inherit this thread's affinity, so it is put back. */
    cpu_set_t saved, one_cpu;
    bool pinned = pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0;
    int this_cpu = sched_getcpu();
    CPU_ZERO(&one_cpu);
    CPU_SET(this_cpu >= 0 ? this_cpu : 0, &one_cpu);
    pinned = pinned && pthread_setaffinity_np(pthread_self(), sizeof one_cpu, &one_cpu) == 0;
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    if (pinned) {
        pthread_attr_setaffinity_np(&attributes, sizeof one_cpu, &one_cpu);
    }
    pthread_t echo;
    int created = pthread_create(&echo, &attributes, echo_messages, &accepted);
    pthread_attr_destroy(&attributes);
    if (created != 0) {
        if (pinned) {
            pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
        }
        close(client);
        close(accepted);
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot start the loopback echo thread");
    }
    char message[MACHINE_MESSAGE_BYTES] = {0};
    bool ok = true;
    int64_t started = 0;
    for (int i = 0; i < MACHINE_WARM_TRIPS + MACHINE_ROUND_TRIPS && ok; i++) {
        if (i == MACHINE_WARM_TRIPS) {
            started = clock_monotonic_ns();
        }
        ok = transfer_all(client, message, true) && transfer_all(client, message, false);
    }
    int64_t elapsed = clock_monotonic_ns() - started;
    shutdown(client, SHUT_RDWR);
    pthread_join(echo, NULL);
    if (pinned) {
        pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    }
    close(client);
    close(accepted);
    if (!ok) {
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "a loopback round trip failed: %s", strerror(errno));
    }
    out->round_trip_us = (double)elapsed / 1e3 / MACHINE_ROUND_TRIPS;
    return true;
}

bool lab_measure_round_trip(double *out_us, bson_error_t *error)
{
    lab_machine_speed_t speed = {0};
    if (!measure_round_trips(&speed, error)) {
        return false;
    }
    *out_us = speed.round_trip_us;
    return true;
}

bool lab_measure_machine(const char *directory, lab_machine_speed_t *out, bson_error_t *error)
{
    memset(out, 0, sizeof *out);
    out->measured = measure_syncs(directory, out, error) && measure_round_trips(out, error);
    return out->measured;
}
