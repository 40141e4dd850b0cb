/* The tier workers (feeder, evictor, warmer) as the proxy and main.c see them:
 * start the enabled ones as threads of this process, stop them, or run one alone
 * (`thermocline feeder|evictor|warmer --config FILE`). Their progress is shared
 * through tier/progress.h; workers of another process leave theirs in the fast
 * tier's `thermocline` database, which the apply functions below read back. */
#ifndef TC_TIER_TIER_H
#define TC_TIER_TIER_H

#include "common/error.h"
#include "config/config.h"
#include "tier/progress.h"

/* The fast tier's collections of the workers (database TIER_DATABASE):
 *   feeder        {_id: "stream", resumeToken, appliedTime, updatedAt}: the checkpoint;
 *                 {_id: "stopped:<ns>", ns, resumeToken, appliedTime, error, at}: a
 *                 namespace whose replay command the archive failed as a whole
 *   refusals      {_id: <sequence>, ns, id, kind, write, queued, code, message, at}: a
 *                 write the archive refused, or one queued behind it (feeder_private.h)
 *   warmer        {_id: <ns>, complete, copied, remaining, cursorTime, cursorId, ...}
 *   workerWrites  {_id: {ns, id, op: "evict"|"warm"}, state, ...}: writes of the
 *                 evictor and the warmer that the feeder must not replay
 *   indexes       {_id: <ns>, ttl: [{field, expireAfterSeconds, name}], updatedAt}: the
 *                 archive's TTL indexes, which the evictor applies to the fast tier
 *   leases        {_id: "feeder"|"evictor"|"warmer", holder, claim, term, renewals, ...}:
 *                 which process runs each worker (tier/lease.h)
 *   proxies       {_id: holder name, claim, beats, beatAt}: live proxies (tier/lease.h)
 *   pins          {_id, ns, ids, whole, holder, lifetimeMillis, at}: documents a proxy's
 *                 write needs kept in the fast tier (tier/pins.h)
 *   evictions     {_id, ns, ids, term, holder, lifetimeMillis, at}: the evictor's batch
 *                 under way (tier/pins.h)
 *   deletes       {_id: <ns>, time}: the fast tier's time of the latest client delete
 *                 acknowledged through any proxy ($max; src/proxy/router_wait.c) */
#define TIER_DATABASE "thermocline"
#define TIER_FEEDER_COLLECTION "feeder"
#define TIER_WARMER_COLLECTION "warmer"
#define TIER_MARKS_COLLECTION "workerWrites"
#define TIER_REFUSALS_COLLECTION "refusals"
#define TIER_INDEXES_COLLECTION "indexes"
#define TIER_DELETES_COLLECTION "deletes"

typedef struct tier_workers tier_workers_t;

/* Which workers tier_workers_start runs. */
#define TIER_RUN_FEEDER (1u << TIER_WORKER_FEEDER)
#define TIER_RUN_EVICTOR (1u << TIER_WORKER_EVICTOR)
#define TIER_RUN_WARMER (1u << TIER_WORKER_WARMER)

/* Starts the workers in `which` as threads, each with its own mongoc clients
 * popped from one pool per tier. Each runs only while this process holds its
 * lease (tier/lease.h); claim names the process on its host (the proxy's listen
 * address; NULL for a worker process). config and progress are borrowed and must
 * outlive tier_workers_stop(). NULL with an error a user can act on (a URI
 * libmongoc refuses). Free with tier_workers_stop(). */
tier_workers_t *tier_workers_start(const config_t *config, tier_progress_t *progress, unsigned which,
                                   const char *claim, bson_error_t *error) TC_MUST_CHECK;

/* Stops and joins the threads (at most a few seconds: the longest blocking call
 * is a change stream getMore or a server selection) and frees. Safe on NULL. */
void tier_workers_stop(tier_workers_t *workers);

/* The checks before a proxy or a worker starts, per namespace, on the archive:
 * a capped, clustered or time-series collection cannot be tiered; a collection
 * without an index whose first key is timeField is refused (unless
 * requireTimeFieldIndex: false, then a warning) with the createIndexes command to
 * run. False with BadValue and a one-line message naming the namespace. A
 * collection that does not exist yet, or an archive that cannot be reached, is
 * logged and let through (the index sync keeps watching). */
bool tier_preflight(const config_t *config, bson_error_t *error) TC_MUST_CHECK;

/* Records where the feeder starts when it has never run: the fast tier's cluster
 * time now. The proxy calls it before it accepts a client, so no write through it
 * precedes the feeder's start, whichever process runs the feeder and whenever.
 * Does nothing when a checkpoint exists or the fast tier keeps no oplog. Blocks
 * (about a second at most when the fast tier is down: then false with the error). */
bool tier_feeder_ensure_start(const config_t *config, bson_error_t *error) TC_MUST_CHECK;

/* Reads every document of the feeder or the warmer collection (a BSON array, as
 * workers of another process wrote them) into progress. */
void tier_progress_apply_feeder_documents(tier_progress_t *progress, const config_t *config, const bson_t *documents);
void tier_progress_apply_warmer_documents(tier_progress_t *progress, const config_t *config, const bson_t *documents);

/* `thermocline feeder|evictor|warmer ARGS`: argv[0] names the worker; returns the
 * exit status (0 after SIGINT/SIGTERM, 1 on failure, 2 on bad usage). */
int tier_main(int argc, char **argv);

#endif
