/* `thermocline proxy`: what main.c sees. */
#ifndef TC_PROXY_PROXY_H
#define TC_PROXY_PROXY_H

#include "common/error.h"

/* Loads config_path, serves until SIGINT/SIGTERM, closes cleanly. */
bool proxy_run(const char *config_path, bson_error_t *error) TC_MUST_CHECK;

/* `thermocline proxy ARGS`: parses flags, runs, returns the exit status. */
int proxy_main(int argc, char **argv);

#endif
