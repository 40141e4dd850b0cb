/* `thermocline store --metrics-listen HOST:PORT`: GET /metrics in Prometheus' text
 * format (metrics.c), from a thread of its own. */
#ifndef TC_STORE_METRICS_H
#define TC_STORE_METRICS_H

#include "store/commands.h"

typedef struct store_metrics store_metrics_t;

/* After the server exists (its connection counts are read). NULL and error when
 * the address cannot be served. */
store_metrics_t *store_metrics_start(store_t *store, const char *host, int port, bson_error_t *error) TC_MUST_CHECK;

/* Before the server and the storage close. Safe on NULL. */
void store_metrics_stop(store_metrics_t *metrics);

#endif
