/* Sizes and durations with units, and counts, for flags and config files. */
#include "common/units.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool parse_number(const char *text, double *out_number, const char **out_rest)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)text[0])) {
        return false;
    }
    double number = strtod(text, &end);
    if (errno != 0 || end == text || number < 0) {
        return false;
    }
    *out_number = number;
    *out_rest = end;
    return true;
}

bool units_parse_size(const char *text, uint64_t *out_bytes, bson_error_t *error)
{
    static const struct {
        const char *suffix;
        double multiplier;
    } suffixes[] = {{"", 1}, {"B", 1}, {"KB", 1024.0}, {"MB", 1048576.0}, {"GB", 1073741824.0},
                    {"TB", 1099511627776.0}, {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}};
    double number;
    const char *rest;
    if (text != NULL && parse_number(text, &number, &rest)) {
        for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
            if (strcasecmp(rest, suffixes[i].suffix) == 0 && number * suffixes[i].multiplier < 9.0e18) {
                *out_bytes = (uint64_t)(number * suffixes[i].multiplier);
                return true;
            }
        }
    }
    return tc_error_set(error, TC_ERR_BAD_VALUE, "invalid size '%s': write a number with a unit, such as 256MB or 1GB",
                        text ? text : "");
}

bool units_parse_duration_ms(const char *text, int64_t *out_milliseconds, bson_error_t *error)
{
    static const struct {
        const char *suffix;
        double milliseconds;
    } suffixes[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    double number;
    const char *rest;
    if (text != NULL && parse_number(text, &number, &rest)) {
        for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
            if (strcmp(rest, suffixes[i].suffix) == 0 && number * suffixes[i].milliseconds < 9.0e18) {
                *out_milliseconds = (int64_t)(number * suffixes[i].milliseconds);
                return true;
            }
        }
    }
    return tc_error_set(error, TC_ERR_BAD_VALUE,
                        "invalid duration '%s': write a number with a unit (ms, s, m, h, d), such as 500ms or 30d",
                        text ? text : "");
}

bool units_parse_count(const char *text, const char *flag, int64_t minimum, int64_t maximum, int64_t *out_count,
                       bson_error_t *error)
{
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno != 0 || value < minimum || value > maximum) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "%s takes a whole number from %lld to %lld, not '%s'", flag,
                            (long long)minimum, (long long)maximum, text);
    }
    *out_count = value;
    return true;
}

bool units_parse_flag_duration(const char *text, const char *flag, int64_t minimum_ms, bool zero_allowed,
                               int64_t *out_milliseconds, bson_error_t *error)
{
    bson_error_t parse_error;
    if (!units_parse_duration_ms(text, out_milliseconds, &parse_error)) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "%s: %s", flag, parse_error.message);
    }
    if (*out_milliseconds < minimum_ms && !(zero_allowed && *out_milliseconds == 0)) {
        /* The minimum in the unit a user would write it in. */
        bool whole_seconds = minimum_ms % 1000 == 0;
        return tc_error_set(error, TC_ERR_BAD_VALUE, "%s must be %sat least %lld%s, not '%s'", flag,
                            zero_allowed ? "0 or " : "", (long long)(whole_seconds ? minimum_ms / 1000 : minimum_ms),
                            whole_seconds ? "s" : "ms", text);
    }
    return true;
}

bool units_parse_host_port(const char *text, const char *flag, char *out_host, size_t size, int *out_port,
                           bson_error_t *error)
{
    const char *colon = strrchr(text, ':');
    const char *host = text;
    size_t host_length = colon != NULL ? (size_t)(colon - text) : 0;
    bool bracketed = host_length > 2 && text[0] == '[' && text[host_length - 1] == ']';
    if (bracketed) {
        host++;
        host_length -= 2;
    }
    /* An IPv6 address, holding colons, must be in brackets. */
    if (colon == NULL || host_length == 0 || host_length >= size ||
        (!bracketed && (text[0] == '[' || memchr(host, ':', host_length) != NULL))) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "%s takes HOST:PORT, such as 127.0.0.1:9216 or [::1]:9216, not '%s'", flag, text);
    }
    int64_t port;
    if (!units_parse_count(colon + 1, flag, 1, 65535, &port, error)) {
        return false;
    }
    memcpy(out_host, host, host_length);
    out_host[host_length] = '\0';
    *out_port = (int)port;
    return true;
}
