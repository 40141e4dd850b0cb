/* `thermocline lab`: the whole system on one machine. Starts a memory-starved,
 * read-capped archive, loads it, then runs each bench workload straight against
 * it and through the proxy with an empty fast tier and the tier workers, and
 * prints, writes and plots the comparison. */
#ifndef TC_LAB_LAB_H
#define TC_LAB_LAB_H

/* Runs `thermocline lab` with argv[0] == "lab". Returns the exit status: 0 when
 * every run succeeded, 2 on bad usage, 1 when a run or the set-up failed,
 * 128 + the signal number when SIGINT, SIGTERM or SIGHUP stopped it. Every
 * process it started has been stopped by the time it returns. */
int lab_main(int argc, char **argv);

#endif
