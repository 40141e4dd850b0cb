/* `thermocline bench`: a YCSB-style load generator for MongoDB-compatible
 * servers (a store, the proxy, or a real mongod), driven through libmongoc. */
#ifndef TC_BENCH_BENCH_H
#define TC_BENCH_BENCH_H

/* Runs `thermocline bench` with argv[0] == "bench"; prints the report on stdout
 * (and writes --json FILE). Returns the exit status: 0 success, 2 bad usage,
 * 1 failure (server unreachable, a load that lost documents, a run in which every
 * operation failed, an unwritable report). */
int bench_main(int argc, char **argv);

#endif
