/* A tier's replica set members, for reads whose $readPreference lets a secondary
 * answer: learned from the primary's hello, a pool per secondary (backend.c, with
 * the tier's credentials and TLS), and a monitor that asks every member hello every
 * READ_PREFERENCE_HEARTBEAT_MS and after a failure, as mongos's replica set
 * monitor does. Selection hands what the monitor knows to read_preference.c. */
#include "client/backend_members.h"

#include "common/clock.h"
#include "common/log.h"
#include "wire/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOG_COMPONENT "BACKEND"
#define ROUND_TRIP_WEIGHT 0.2 /* the server selection specification's moving average */

typedef struct backend_member {
    uint64_t id;                        /* 0: the primary */
    char address[READ_PREFERENCE_ADDRESS_SIZE];
    backend_pool_t *pool;               /* the member's own; the tier's for the primary */
    read_preference_member_type_t type; /* OTHER until a hello says, and after a failure */
    bson_t tags;
    int64_t last_write_ms;  /* its hello's lastWrite.lastWriteDate */
    uint64_t last_write_time; /* its hello's lastWrite.opTime.ts: it has applied the oplog up to it */
    int64_t last_update_ms; /* wall clock when that hello arrived */
    double round_trip_ms;   /* moving average; < 0: none since it was last unknown */
    bool heard;             /* a hello answered or failed since it was listed */
    uint64_t probe;         /* the sequence of the hello in flight; 0: none */
    int64_t probe_sent_ms;  /* monotonic */
    char last_error[sizeof(((bson_error_t *)0)->message)];
} backend_member_t;

typedef struct discover_waiter {
    struct discover_waiter *next;
    backend_discover_fn done;
    void *context;
} discover_waiter_t;

/* One hello in flight; its reply finds the member again by id (it may have left). */
typedef struct member_probe {
    backend_members_t *members;
    uint64_t member_id;
    uint64_t sequence;
} member_probe_t;

struct backend_members {
    backend_pool_t *tier;
    uv_loop_t *loop;
    int connect_timeout_ms;
    uv_timer_t timer; /* the first tick ends discovery at the latest; then the heartbeat */
    bool timer_started;
    bool timer_open;
    bool closing;
    bool discovered;
    bool standalone;  /* the primary's hello names no set */
    char set_name[128]; /* "" until the primary's hello names it */
    backend_member_t primary;
    backend_member_t **listed; /* the other members the primary lists */
    size_t listed_count;
    uint64_t last_member_id;
    uint64_t last_probe;
    backend_pool_t **retired; /* pools of members that left, closing */
    size_t retired_count;
    discover_waiter_t *waiters;
    discover_waiter_t *waiters_tail;
};

static void send_probe(backend_members_t *members, backend_member_t *member);

static const char *type_name(read_preference_member_type_t type)
{
    switch (type) {
    case READ_PREFERENCE_MEMBER_PRIMARY: return "PRIMARY";
    case READ_PREFERENCE_MEMBER_SECONDARY: return "SECONDARY";
    case READ_PREFERENCE_MEMBER_OTHER: break;
    }
    return "UNKNOWN";
}

static backend_member_t *find_member(backend_members_t *members, uint64_t member_id)
{
    if (member_id == 0) {
        return &members->primary;
    }
    for (size_t i = 0; i < members->listed_count; i++) {
        if (members->listed[i]->id == member_id) {
            return members->listed[i];
        }
    }
    return NULL;
}

/* --- discovery ------------------------------------------------------------------------ */

static void answer_waiters(backend_members_t *members)
{
    discover_waiter_t *waiter = members->waiters;
    members->waiters = members->waiters_tail = NULL;
    while (waiter != NULL) {
        discover_waiter_t *next = waiter->next;
        waiter->done(waiter->context);
        bson_free(waiter);
        waiter = next;
    }
}

/* Discovery ends once the primary and every member it lists were heard from. */
static void finish_discovery_if_done(backend_members_t *members)
{
    if (members->discovered || !members->primary.heard) {
        return;
    }
    for (size_t i = 0; i < members->listed_count; i++) {
        if (!members->listed[i]->heard) {
            return;
        }
    }
    members->discovered = true;
    answer_waiters(members);
}

/* --- what hellos say ---------------------------------------------------------------- */

static void mark_unknown(backend_member_t *member, const char *reason)
{
    member->type = READ_PREFERENCE_MEMBER_OTHER;
    member->round_trip_ms = -1;
    snprintf(member->last_error, sizeof member->last_error, "%s", reason);
}

/* Records the member's own entry of a hello: its type, tags, lastWrite, and a
 * round-trip sample. */
static void record_hello(backend_member_t *member, const read_preference_member_t *self, int64_t round_trip_us)
{
    double sample = (double)round_trip_us / 1000.0;
    member->type = self->type;
    bson_destroy(&member->tags);
    bson_copy_to(&self->tags, &member->tags);
    member->last_write_ms = self->last_write_ms;
    member->last_write_time = self->last_write_time;
    member->last_update_ms = self->last_update_ms;
    member->round_trip_ms = member->round_trip_ms < 0
                                ? sample
                                : ROUND_TRIP_WEIGHT * sample + (1 - ROUND_TRIP_WEIGHT) * member->round_trip_ms;
    member->last_error[0] = '\0';
}

static backend_member_t *add_member(backend_members_t *members, const char *address)
{
    backend_member_t *member = bson_malloc0(sizeof *member);
    member->id = ++members->last_member_id;
    snprintf(member->address, sizeof member->address, "%s", address);
    member->type = READ_PREFERENCE_MEMBER_OTHER;
    member->round_trip_ms = -1;
    bson_init(&member->tags);
    member->pool = backend_pool_new_member(members->tier, address, members->set_name);
    if (member->pool == NULL) {
        member->heard = true;
        snprintf(member->last_error, sizeof member->last_error, "the primary lists it, but it is not host:port");
    }
    members->listed = bson_realloc(members->listed, (members->listed_count + 1) * sizeof *members->listed);
    members->listed[members->listed_count++] = member;
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "{tier} tier: member {member} of {replSet} listed by the primary",
                 TC_ATTR_STR("tier", backend_pool_name(members->tier)), TC_ATTR_STR("member", address),
                 TC_ATTR_STR("replSet", members->set_name));
    return member;
}

/* Takes the members the primary no longer lists out of the list first, then closes
 * their pools: what those fail may select again (router.c), and must find the list
 * whole. The pools are freed once closed (on_tick). */
static void drop_unlisted(backend_members_t *members, char (*addresses)[READ_PREFERENCE_ADDRESS_SIZE], size_t count)
{
    backend_member_t **dropped = bson_malloc0((members->listed_count + 1) * sizeof *dropped);
    size_t dropped_count = 0, kept = 0;
    for (size_t i = 0; i < members->listed_count; i++) {
        backend_member_t *member = members->listed[i];
        bool still_listed = false;
        for (size_t j = 0; j < count && !still_listed; j++) {
            still_listed = strcmp(addresses[j], member->address) == 0;
        }
        if (still_listed) {
            members->listed[kept++] = member;
        } else {
            dropped[dropped_count++] = member;
        }
    }
    members->listed_count = kept;
    for (size_t i = 0; i < dropped_count; i++) {
        backend_member_t *member = dropped[i];
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0,
                     "{tier} tier: member {member} is no longer listed by the primary; dropped",
                     TC_ATTR_STR("tier", backend_pool_name(members->tier)), TC_ATTR_STR("member", member->address));
        if (member->pool != NULL) {
            members->retired =
                bson_realloc(members->retired, (members->retired_count + 1) * sizeof *members->retired);
            members->retired[members->retired_count++] = member->pool;
            backend_pool_close_with_reason(member->pool, "the member left the replica set");
        }
        bson_destroy(&member->tags);
        bson_free(member);
    }
    bson_free(dropped);
}

/* The primary's hello lists the members: new ones get a pool and a hello at once
 * (the first round of discovery, or a member added since); others are dropped. */
static void follow_member_list(backend_members_t *members, const bson_t *hello)
{
    char(*addresses)[READ_PREFERENCE_ADDRESS_SIZE] = bson_malloc(READ_PREFERENCE_MAX_MEMBERS * sizeof *addresses);
    size_t count = read_preference_hello_hosts(hello, addresses, READ_PREFERENCE_MAX_MEMBERS);
    drop_unlisted(members, addresses, count);
    for (size_t i = 0; i < count; i++) {
        bool known = false;
        for (size_t j = 0; j < members->listed_count && !known; j++) {
            known = strcmp(members->listed[j]->address, addresses[i]) == 0;
        }
        if (!known) {
            send_probe(members, add_member(members, addresses[i]));
        }
    }
    bson_free(addresses);
}

static void note_primary_hello(backend_members_t *members, const bson_t *hello, int64_t round_trip_us)
{
    backend_member_t *primary = &members->primary;
    read_preference_topology_t topology;
    read_preference_topology_from_hello(hello, clock_wall_ms(), &topology);
    members->standalone = topology.standalone;
    if (topology.standalone) {
        read_preference_topology_cleanup(&topology);
        return; /* read preferences do not apply: the one server answers */
    }
    snprintf(members->set_name, sizeof members->set_name, "%s", topology.set_name);
    snprintf(primary->address, sizeof primary->address, "%s", topology.members[0].address);
    if (topology.members[0].type == READ_PREFERENCE_MEMBER_PRIMARY) {
        record_hello(primary, &topology.members[0], round_trip_us);
    } else {
        /* Stepped down since the pool's handshake: new connections follow the primary. */
        mark_unknown(primary, "the tier's pool reaches a member that is no longer the primary");
        backend_pool_clear(members->tier);
    }
    read_preference_topology_cleanup(&topology);
    follow_member_list(members, hello);
}

static void note_member_hello(backend_members_t *members, backend_member_t *member, const bson_t *hello,
                              int64_t round_trip_us)
{
    read_preference_topology_t topology;
    read_preference_topology_from_hello(hello, clock_wall_ms(), &topology);
    if (strcmp(topology.set_name, members->set_name) != 0 ||
        topology.members[0].type != READ_PREFERENCE_MEMBER_SECONDARY) {
        char reason[256];
        snprintf(reason, sizeof reason, "not a secondary of %s: %s", members->set_name,
                 topology.standalone ? "a standalone"
                 : strcmp(topology.set_name, members->set_name) != 0 ? "another replica set"
                 : topology.members[0].type == READ_PREFERENCE_MEMBER_PRIMARY ? "the primary"
                                                                              : "recovering, or an arbiter");
        mark_unknown(member, reason);
        backend_pool_clear(member->pool); /* its connections were handshaken when it was one */
    } else {
        record_hello(member, &topology.members[0], round_trip_us);
    }
    read_preference_topology_cleanup(&topology);
}

/* --- the monitor ---------------------------------------------------------------------- */

static void on_probe_reply(void *context, const uint8_t *reply, size_t length, const bson_error_t *error)
{
    member_probe_t *probe = context;
    backend_members_t *members = probe->members;
    uint64_t sequence = probe->sequence;
    backend_member_t *member = members->closing ? NULL : find_member(members, probe->member_id);
    bson_free(probe);
    if (member == NULL || member->probe != sequence) {
        return; /* closing, dropped, or given up on (on_tick) */
    }
    member->probe = 0;
    member->heard = true;
    bson_t body;
    bson_iter_t ok;
    bson_error_t parse_error;
    if (error != NULL) {
        mark_unknown(member, error->message);
    } else if (!wire_op_msg_find_body(reply, length, &body, &parse_error) || !bson_iter_init_find(&ok, &body, "ok") ||
               bson_iter_as_double(&ok) != 1.0) {
        mark_unknown(member, "hello failed");
    } else if (member->id == 0) {
        note_primary_hello(members, &body, backend_pool_round_trip_us(member->pool));
    } else {
        note_member_hello(members, member, &body, backend_pool_round_trip_us(member->pool));
    }
    finish_discovery_if_done(members);
}

static void send_probe(backend_members_t *members, backend_member_t *member)
{
    if (members->closing || member->pool == NULL || member->probe != 0) {
        return;
    }
    bson_t hello = BSON_INITIALIZER;
    uint8_t *message;
    size_t length;
    bson_error_t error;
    BSON_APPEND_INT32(&hello, "hello", 1);
    BSON_APPEND_UTF8(&hello, "$db", "admin");
    bool built = wire_op_msg_build(0, 0, 0, &hello, NULL, 0, &message, &length, &error);
    bson_destroy(&hello);
    if (!built) {
        return;
    }
    member_probe_t *probe = bson_malloc0(sizeof *probe);
    probe->members = members;
    probe->member_id = member->id;
    probe->sequence = ++members->last_probe;
    member->probe = probe->sequence;
    member->probe_sent_ms = clock_monotonic_ms();
    backend_pool_send(member->pool, message, length, on_probe_reply, probe); /* may answer at once */
    bson_free(message);
}

/* Whether member's hello has been unanswered a whole heartbeat: it is unknown. */
static void give_up_on_silence(backend_member_t *member, int64_t now)
{
    if (member->probe == 0 || now - member->probe_sent_ms < READ_PREFERENCE_HEARTBEAT_MS) {
        return;
    }
    member->probe = 0;
    member->heard = true;
    mark_unknown(member, "no answer to hello within the heartbeat");
    if (member->id != 0) {
        backend_pool_clear(member->pool);
    }
}

static void free_closed_retired(backend_members_t *members)
{
    size_t kept = 0;
    for (size_t i = 0; i < members->retired_count; i++) {
        if (backend_pool_closed(members->retired[i])) {
            backend_pool_destroy(members->retired[i]);
        } else {
            members->retired[kept++] = members->retired[i];
        }
    }
    members->retired_count = kept;
}

static void on_tick(uv_timer_t *timer)
{
    backend_members_t *members = timer->data;
    int64_t now = clock_monotonic_ms();
    if (!members->discovered) {
        TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                     "{tier} tier: not every member answered hello within {timeoutMillis} ms; reads choose among "
                     "those that did",
                     TC_ATTR_STR("tier", backend_pool_name(members->tier)),
                     TC_ATTR_INT("timeoutMillis", members->connect_timeout_ms));
        members->discovered = true;
        answer_waiters(members);
    }
    free_closed_retired(members);
    give_up_on_silence(&members->primary, now);
    send_probe(members, &members->primary);
    /* By index: a probe answered at once (a closing pool) changes nothing in the list. */
    for (size_t i = 0; i < members->listed_count; i++) {
        give_up_on_silence(members->listed[i], now);
        send_probe(members, members->listed[i]);
    }
}

/* --- the module's functions --------------------------------------------------------- */

backend_members_t *backend_members_new(backend_pool_t *tier, uv_loop_t *loop, int connect_timeout_ms)
{
    backend_members_t *members = bson_malloc0(sizeof *members);
    members->tier = tier;
    members->loop = loop;
    members->connect_timeout_ms = connect_timeout_ms;
    members->primary.pool = tier;
    members->primary.type = READ_PREFERENCE_MEMBER_OTHER;
    members->primary.round_trip_ms = -1;
    bson_init(&members->primary.tags);
    return members;
}

void backend_members_discover(backend_members_t *members, backend_discover_fn done, void *context)
{
    if (members->discovered || members->closing) {
        done(context);
        return;
    }
    discover_waiter_t *waiter = bson_malloc0(sizeof *waiter);
    waiter->done = done;
    waiter->context = context;
    if (members->waiters_tail != NULL) {
        members->waiters_tail->next = waiter;
    } else {
        members->waiters = waiter;
    }
    members->waiters_tail = waiter;
    if (!members->timer_started) {
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, 0, "{tier} tier: discovering its members for a read preference",
                     TC_ATTR_STR("tier", backend_pool_name(members->tier)));
        uv_timer_init(members->loop, &members->timer);
        members->timer.data = members;
        members->timer_started = members->timer_open = true;
        uv_timer_start(&members->timer, on_tick, (uint64_t)members->connect_timeout_ms,
                       READ_PREFERENCE_HEARTBEAT_MS);
        send_probe(members, &members->primary);
    }
}

bool backend_members_known(const backend_members_t *members)
{
    return members->discovered;
}

bool backend_members_select(backend_members_t *members, const read_preference_t *preference,
                            uint64_t *out_member_id, bson_error_t *error)
{
    *out_member_id = 0;
    if (members->closing || members->standalone || members->set_name[0] == '\0') {
        return true; /* a standalone, or a primary never reached: the send finds out */
    }
    read_preference_topology_t topology = {0};
    uint64_t *ids = bson_malloc0((members->listed_count + 1) * sizeof *ids);
    snprintf(topology.set_name, sizeof topology.set_name, "%s", members->set_name);
    for (size_t i = 0; i <= members->listed_count; i++) {
        const backend_member_t *member = i == 0 ? &members->primary : members->listed[i - 1];
        read_preference_member_t *entry =
            read_preference_topology_add(&topology, member->address, member->type, &member->tags);
        entry->last_write_ms = member->last_write_ms;
        entry->last_update_ms = member->last_update_ms;
        entry->round_trip_ms = member->round_trip_ms < 0 ? -1 : (int64_t)member->round_trip_ms;
        ids[i] = member->id;
    }
    size_t index;
    bool ok = read_preference_select(&topology, preference, (uint32_t)rand(), &index, error);
    if (ok) {
        *out_member_id = ids[index];
    }
    bson_free(ids);
    read_preference_topology_cleanup(&topology);
    return ok;
}

backend_pool_t *backend_members_pool(backend_members_t *members, uint64_t member_id)
{
    backend_member_t *member = member_id != 0 ? find_member(members, member_id) : NULL;
    return member != NULL ? member->pool : NULL;
}

uint64_t backend_members_applied_time(backend_members_t *members, uint64_t member_id)
{
    backend_member_t *member = members->closing ? NULL : find_member(members, member_id);
    return member != NULL && member->type != READ_PREFERENCE_MEMBER_OTHER ? member->last_write_time : 0;
}

void backend_members_mark_failed(backend_members_t *members, uint64_t member_id, const char *reason)
{
    /* The primary too (id 0): a read whose preference allows it goes to a
     * secondary until the primary answers hello again. */
    backend_member_t *member = members->closing || members->standalone ? NULL : find_member(members, member_id);
    if (member == NULL) {
        return;
    }
    TC_LOG_ATTRS(TC_LOG_WARNING, LOG_COMPONENT, 0,
                 "{tier} tier: member {member} failed ({error}); no read goes to it until it answers hello again",
                 TC_ATTR_STR("tier", backend_pool_name(members->tier)), TC_ATTR_STR("member", member->address),
                 TC_ATTR_STR("error", reason));
    mark_unknown(member, reason);
    backend_pool_clear(member->pool);
    send_probe(members, member);
}

void backend_members_append_status(const backend_members_t *members, bson_t *out)
{
    bson_t list;
    BSON_APPEND_ARRAY_BEGIN(out, "members", &list);
    for (size_t i = 0; i <= members->listed_count; i++) {
        const backend_member_t *member = i == 0 ? &members->primary : members->listed[i - 1];
        char key[16];
        const char *key_string;
        bson_t item;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        BSON_APPEND_DOCUMENT_BEGIN(&list, key_string, &item);
        BSON_APPEND_UTF8(&item, "address", member->address);
        BSON_APPEND_UTF8(&item, "state", type_name(member->type));
        if (member->round_trip_ms >= 0) {
            BSON_APPEND_DOUBLE(&item, "roundTripMs", member->round_trip_ms);
        }
        BSON_APPEND_DOCUMENT(&item, "tags", &member->tags);
        if (member->last_write_ms != 0) {
            BSON_APPEND_DATE_TIME(&item, "lastWriteDate", member->last_write_ms);
        }
        if (member->pool != NULL) {
            backend_pool_stats_t stats = backend_pool_stats(member->pool);
            BSON_APPEND_INT32(&item, "connections", stats.open);
            BSON_APPEND_INT32(&item, "busy", stats.busy);
            BSON_APPEND_INT32(&item, "queued", stats.queued);
            BSON_APPEND_INT64(&item, "waits", (int64_t)stats.waited);
            BSON_APPEND_INT64(&item, "requests", (int64_t)stats.sent);
            BSON_APPEND_INT64(&item, "networkErrors", (int64_t)stats.failed);
        }
        if (member->last_error[0] != '\0') {
            BSON_APPEND_UTF8(&item, "lastError", member->last_error);
        }
        bson_append_document_end(&list, &item);
    }
    bson_append_array_end(out, &list);
}

static void on_timer_closed(uv_handle_t *handle)
{
    backend_members_t *members = handle->data;
    members->timer_open = false;
}

void backend_members_close(backend_members_t *members)
{
    if (members->closing) {
        return;
    }
    members->closing = true;
    answer_waiters(members); /* they select the primary, whose pool fails them */
    for (size_t i = 0; i < members->listed_count; i++) {
        if (members->listed[i]->pool != NULL) {
            backend_pool_close(members->listed[i]->pool);
        }
    }
    if (members->timer_open) {
        uv_close((uv_handle_t *)&members->timer, on_timer_closed);
    }
}

bool backend_members_closed(const backend_members_t *members)
{
    if (members->timer_open) {
        return false;
    }
    for (size_t i = 0; i < members->listed_count; i++) {
        if (members->listed[i]->pool != NULL && !backend_pool_closed(members->listed[i]->pool)) {
            return false;
        }
    }
    for (size_t i = 0; i < members->retired_count; i++) {
        if (!backend_pool_closed(members->retired[i])) {
            return false;
        }
    }
    return true;
}

void backend_members_destroy(backend_members_t *members)
{
    if (members == NULL) {
        return;
    }
    for (size_t i = 0; i < members->listed_count; i++) {
        backend_pool_destroy(members->listed[i]->pool);
        bson_destroy(&members->listed[i]->tags);
        bson_free(members->listed[i]);
    }
    for (size_t i = 0; i < members->retired_count; i++) {
        backend_pool_destroy(members->retired[i]);
    }
    bson_destroy(&members->primary.tags);
    bson_free(members->listed);
    bson_free(members->retired);
    bson_free(members);
}
