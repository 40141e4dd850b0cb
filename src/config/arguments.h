/* The command line of the subcommands that run from the proxy's config file
 * (`thermocline proxy|feeder|evictor|warmer|check --config FILE [--verbose]`): one
 * parser, so that they take the same flags and say the same things. */
#ifndef TC_CONFIG_ARGUMENTS_H
#define TC_CONFIG_ARGUMENTS_H

#include <stdbool.h>
#include <stdio.h>

typedef struct config_arguments {
    const char *config_path; /* borrows argv */
    bool verbose;
} config_arguments_t;

/* Prints a subcommand's --help text; name is argv[0] ("feeder", "check"). */
typedef void (*config_usage_fn)(FILE *stream, const char *name);

/* Parses argv (argv[0] the subcommand's name): --config FILE (required),
 * --verbose, --help. Returns -1 when the subcommand goes on (out filled), else
 * its exit status: 0 after --help (usage printed on stdout), 2 on bad usage (one
 * line on stderr, "thermocline NAME: ..."). */
int config_arguments_parse(int argc, char **argv, config_usage_fn usage, config_arguments_t *out);

#endif
