/* The feeder's share of a saturated archive (issue 20). An archive whose disk is
 * saturated serves its connections in turn, so the feeder, one connection beside
 * the proxy's pool of 64, gets a 65th of it and falls behind without bound while
 * clients read old documents: eviction then waits, the fast tier grows, and a
 * run's throughput depends on how much replay it has paid. Once a second each
 * proxy gives the feeder's lag (its own feeder's, or the lag the holder renews
 * in the feeder's lease: tier/lease.h) to archive_share_next and
 * sends at most that many requests to the archive at once
 * (backend_pool_limit_in_flight): halved while the lag is past the bound and not
 * shrinking, kept while it shrinks, widened by an eighth of the pool once the
 * feeder is back under half the bound. Pure: tests/unit/test_archive_share.c. */
#ifndef TC_PROXY_ARCHIVE_SHARE_H
#define TC_PROXY_ARCHIVE_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#define ARCHIVE_SHARE_LAG_BOUND_MS 2000
/* A lag shorter by less than this since the last look is not shrinking. */
#define ARCHIVE_SHARE_SHRINK_MS 250

typedef struct archive_share {
    int limit;           /* the proxy's archive requests at once */
    int maximum;         /* its archive pool's size */
    int64_t last_lag_ms; /* the feeder's lag at the last look */
} archive_share_t;

void archive_share_init(archive_share_t *share, int maximum);

/* The new limit, after a look at the feeder's lag (0: caught up). */
int archive_share_next(archive_share_t *share, int64_t lag_ms);

#endif
