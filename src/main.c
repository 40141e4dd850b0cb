/* The one executable: `thermocline <subcommand> [flags]`. Each subcommand lives
 * in its own module; this file only dispatches and reports bad usage (exit 2). */
#include "bench/bench.h"
#include "common/log.h"
#include "lab/lab.h"
#include "proxy/proxy.h"
#include "store/store.h"
#include "tier/check.h"
#include "tier/tier.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define THERMOCLINE_VERSION "0.1.0"

/* Cursor ids (wire_cursor_id_random) and member choices draw on rand(): seeded
 * once per process, so that two proxies or stores never hand out the same ids. */
static void seed_random(void)
{
    unsigned seed;
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed) {
        seed = (unsigned)(time(NULL) ^ getpid());
    }
    srand(seed);
}

/* --log-format text|json, which every subcommand takes (before or after its own
 * flags): applied here and removed from argv, so each subcommand's parser never
 * sees it. False after saying why on stderr. */
static bool take_log_format(int *argc, char **argv)
{
    int kept = 0;
    for (int i = 0; i < *argc; i++) {
        const char *value = NULL;
        if (strcmp(argv[i], "--log-format") == 0) {
            if (i + 1 == *argc) {
                fprintf(stderr, "thermocline: --log-format needs text or json\n");
                return false;
            }
            value = argv[++i];
        } else if (strncmp(argv[i], "--log-format=", 13) == 0) {
            value = argv[i] + 13;
        } else {
            argv[kept++] = argv[i];
            continue;
        }
        tc_log_format_t format;
        if (!tc_log_format_from_name(value, &format)) {
            fprintf(stderr, "thermocline: --log-format takes text or json, not '%s'\n", value);
            return false;
        }
        tc_log_set_format(format);
    }
    argv[kept] = NULL;
    *argc = kept;
    return true;
}

static void print_usage(FILE *stream)
{
    fprintf(stream,
            "usage: thermocline <command> [options]\n"
            "\n"
            "commands:\n"
            "  proxy     run the tiering proxy in front of an archive and a fast tier\n"
            "  store     run a MongoDB-compatible server on WiredTiger\n"
            "  bench     YCSB-style load generator for a MongoDB-compatible server\n"
            "  lab       archive, fast tier and proxy on this machine: every workload direct and tiered\n"
            "  feeder    run the feeder alone (fast tier's change stream -> archive)\n"
            "  evictor   run the evictor alone (old documents out of the fast tier)\n"
            "  warmer    run the warmer alone (the recent window into the fast tier)\n"
            "  check     the preflight before traffic is switched: are both tiers fit for a config?\n"
            "  version   print the version\n"
            "\n"
            "`thermocline <command> --help` describes each command's options. Every command also\n"
            "takes --log-format text|json: json writes mongod 4.4+'s structured log lines.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    /* A peer that resets its connection must cost that connection, not the
     * process: libuv writes with write(2), which raises SIGPIPE (as mongod, ignore
     * it and take EPIPE). */
    signal(SIGPIPE, SIG_IGN);
    /* libmongoc's shared-memory counters serve only its own diagnostics tools; a
     * killed process leaves its segment in /dev/shm, and a later process given the
     * same pid prints a warning (even on its way out of a bad-usage exit). */
    setenv("MONGOC_DISABLE_SHM", "1", 0);
    seed_random();
    if (!take_log_format(&argc, argv)) {
        return 2;
    }
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const char *command = argv[1];
    if (strcmp(command, "proxy") == 0) {
        return proxy_main(argc - 1, argv + 1);
    }
    if (strcmp(command, "store") == 0) {
        return store_main(argc - 1, argv + 1);
    }
    if (strcmp(command, "bench") == 0) {
        return bench_main(argc - 1, argv + 1);
    }
    if (strcmp(command, "lab") == 0) {
        return lab_main(argc - 1, argv + 1);
    }
    if (strcmp(command, "feeder") == 0 || strcmp(command, "evictor") == 0 || strcmp(command, "warmer") == 0) {
        return tier_main(argc - 1, argv + 1);
    }
    if (strcmp(command, "check") == 0) {
        return check_main(argc - 1, argv + 1);
    }
    if (strcmp(command, "version") == 0 || strcmp(command, "--version") == 0) {
        printf("thermocline %s\n", THERMOCLINE_VERSION);
        return 0;
    }
    if (strcmp(command, "--help") == 0 || strcmp(command, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    fprintf(stderr, "thermocline: unknown command '%s' (see thermocline --help)\n", command);
    return 2;
}
