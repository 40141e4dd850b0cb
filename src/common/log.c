/* The log writer: formats a whole line into one buffer and writes it with a single
 * call, so lines from the loop thread and the workers never interleave. */
#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Longer messages are cut; a log line is for a human, not for data. */
#define LOG_LINE_MAX 2048

static _Atomic int log_level = TC_LOG_INFO;

void tc_log_set_level(tc_log_level_t level)
{
    atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

bool tc_log_enabled(tc_log_level_t level)
{
    return (int)level <= atomic_load_explicit(&log_level, memory_order_relaxed);
}

static char log_severity_letter(tc_log_level_t level)
{
    switch (level) {
    case TC_LOG_ERROR:
        return 'E';
    case TC_LOG_WARNING:
        return 'W';
    case TC_LOG_INFO:
        return 'I';
    case TC_LOG_DEBUG:
        return 'D';
    }
    return '?';
}

void tc_log_write(tc_log_level_t level, const char *component, uint64_t connection_id,
                  const char *format, ...)
{
    char line[LOG_LINE_MAX];
    struct timespec now;
    struct tm calendar;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &calendar);

    size_t used = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &calendar);
    char context[32];
    if (connection_id == 0) {
        snprintf(context, sizeof context, "-");
    } else {
        snprintf(context, sizeof context, "conn%llu", (unsigned long long)connection_id);
    }
    int written = snprintf(line + used, sizeof line - used, ".%03ldZ %c %-8s [%s] ",
                           now.tv_nsec / 1000000L, log_severity_letter(level),
                           component != NULL ? component : "-", context);
    if (written > 0) {
        used += (size_t)written < sizeof line - used ? (size_t)written : sizeof line - used - 1;
    }

    va_list arguments;
    va_start(arguments, format);
    written = vsnprintf(line + used, sizeof line - used, format, arguments);
    va_end(arguments);
    if (written > 0) {
        used += (size_t)written < sizeof line - used ? (size_t)written : sizeof line - used - 1;
    }

    /* Keep room for the newline even when the message was cut. */
    if (used > sizeof line - 2) {
        used = sizeof line - 2;
    }
    line[used++] = '\n';
    line[used] = '\0';
    fputs(line, stderr);
}
