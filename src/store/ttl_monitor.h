/* The store's TTL monitor, as mongod's: every ttlMonitorSleepSecs (60 by default,
 * setParameter changes it, and ttlMonitorEnabled) it deletes, in each collection,
 * the documents whose TTL index date (the earliest of an array's dates) is older
 * than the index's expireAfterSeconds. The deletes run as delete commands of the
 * store itself, so the oplog and change streams see them as mongod's TTL deletes. */
#ifndef TC_STORE_TTL_MONITOR_H
#define TC_STORE_TTL_MONITOR_H

#include "store/commands.h"

#define TTL_MONITOR_DEFAULT_SLEEP_SECONDS 60

typedef struct ttl_monitor ttl_monitor_t;

/* Starts the monitor's thread; free with ttl_monitor_stop(). */
ttl_monitor_t *ttl_monitor_start(store_t *store, bson_error_t *error) TC_MUST_CHECK;
/* Stops the thread (waits for a pass in progress) and frees the monitor; NULL is fine. */
void ttl_monitor_stop(ttl_monitor_t *monitor);

/* ttlMonitorSleepSecs and ttlMonitorEnabled; a change takes effect at once. */
int64_t ttl_monitor_sleep_seconds(ttl_monitor_t *monitor);
void ttl_monitor_set_sleep_seconds(ttl_monitor_t *monitor, int64_t seconds);
bool ttl_monitor_enabled(ttl_monitor_t *monitor);
void ttl_monitor_set_enabled(ttl_monitor_t *monitor, bool enabled);

/* serverStatus metrics.ttl: {deletedDocuments, passes}. */
void ttl_monitor_append_metrics(ttl_monitor_t *monitor, bson_t *out);

/* An index's TTL (its spec's expireAfterSeconds) in whole seconds, when it is a
 * TTL index mongod would run: one field, not _id. */
bool ttl_monitor_index_ttl(const index_descriptor_t *index, int64_t *out_seconds);

#endif
