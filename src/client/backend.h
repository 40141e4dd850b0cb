/* Connections to one tier (any MongoDB deployment; the proxy's tiers, the server
 * bench drives): a pool of wire-protocol connections to its primary, on the
 * caller's event loop, and (once a read asks for them) one pool per secondary of
 * the tier's replica set (backend_members.c). Each
 * connection carries one request at a time, as a driver's pooled connection does;
 * requests beyond the pool's size wait in a FIFO queue. Nothing here blocks. */
#ifndef TC_CLIENT_BACKEND_H
#define TC_CLIENT_BACKEND_H

#include "common/error.h"
#include "client/read_preference.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct backend_pool backend_pool_t;

typedef struct backend_pool_options {
    const char *name;        /* "fast" or "archive", for logs and errors */
    const char *uri;         /* mongodb:// URI of the tier */
    int max_connections;     /* connections opened at most */
    int connect_timeout_ms;  /* per connection attempt */
    int host_index;          /* which host of the URI's seed list to connect to (0: the first) */
} backend_pool_options_t;

/* What the tier's primary said in its hello. */
typedef struct backend_server_info {
    bool known;
    int32_t max_wire_version;
    int32_t min_wire_version;
    int32_t logical_session_timeout_minutes; /* -1: none */
    char set_name[128];                      /* "" for a standalone */
} backend_server_info_t;

/* Called on the loop thread with the tier's reply (valid only during the call),
 * or with error set (reply NULL) when the tier could not be reached or the
 * connection failed mid-request: HostUnreachable 6, retryable as drivers see it. */
typedef void (*backend_reply_fn)(void *context, const uint8_t *reply, size_t length, const bson_error_t *error);

/* Parses the URI (its host at host_index, the first by default; a replica set's
 * primary is found from its hello) and its TLS options (tls=true, tlsCAFile... as drivers read them;
 * errors name the tier and the file). Connections open on demand. Free with backend_pool_destroy() once
 * backend_pool_close() has run and the loop has closed its handles. */
backend_pool_t *backend_pool_new(uv_loop_t *loop, const backend_pool_options_t *options,
                                 bson_error_t *error) TC_MUST_CHECK;

/* Sends one complete wire message (copied; its requestID is replaced) and calls
 * done with the reply. done is always called exactly once, maybe before this
 * returns (a pool that is closing fails at once). */
void backend_pool_send(backend_pool_t *pool, const uint8_t *message, size_t length, backend_reply_fn done,
                       void *context);

/* Forgets the connections open now, as a driver clears its pool after a network
 * error or a "not writable primary" reply: idle ones close at once, busy ones once
 * their request is answered. Connections opened afterwards handshake again, which
 * follows the replica set's primary. Queued requests stay queued. */
void backend_pool_clear(backend_pool_t *pool);

/* Fails every queued and in-flight request and closes every connection, the
 * members' pools' too. */
void backend_pool_close(backend_pool_t *pool);

/* True when no libuv handle of the pool remains open. */
bool backend_pool_closed(const backend_pool_t *pool);

void backend_pool_destroy(backend_pool_t *pool);

const backend_server_info_t *backend_pool_server_info(const backend_pool_t *pool);

/* The hello reply of the primary's latest handshake (its hosts, tags, lastWrite),
 * NULL before the first one; borrowed until the next handshake. */
const bson_t *backend_pool_hello(const backend_pool_t *pool);
const char *backend_pool_name(const backend_pool_t *pool);

typedef struct backend_pool_stats {
    int open;        /* connections open or opening */
    int busy;        /* carrying a request */
    int queued;      /* requests waiting for a connection */
    int in_flight_limit; /* requests sent at once at most (backend_pool_limit_in_flight) */
    uint64_t sent;   /* requests sent since start */
    uint64_t failed; /* requests failed by a network error */
    uint64_t waited; /* requests that found no connection free and queued */
    bool tls;        /* the tier's URI asks for TLS */
    const char *last_error; /* why the last connection attempt failed (NULL: it did not);
                             * valid until the pool next runs */
} backend_pool_stats_t;

backend_pool_stats_t backend_pool_stats(const backend_pool_t *pool);

/* Sends at most limit requests at once (clamped to 1..max_connections; the pool's
 * size until called): the others wait in the queue, in order. The proxy narrows
 * its archive pool while the feeder falls behind (proxy/archive_share.h). */
void backend_pool_limit_in_flight(backend_pool_t *pool, int limit);

/* --- the tier's replica set members ------------------------------------------------
 * Reads with a $readPreference other than primary may go to a secondary, as a mongos
 * sends them. The first backend_pool_discover() learns the members from the
 * primary's hello (hosts and passives: not arbiters; hidden members are not
 * listed), opens a pool to each secondary with the tier URI's credentials and TLS
 * options, and from then on monitors every member, the primary included: a hello
 * every READ_PREFERENCE_HEARTBEAT_MS, and at once after a failure (its type, tags,
 * lastWrite and round trip). Members the primary no longer lists are dropped. A
 * member is named by an id, never reused; 0 is the primary (the pool itself). */

typedef void (*backend_discover_fn)(void *context);

/* Calls done once the tier's members are known: at once when they are (or the pool
 * is closing, or its URI says directConnection=true: no other member is reached),
 * else once the primary and every member it lists have answered a first hello or
 * failed, within the connect timeout. Maybe before this returns. */
void backend_pool_discover(backend_pool_t *pool, backend_discover_fn done, void *context);

/* The member that answers a read with preference (read_preference_select(), at
 * random within the latency window): *out_member_id, 0 for the primary. Before
 * discovery, or on a tier never reached or a standalone, the primary. Errors:
 * FailedToSatisfyReadPreference 133 with mongos's message. */
bool backend_pool_select(backend_pool_t *pool, const read_preference_t *preference, uint64_t *out_member_id,
                         bson_error_t *error) TC_MUST_CHECK;

/* The pool that reaches member_id (pool for 0), or NULL when that member has left
 * the replica set. */
backend_pool_t *backend_pool_member(backend_pool_t *pool, uint64_t member_id);

/* A request to member_id failed (a network error, or a reply saying it is not a
 * secondary): no read goes to it until a hello answers again, asked at once; its
 * pool is cleared. For 0, the primary: reads that may leave it do so until then
 * (its pool, the tier's, follows the primary). */
void backend_pool_member_failed(backend_pool_t *pool, uint64_t member_id, const char *reason);

/* The cluster time up to which member_id has applied its oplog, as its last hello
 * (every READ_PREFERENCE_HEARTBEAT_MS) said; 0 when unknown. */
uint64_t backend_pool_member_applied_time(backend_pool_t *pool, uint64_t member_id);

/* thermoclineStatus: appends `members`, the secondaries and the primary as the
 * monitoring sees them, once discovered. */
void backend_pool_append_members(const backend_pool_t *pool, bson_t *out);

#endif
