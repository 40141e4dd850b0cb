/* The process's clocks, in one place: the monotonic clock for durations and
 * deadlines inside the process, the wall clock for times a user or another
 * process reads (BSON dates, oplog and log times). */
#ifndef TC_COMMON_CLOCK_H
#define TC_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline int64_t clock_monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* CLOCK_MONOTONIC in microseconds. */
static inline int64_t clock_monotonic_us(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000;
}

/* CLOCK_MONOTONIC in milliseconds. */
static inline int64_t clock_monotonic_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* CLOCK_REALTIME in milliseconds since the Unix epoch (a BSON date). */
static inline int64_t clock_wall_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* now + milliseconds on the given clock, as the absolute deadline
 * pthread_cond_timedwait takes (CLOCK_REALTIME unless the condition variable
 * was made with another clock). */
static inline struct timespec clock_deadline_after_ms(clockid_t clock, int64_t milliseconds)
{
    struct timespec deadline;
    clock_gettime(clock, &deadline);
    deadline.tv_sec += milliseconds / 1000;
    deadline.tv_nsec += (milliseconds % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    return deadline;
}

#endif
