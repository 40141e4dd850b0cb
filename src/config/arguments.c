/* `--config FILE [--verbose] [--help]` (arguments.h). */
#include "config/arguments.h"

#include <getopt.h>

int config_arguments_parse(int argc, char **argv, config_usage_fn usage, config_arguments_t *out)
{
    enum { OPT_CONFIG = 256, OPT_VERBOSE, OPT_HELP };
    static const struct option long_options[] = {
        {"config", required_argument, NULL, OPT_CONFIG},
        {"verbose", no_argument, NULL, OPT_VERBOSE},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    const char *name = argv[0];
    int option;
    out->config_path = NULL;
    out->verbose = false;
    opterr = 0;
    optind = 1;
    while ((option = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
        switch (option) {
        case OPT_CONFIG:
            out->config_path = optarg;
            break;
        case OPT_VERBOSE:
            out->verbose = true;
            break;
        case OPT_HELP:
            usage(stdout, name);
            return 0;
        default:
            fprintf(stderr, "thermocline %s: unknown or incomplete option '%s' (see --help)\n", name,
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "thermocline %s: unexpected argument '%s' (see --help)\n", name, argv[optind]);
        return 2;
    }
    if (out->config_path == NULL) {
        fprintf(stderr, "thermocline %s: --config FILE is required (see --help)\n", name);
        return 2;
    }
    return -1;
}
