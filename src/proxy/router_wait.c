/* Requests that wait on the loop: reads of the archive until the feeder has
 * applied the writes acknowledged before them (read-your-writes across tiers),
 * writes until the documents they fault in can be pinned against the evictor,
 * and short pauses (a change stream's batch waiting for a worker's mark). */
#include "proxy/router_private.h"
#include "common/bson_view.h"
#include "common/clock.h"
#include "common/timestamp.h"
#include "tier/tier.h"
#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

#define WAIT_RECHECK_MS 250
#define DELETES_BATCH 100000 /* one document per tiered namespace */

/* --- read-your-writes across tiers ----------------------------------------------------
 * A read the archive answers waits here until the feeder has applied every write to
 * its namespace that the fast tier acknowledged before the read arrived (the
 * operationTime of those replies, note_fast_write), bounded by readYourWritesWait.
 * The feeder's progress arrives on the loop through proxy_refresh_progress. */

typedef struct read_wait {
    struct read_wait *next;
    proxy_request_t *request;
    bool for_pin; /* waits for an eviction to end, not for the feeder */
    bool for_delay; /* waits for its deadline only (router_wait_briefly), then goes on */
    bool deletes_only;
    namespace_state_t *blocking; /* the namespace the feeder is behind on */
    int64_t deadline_ms;
    int64_t started_ms;
} read_wait_t;

typedef enum feed_state {
    FEED_CAUGHT_UP,
    FEED_BEHIND,
    FEED_STOPPED, /* the namespace's feed stopped with writes not in the archive */
} feed_state_t;

bool router_pins_whole_namespace(const proxy_request_t *request)
{
    /* Keys computed at write time: the documents holding them are known only later. */
    return request->decision.fault_in_filter_count > 0 || request->decision.unique_computed_count > 0;
}

/* barrier: with other proxies, the fast tier's time when the request arrived
 * (their writes to the namespace are not in its last_*_time), and then the deletes
 * acknowledged through them, as a probe sent after it arrived read them; 0: no
 * other proxy. */
static feed_state_t namespace_feed_state(const namespace_state_t *state, bool deletes_only, uint64_t barrier)
{
    uint64_t required = deletes_only ? state->last_delete_time : state->last_write_time;
    uint64_t peers = deletes_only ? (barrier != 0 ? state->peers_delete_time : 0) : barrier;
    required = peers > required ? peers : required;
    if (required == 0 || state->progress.applied_time >= required) {
        return FEED_CAUGHT_UP;
    }
    return state->progress.feed_stopped ? FEED_STOPPED : FEED_BEHIND;
}

/* Whether the request waits for the feeder's writes to state: its own namespace,
 * every namespace for a pipeline that reads others or a listDatabases, the tiered
 * namespaces of the database a dropDatabase drops or a listCollections lists. */
static bool request_waits_for(const proxy_request_t *request, const namespace_state_t *state)
{
    /* By name too: a request that arrived before a reload holds the previous table's state. */
    return state == request->namespace_state || request->waits_for_every_namespace ||
           (request->namespace_state != NULL && strcmp(state->config->ns, request->namespace_state->config->ns) == 0) ||
           (request->has_decision && request->decision.reads_other_namespaces) ||
           (request->wait_database != NULL && strcmp(state->config->database, request->wait_database) == 0);
}

static feed_state_t request_feed_state(proxy_request_t *request, bool deletes_only, namespace_state_t **out_blocking)
{
    proxy_t *proxy = request->proxy;
    feed_state_t worst = FEED_CAUGHT_UP;
    *out_blocking = NULL;
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        namespace_state_t *state = &proxy->namespaces[i];
        if (!request_waits_for(request, state)) {
            continue;
        }
        if (request->barrier_probe != 0 && request->barrier_time == 0) {
            worst = FEED_BEHIND; /* the fast tier's time is not known yet */
            *out_blocking = state;
            continue;
        }
        feed_state_t feed = namespace_feed_state(state, deletes_only, request->barrier_time);
        if (feed > worst) {
            worst = feed;
            *out_blocking = state;
        }
    }
    return worst;
}

static void fail_stopped_feed(proxy_request_t *request, const namespace_state_t *blocking)
{
    bson_error_t error;
    tc_error_set(&error, TC_ERR_OPERATION_FAILED,
                 "cannot read %s from the archive: writes acknowledged before this read are not in the archive, "
                 "because the feeder stopped: %s",
                 blocking->config->ns, blocking->progress.feed_error);
    router_finish_with_error(request, &error);
}

/* Why the archive is away, or false when nothing says so: this process's feeder
 * cannot reach it, or the proxy's own last connection attempt to it failed. A
 * wait for the feeder then ends after failoverWait, not readYourWritesWait: the
 * feeder cannot catch up before the archive returns. */
static bool archive_away(proxy_t *proxy, char *out_reason, size_t reason_size)
{
    if (proxy_worker_runs_here(proxy, TIER_WORKER_FEEDER)) {
        tier_worker_progress_t feeder;
        tier_progress_worker(proxy->progress, TIER_WORKER_FEEDER, &feeder);
        if (feeder.running && !feeder.archive_reachable && feeder.last_error[0] != '\0') {
            snprintf(out_reason, reason_size, "%s", feeder.last_error);
            return true;
        }
    }
    backend_pool_stats_t stats = backend_pool_stats(proxy->tiers[PROXY_TIER_ARCHIVE]);
    if (stats.last_error != NULL) {
        snprintf(out_reason, reason_size, "%s", stats.last_error);
        return true;
    }
    return false;
}

static int64_t wait_deadline(proxy_t *proxy, const read_wait_t *wait)
{
    char reason[TIER_ERROR_TEXT_SIZE];
    int64_t away_deadline = wait->started_ms + proxy->config->failover_wait_ms;
    if (!wait->for_pin && away_deadline < wait->deadline_ms && archive_away(proxy, reason, sizeof reason)) {
        return away_deadline;
    }
    return wait->deadline_ms;
}

static void fail_wait_expired(proxy_request_t *request, const namespace_state_t *blocking, int64_t waited_ms)
{
    bson_error_t error;
    bool catalog = request->has_decision && request->decision.kind == PLAN_KIND_CATALOG;
    char reason[TIER_ERROR_TEXT_SIZE];
    if (archive_away(request->proxy, reason, sizeof reason)) {
        /* Retryable, as a network error is: the same command succeeds once the
         * archive is back and the feeder has caught up. */
        tc_error_set(&error, TC_ERR_HOST_UNREACHABLE,
                     "the archive is unreachable (%s): this %s needs it, and the feeder cannot apply the writes to "
                     "%s acknowledged before it (waited %lld ms); retry once the archive is back",
                     reason, catalog ? request->command_name : "operation", blocking->config->ns,
                     (long long)waited_ms);
        router_finish_with_error(request, &error);
        return;
    }
    tc_error_set(&error, TC_ERR_EXCEEDED_TIME_LIMIT,
                 "read-your-writes: the feeder has not yet applied to the archive the writes to %s acknowledged "
                 "before this %s (waited %lld ms, readYourWritesWait); retry the %s",
                 blocking->config->ns, catalog ? request->command_name : "read", (long long)waited_ms,
                 catalog ? "command" : "read");
    router_finish_with_error(request, &error);
}

static void on_wait_deadline(uv_timer_t *timer)
{
    router_expire_waits(timer->data);
}

static void arm_wait_timer(proxy_t *proxy)
{
    int64_t earliest = INT64_MAX;
    for (read_wait_t *wait = proxy->waits_head; wait != NULL; wait = wait->next) {
        int64_t deadline = wait_deadline(proxy, wait);
        earliest = deadline < earliest ? deadline : earliest;
    }
    if (earliest == INT64_MAX) {
        uv_timer_stop(&proxy->wait_timer);
        return;
    }
    int64_t delay = earliest - clock_monotonic_ms();
    /* The archive going away shortens the waits (wait_deadline), and no event
     * says so: look again this often while requests wait. */
    delay = delay > WAIT_RECHECK_MS ? WAIT_RECHECK_MS : delay;
    uv_timer_start(&proxy->wait_timer, on_wait_deadline, delay < 0 ? 0 : (uint64_t)delay, 0);
}

/* --- pins: the documents a write faults in stay until it has run ---------------------- */

/* The request unpins in the progress it pinned in: a reload may replace the
 * proxy's meanwhile (and keeps the replaced one until its last pin is gone). */

static void pin_list(proxy_request_t *request, const bson_t *ids, bool pin, bool *out_failed, uint32_t *out_done,
                     uint32_t limit)
{
    bson_iter_t iter;
    bson_iter_init(&iter, ids);
    while (bson_iter_next(&iter) && *out_done < limit) {
        if (!pin) {
            tier_progress_unpin(request->pin_progress, request->pin_slot, bson_iter_value(&iter));
        } else if (!tier_progress_pin(request->pin_progress, request->pin_slot, bson_iter_value(&iter))) {
            *out_failed = true;
            return;
        }
        (*out_done)++;
    }
}

/* Pins (pin) or unpins the first limit ids the write faults in, then its namespace
 * when it faults in by filter; *out_done counts what was done. */
static bool change_pins(proxy_request_t *request, bool pin, uint32_t limit, uint32_t *out_done)
{
    plan_decision_t *decision = &request->decision;
    bool failed = false;
    *out_done = 0;
    pin_list(request, &decision->fault_in_ids, pin, &failed, out_done, limit);
    if (!failed) {
        pin_list(request, &decision->unique_id_checks, pin, &failed, out_done, limit);
    }
    if (!failed && router_pins_whole_namespace(request) && *out_done < limit) {
        if (!pin) {
            tier_progress_unpin(request->pin_progress, request->pin_slot, NULL);
        } else if (!tier_progress_pin(request->pin_progress, request->pin_slot, NULL)) {
            failed = true;
        }
        *out_done += failed ? 0 : 1;
    }
    return !failed;
}

bool router_pin_fault_in(proxy_request_t *request)
{
    uint32_t done, undone;
    if (request->namespace_state == NULL) {
        return true;
    }
    request->pin_progress = request->proxy->progress;
    request->pin_slot = proxy_progress_slot(request->proxy, request->namespace_state);
    if (request->pin_slot == SIZE_MAX) {
        return true; /* the workers do not run on its namespace yet (a reload): no evictor to hold back */
    }
    if (!change_pins(request, true, UINT32_MAX, &done)) {
        change_pins(request, false, done, &undone);
        return false;
    }
    request->pinned = true;
    return true;
}

void router_unpin_fault_in(proxy_request_t *request)
{
    uint32_t done;
    change_pins(request, false, UINT32_MAX, &done);
    request->pinned = false;
}

/* The wait is over: the request goes on with its phase's step. */
static void resume(proxy_request_t *request)
{
    router_advance(request, &(router_outcome_t){0});
}

/* blocking NULL: a pause of delay_ms (router_wait_briefly). */
static void queue_wait(proxy_request_t *request, bool for_pin, bool deletes_only, namespace_state_t *blocking,
                       int64_t delay_ms)
{
    proxy_t *proxy = request->proxy;
    read_wait_t *wait = bson_malloc0(sizeof *wait);
    wait->request = request;
    wait->for_pin = for_pin;
    wait->deletes_only = deletes_only;
    wait->blocking = blocking;
    wait->started_ms = clock_monotonic_ms();
    wait->deadline_ms = wait->started_ms + proxy->config->read_your_writes_wait_ms;
    if (blocking == NULL) {
        wait->for_delay = true;
        wait->deadline_ms = wait->started_ms + delay_ms;
    }
    if (proxy->waits_tail != NULL) {
        proxy->waits_tail->next = wait;
    } else {
        proxy->waits_head = wait;
    }
    proxy->waits_tail = wait;
    proxy->wait_count++;
    proxy_poll_while_waiting(proxy);
    if (!for_pin && blocking != NULL) {
        blocking->reads_waited++;
    }
    arm_wait_timer(proxy);
}

/* --- writes acknowledged through other proxies ---------------------------------------
 * This proxy knows its own writes' times; another proxy's writes it learns from
 * the fast tier: the operation time of a read there (the latest write it applied)
 * after the request arrived. A wait for the deletes only needs less: every proxy
 * records its client deletes' times in thermocline.deletes before it acknowledges
 * them (one document per namespace, raised with $max), and the same read returns
 * them. So a point read or a fault-in that looks in the archive for what the fast
 * tier lacks waits for the feeder only after a delete, as with one proxy, not
 * behind every write. One probe answers every wait queued before it was sent; a
 * wait queued while one is in flight needs the next. */

static void send_barrier_probe(proxy_t *proxy);

/* The probe's batch: each namespace's latest delete through any proxy. */
static void note_peers_deletes(proxy_t *proxy, const bson_t *body)
{
    bson_iter_t batch, entry;
    if (!bson_iter_init(&batch, body) || !bson_iter_find_descendant(&batch, "cursor.firstBatch", &batch) ||
        !BSON_ITER_HOLDS_ARRAY(&batch) || !bson_iter_recurse(&batch, &entry)) {
        return;
    }
    while (bson_iter_next(&entry)) {
        bson_t document;
        bson_iter_t field;
        if (!bson_view_of(&entry, &document) || !bson_iter_init_find(&field, &document, "_id") ||
            !BSON_ITER_HOLDS_UTF8(&field)) {
            continue;
        }
        const char *ns = bson_iter_utf8(&field, NULL);
        uint64_t time = timestamp_find(&document, "time");
        for (size_t i = 0; i < proxy->namespace_count; i++) {
            namespace_state_t *state = &proxy->namespaces[i];
            if (strcmp(state->config->ns, ns) == 0 && time > state->peers_delete_time) {
                state->peers_delete_time = time;
            }
        }
    }
}

static void on_barrier_probe_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    proxy_t *proxy = context;
    bson_t body;
    bson_iter_t iter;
    bson_error_t parse_error;
    uint64_t generation = proxy->barrier_probes_sent;
    uint64_t time = 0;
    proxy->barrier_probe_in_flight = false;
    if (error == NULL && wire_op_msg_find_body(reply, length, &body, &parse_error) && router_reply_is_ok(&body) &&
        bson_iter_init_find(&iter, &body, "operationTime") && BSON_ITER_HOLDS_TIMESTAMP(&iter)) {
        uint32_t seconds, increment;
        bson_iter_timestamp(&iter, &seconds, &increment);
        time = (uint64_t)seconds << 32 | increment;
        note_peers_deletes(proxy, &body);
    }
    bool more = false;
    for (read_wait_t *wait = proxy->waits_head; wait != NULL; wait = wait->next) {
        proxy_request_t *request = wait->request;
        if (request->barrier_probe == 0 || request->barrier_time != 0) {
            continue;
        }
        if (time != 0 && request->barrier_probe <= generation) {
            request->barrier_time = time;
        } else {
            more = true; /* queued after this probe left, or it failed: the next one */
        }
    }
    if (more && time != 0) {
        send_barrier_probe(proxy);
    }
    router_resume_waits(proxy);
}

static void send_barrier_probe(proxy_t *proxy)
{
    bson_t find = BSON_INITIALIZER, filter = BSON_INITIALIZER;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    BSON_APPEND_UTF8(&find, "find", TIER_DELETES_COLLECTION);
    BSON_APPEND_DOCUMENT(&find, "filter", &filter);
    BSON_APPEND_INT32(&find, "batchSize", DELETES_BATCH);
    BSON_APPEND_BOOL(&find, "singleBatch", true);
    BSON_APPEND_UTF8(&find, "$db", TIER_DATABASE);
    if (wire_op_msg_build(0, 0, 0, &find, NULL, 0, &message, &length, &error)) {
        proxy->barrier_probe_in_flight = true;
        proxy->barrier_probes_sent++;
        backend_pool_send(proxy->tiers[PROXY_TIER_FAST], message, length, on_barrier_probe_reply, proxy);
        bson_free(message);
    }
    bson_destroy(&filter);
    bson_destroy(&find);
}

/* With other proxies alive, the request also waits for what the fast tier had
 * applied when it arrived: it joins the next probe. */
static void ask_barrier(proxy_request_t *request)
{
    proxy_t *proxy = request->proxy;
    if (request->barrier_probe != 0 || tier_progress_peers(proxy->progress) == 0) {
        return;
    }
    request->barrier_probe = proxy->barrier_probes_sent + 1;
    if (!proxy->barrier_probe_in_flight) {
        send_barrier_probe(proxy);
    }
}

/* Waits until the feeder has applied the writes to the request's namespace
 * acknowledged so far: all of them for a read the archive answers; only the
 * deletes (deletes_only) before copying archive documents into the fast tier (a
 * fault-in) or reading the ids the fast tier lacks (a point read). Those need no
 * more: a document the fast tier lacks was never written there since the archive
 * got it, or was evicted once the archive held its last version, or was deleted. */
void router_wait_for_feeder(proxy_request_t *request, bool deletes_only, request_phase_t next)
{
    proxy_t *proxy = request->proxy;
    namespace_state_t *blocking;
    router_enter(request, PHASE_WAITING_FOR_FEEDER);
    request->after_wait = next;
    ask_barrier(request);
    feed_state_t feed = request_feed_state(request, deletes_only, &blocking);
    if (feed == FEED_CAUGHT_UP || (feed == FEED_STOPPED && request->tolerates_stopped_feed)) {
        resume(request);
        return;
    }
    if (feed == FEED_STOPPED) {
        fail_stopped_feed(request, blocking);
        return;
    }
    if (proxy->config->read_your_writes_wait_ms <= 0) {
        blocking->reads_wait_failed++;
        fail_wait_expired(request, blocking, 0);
        return;
    }
    queue_wait(request, false, deletes_only, blocking, 0);
}

/* The next step of a request whose wait for the feeder ended: always on the archive
 * (what it waited for is what the archive must show). */
void router_after_feeder_wait(proxy_request_t *request)
{
    switch (request->after_wait) {
    case PHASE_FORWARDING:
        router_forward(request, PROXY_TIER_ARCHIVE);
        return;
    case PHASE_FAULT_IN_FINDING:
        router_fault_in_find(request);
        return;
    case PHASE_POINT_READING_ARCHIVE:
        router_point_read_send_archive(request);
        return;
    case PHASE_EXPLAINING_ARCHIVE:
        router_explain_send_archive(request);
        return;
    case PHASE_BOTH_ON_ARCHIVE:
        router_both_send_to_archive(request);
        return;
    case PHASE_STREAM_LOOKING_UP:
        router_change_stream_look_up(request);
        return;
    default:
        router_enter(request, request->after_wait); /* aborts: no such step after a wait */
        return;
    }
}

void router_wait_for_pins(proxy_request_t *request)
{
    router_enter(request, PHASE_WAITING_FOR_PINS);
    queue_wait(request, true, false, request->namespace_state, 0);
}

void router_wait_briefly(proxy_request_t *request, request_phase_t phase, int64_t delay_ms)
{
    router_enter(request, phase);
    queue_wait(request, false, false, NULL, delay_ms);
}

/* Takes the waits for which keep() is false out of the queue, in order, and hands
 * each to done(). done may queue new waits: they are not visited this time. */
static void sweep_waits(proxy_t *proxy, bool (*keep)(read_wait_t *wait, int64_t now),
                        void (*done)(read_wait_t *wait, int64_t now))
{
    int64_t now = clock_monotonic_ms();
    read_wait_t *list = proxy->waits_head;
    read_wait_t *kept_head = NULL, *kept_tail = NULL, *leaving_head = NULL, *leaving_tail = NULL;
    proxy->waits_head = proxy->waits_tail = NULL;
    while (list != NULL) {
        read_wait_t *wait = list;
        list = list->next;
        wait->next = NULL;
        read_wait_t **head = keep(wait, now) ? &kept_head : &leaving_head;
        read_wait_t **tail = head == &kept_head ? &kept_tail : &leaving_tail;
        if (*tail != NULL) {
            (*tail)->next = wait;
        } else {
            *head = wait;
        }
        *tail = wait;
    }
    proxy->waits_head = kept_head;
    proxy->waits_tail = kept_tail;
    while (leaving_head != NULL) {
        read_wait_t *wait = leaving_head;
        leaving_head = wait->next;
        proxy->wait_count--;
        done(wait, now);
        bson_free(wait);
    }
    if (proxy->wait_timer_started) {
        arm_wait_timer(proxy);
    }
}

static bool keep_while_behind(read_wait_t *wait, int64_t now)
{
    namespace_state_t *blocking;
    (void)now;
    if (wait->for_delay) {
        return true;
    }
    if (wait->for_pin) {
        return !router_pin_fault_in(wait->request); /* pins as it succeeds */
    }
    return request_feed_state(wait->request, wait->deletes_only, &blocking) == FEED_BEHIND;
}

static void resume_or_fail(read_wait_t *wait, int64_t now)
{
    namespace_state_t *blocking;
    (void)now;
    if (!wait->for_pin && !wait->request->tolerates_stopped_feed &&
        request_feed_state(wait->request, wait->deletes_only, &blocking) == FEED_STOPPED) {
        fail_stopped_feed(wait->request, blocking);
    } else {
        resume(wait->request);
    }
}

static bool keep_until_deadline(read_wait_t *wait, int64_t now)
{
    return now < wait_deadline(wait->request->proxy, wait);
}

static void expire(read_wait_t *wait, int64_t now)
{
    if (wait->for_delay) {
        resume(wait->request);
        return;
    }
    if (wait->for_pin) {
        bson_error_t error;
        tc_error_set(&error, TC_ERR_EXCEEDED_TIME_LIMIT,
                     "a document this write needs was being evicted from the fast tier for over %lld ms; retry the "
                     "write",
                     (long long)(now - wait->started_ms));
        router_finish_with_error(wait->request, &error);
        return;
    }
    wait->blocking->reads_wait_failed++;
    fail_wait_expired(wait->request, wait->blocking, now - wait->started_ms);
}

static bool keep_none(read_wait_t *wait, int64_t now)
{
    (void)wait, (void)now;
    return false;
}

static void cancel(read_wait_t *wait, int64_t now)
{
    bson_error_t error;
    (void)now;
    tc_error_set(&error, TC_ERR_INTERRUPTED, "the proxy is shutting down");
    router_finish_with_error(wait->request, &error);
}

void router_resume_waits(proxy_t *proxy)
{
    sweep_waits(proxy, keep_while_behind, resume_or_fail);
}

void router_expire_waits(proxy_t *proxy)
{
    /* A failed probe is asked again at this timer's pace, not in a tight loop. */
    for (read_wait_t *wait = proxy->waits_head; wait != NULL && !proxy->barrier_probe_in_flight; wait = wait->next) {
        if (wait->request->barrier_probe != 0 && wait->request->barrier_time == 0) {
            wait->request->barrier_probe = proxy->barrier_probes_sent + 1;
            send_barrier_probe(proxy);
        }
    }
    sweep_waits(proxy, keep_until_deadline, expire);
}

void router_cancel_waits(proxy_t *proxy)
{
    sweep_waits(proxy, keep_none, cancel);
}

/* --- deletes recorded for other proxies ---------------------------------------------- */

void router_publish_deletes(proxy_request_t *request, uint64_t delete_time, uint8_t *reply, size_t length)
{
    proxy_t *proxy = request->proxy;
    bson_t update = BSON_INITIALIZER, statements;
    bool commit = strcmp(request->command_name, "commitTransaction") == 0;
    uint32_t index = 0;
    request->published_reply = reply;
    request->published_reply_length = length;
    BSON_APPEND_UTF8(&update, "update", TIER_DELETES_COLLECTION);
    BSON_APPEND_ARRAY_BEGIN(&update, "updates", &statements);
    for (size_t i = 0; i < proxy->namespace_count; i++) {
        const namespace_state_t *state = &proxy->namespaces[i];
        if (!commit && strcmp(state->config->ns, request->namespace_state->config->ns) != 0) {
            continue;
        }
        bson_t statement, query, change, fields;
        char key[16];
        const char *key_string;
        bson_uint32_to_string(index++, &key_string, key, sizeof key);
        bson_append_document_begin(&statements, key_string, -1, &statement);
        BSON_APPEND_DOCUMENT_BEGIN(&statement, "q", &query);
        BSON_APPEND_UTF8(&query, "_id", state->config->ns);
        bson_append_document_end(&statement, &query);
        BSON_APPEND_DOCUMENT_BEGIN(&statement, "u", &change);
        BSON_APPEND_DOCUMENT_BEGIN(&change, "$max", &fields);
        BSON_APPEND_TIMESTAMP(&fields, "time", (uint32_t)(delete_time >> 32), (uint32_t)delete_time);
        bson_append_document_end(&change, &fields);
        bson_append_document_end(&statement, &change);
        BSON_APPEND_BOOL(&statement, "upsert", true);
        bson_append_document_end(&statements, &statement);
    }
    bson_append_array_end(&update, &statements);
    router_append_state_write_options(&update);
    router_call_tier_command(request, PHASE_PUBLISHING_DELETES, PROXY_TIER_FAST, &update);
}

void router_deletes_on_published(proxy_request_t *request, const router_outcome_t *outcome)
{
    bson_t body;
    bson_iter_t iter;
    if (!router_take_ok_reply(request, outcome->reply, outcome->length, outcome->error, &body)) {
        return; /* the delete is done but another proxy could miss it: the client sees the error */
    }
    if (bson_iter_init_find(&iter, &body, "writeErrors")) {
        router_relay_reply(request, outcome->reply, outcome->length);
        return;
    }
    uint8_t *reply = request->published_reply;
    request->published_reply = NULL;
    router_finish_with_message(request, reply, request->published_reply_length);
}
