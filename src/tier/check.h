/* `thermocline check --config FILE` (check.c): the preflight before traffic is
 * switched to the proxy, as main.c sees it. */
#ifndef TC_TIER_CHECK_H
#define TC_TIER_CHECK_H

/* Runs the check with argv (argv[0] "check"); returns the exit status: 0 both
 * tiers fit for the config (warnings printed), 1 not (one line per finding) or
 * the config unreadable, 2 bad usage. */
int check_main(int argc, char **argv);

#endif
