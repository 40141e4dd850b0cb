/* Waiting for a tier's primary after a retryable failure (a network error, a
 * "not writable primary" reply): the router's retries wait here, on the loop,
 * until a probe through the tier's pool succeeds, as a driver's retry waits for
 * server selection. The pool's handshake accepts only the writable primary, so a
 * successful probe means the pool has found it again. */
#include "proxy/proxy_private.h"

#include "common/clock.h"
#include "common/log.h"
#include "wire/wire.h"

#define LOG_COMPONENT "RECOVERY"
#define RECOVERY_PROBE_INTERVAL_MS 200

typedef struct recovery_waiter {
    struct recovery_waiter *next;
    proxy_tier_t tier;
    int64_t deadline_ms;
    recovery_fn done;
    void *context;
} recovery_waiter_t;

/* Takes out of the list, in order, the waiters for which leaves() is true. */
static recovery_waiter_t *take_waiters(proxy_t *proxy, bool (*leaves)(const recovery_waiter_t *, const void *),
                                       const void *argument)
{
    recovery_waiter_t *taken = NULL, **taken_tail = &taken;
    recovery_waiter_t **link = &proxy->recovery_waiters;
    while (*link != NULL) {
        recovery_waiter_t *waiter = *link;
        if (leaves(waiter, argument)) {
            *link = waiter->next;
            waiter->next = NULL;
            *taken_tail = waiter;
            taken_tail = &waiter->next;
        } else {
            link = &waiter->next;
        }
    }
    return taken;
}

/* Calls each taken waiter's done; done may add new waiters to the proxy's list. */
static void finish_waiters(recovery_waiter_t *taken, bool recovered)
{
    while (taken != NULL) {
        recovery_waiter_t *waiter = taken;
        taken = waiter->next;
        waiter->done(waiter->context, recovered);
        bson_free(waiter);
    }
}

static bool waiter_of_tier(const recovery_waiter_t *waiter, const void *tier)
{
    return waiter->tier == *(const proxy_tier_t *)tier;
}

static bool waiter_expired(const recovery_waiter_t *waiter, const void *now)
{
    return waiter->deadline_ms <= *(const int64_t *)now;
}

static bool any_waiter(const recovery_waiter_t *waiter, const void *unused)
{
    (void)waiter, (void)unused;
    return true;
}

static bool tier_has_waiters(const proxy_t *proxy, proxy_tier_t tier)
{
    for (const recovery_waiter_t *waiter = proxy->recovery_waiters; waiter != NULL; waiter = waiter->next) {
        if (waiter->tier == tier) {
            return true;
        }
    }
    return false;
}

static void on_probe_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    recovery_probe_t *probe = context;
    proxy_t *proxy = probe->proxy;
    bson_t body;
    bson_iter_t ok;
    bson_error_t parse_error;
    probe->in_flight = false;
    if (proxy->recovery_stopped) {
        return;
    }
    if (error != NULL || !wire_op_msg_peek_body(reply, length, &body, &parse_error) ||
        !bson_iter_init_find(&ok, &body, "ok") || bson_iter_as_double(&ok) != 1.0) {
        return; /* the timer probes again */
    }
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "{tier} tier: primary found again; retrying what waited for it",
                 TC_ATTR_STR("tier", proxy_tier_name(probe->tier)));
    finish_waiters(take_waiters(proxy, waiter_of_tier, &probe->tier), true);
}

static void send_probe(proxy_t *proxy, proxy_tier_t tier)
{
    recovery_probe_t *probe = &proxy->recovery_probes[tier];
    bson_t ping = BSON_INITIALIZER;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    BSON_APPEND_INT32(&ping, "ping", 1);
    BSON_APPEND_UTF8(&ping, "$db", "admin");
    bool built = wire_op_msg_build(0, 0, 0, &ping, NULL, 0, &message, &length, &error);
    bson_destroy(&ping);
    if (!built) {
        return;
    }
    probe->proxy = proxy;
    probe->tier = tier;
    probe->in_flight = true;
    backend_pool_send(proxy->tiers[tier], message, length, on_probe_reply, probe);
    bson_free(message);
}

static void on_recovery_timer(uv_timer_t *timer)
{
    proxy_t *proxy = timer->data;
    int64_t now = clock_monotonic_ms();
    finish_waiters(take_waiters(proxy, waiter_expired, &now), false);
    for (int tier = 0; tier < PROXY_TIER_COUNT; tier++) {
        if (!proxy->recovery_probes[tier].in_flight && tier_has_waiters(proxy, (proxy_tier_t)tier)) {
            send_probe(proxy, (proxy_tier_t)tier);
        }
    }
    if (proxy->recovery_waiters == NULL) {
        uv_timer_stop(&proxy->recovery_timer);
    }
}

void recovery_wait(proxy_t *proxy, proxy_tier_t tier, int64_t deadline_ms, recovery_fn done, void *context)
{
    if (proxy->recovery_stopped) {
        done(context, false);
        return;
    }
    recovery_waiter_t *waiter = bson_malloc0(sizeof *waiter);
    waiter->tier = tier;
    waiter->deadline_ms = deadline_ms;
    waiter->done = done;
    waiter->context = context;
    recovery_waiter_t **link = &proxy->recovery_waiters;
    while (*link != NULL) {
        link = &(*link)->next;
    }
    *link = waiter;
    if (!proxy->recovery_timer_started) {
        uv_timer_init(proxy->loop, &proxy->recovery_timer);
        proxy->recovery_timer.data = proxy;
        proxy->recovery_timer_started = true;
    }
    if (!uv_is_active((uv_handle_t *)&proxy->recovery_timer)) {
        uv_timer_start(&proxy->recovery_timer, on_recovery_timer, RECOVERY_PROBE_INTERVAL_MS,
                       RECOVERY_PROBE_INTERVAL_MS);
    }
    if (!proxy->recovery_probes[tier].in_flight) {
        send_probe(proxy, tier);
    }
}

void recovery_stop(proxy_t *proxy)
{
    proxy->recovery_stopped = true;
    finish_waiters(take_waiters(proxy, any_waiter, NULL), false);
    if (proxy->recovery_timer_started) {
        uv_close((uv_handle_t *)&proxy->recovery_timer, NULL);
        proxy->recovery_timer_started = false;
    }
}
