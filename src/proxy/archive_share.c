/* The archive's in-flight limit from the feeder's lag: multiplicative decrease
 * while the feeder falls behind, additive increase once it is current
 * (archive_share.h says why). */
#include "proxy/archive_share.h"

void archive_share_init(archive_share_t *share, int maximum)
{
    share->maximum = maximum < 1 ? 1 : maximum;
    share->limit = share->maximum;
    share->last_lag_ms = 0;
}

int archive_share_next(archive_share_t *share, int64_t lag_ms)
{
    bool shrinking = lag_ms <= share->last_lag_ms - ARCHIVE_SHARE_SHRINK_MS;
    if (lag_ms > ARCHIVE_SHARE_LAG_BOUND_MS && !shrinking) {
        share->limit = share->limit / 2 < 1 ? 1 : share->limit / 2;
    } else if (lag_ms < ARCHIVE_SHARE_LAG_BOUND_MS / 2) {
        int step = share->maximum / 8 < 1 ? 1 : share->maximum / 8;
        share->limit = share->limit + step > share->maximum ? share->maximum : share->limit + step;
    }
    share->last_lag_ms = lag_ms;
    return share->limit;
}
