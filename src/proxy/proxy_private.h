/* Internals of `thermocline proxy` shared by proxy.c (start-up, status, the
 * namespace table), router.c (one client request from arrival to reply) and
 * cursor_map.c (the proxy's own cursor ids). Everything here lives on the proxy's
 * single event-loop thread. */
#ifndef TC_PROXY_PROXY_PRIVATE_H
#define TC_PROXY_PROXY_PRIVATE_H

#include "client/backend.h"
#include "common/clock.h"
#include "common/timestamp.h"
#include "config/config.h"
#include "net/server.h"
#include "proxy/archive_share.h"
#include "proxy/planner.h"
#include "security/privileges.h"
#include "security/scram.h"
#include "tier/progress.h"
#include "tier/tier.h"

typedef enum proxy_tier {
    PROXY_TIER_ARCHIVE,
    PROXY_TIER_FAST,
    PROXY_TIER_COUNT,
} proxy_tier_t;

const char *proxy_tier_name(proxy_tier_t tier);

/* A namespace with a policy, and what the proxy did with it. */
typedef struct namespace_state {
    const config_namespace_t *config; /* its names, its policy, its index in the workers' progress */
    plan_policy_t policy;
    /* Added by a reload: untiered (proxy_find_namespace skips it) until the workers
     * run on a config that has it, or a running feeder, which does not know it,
     * would move its checkpoint past its fast-tier writes without replaying them. */
    bool awaiting_workers;
    uint64_t route_counts[PLAN_ROUTE_PROXY + 1];
    uint64_t reason_counts[PLAN_REASON_MALFORMED + 1];
    uint64_t fault_ins;         /* documents copied from the archive before a write */
    uint64_t point_reads_from_archive; /* finds by _id the fast tier lacked an id of */
    /* Read-your-writes: the latest operationTime of an acknowledged fast-tier write
     * to the namespace, and what the tier workers last reported (copied on the
     * loop thread by proxy_refresh_progress). */
    uint64_t last_write_time;
    uint64_t last_delete_time;  /* the same for deletes only (see router_wait.c) */
    uint64_t peers_delete_time; /* the latest delete through any proxy, as the last barrier probe read it */
    tier_namespace_progress_t progress;
    uint64_t reads_waited;      /* reads held until the feeder caught up */
    uint64_t reads_wait_failed; /* ... that failed after readYourWritesWait */
    /* unique_indexes.c: the archive's unique indexes (policy.unique_indexes points
     * here once known), and the writes waiting for them. */
    bson_t unique_indexes;
    bool indexes_known;
    bool indexes_loading;
    int64_t indexes_loaded_ms;
    struct proxy_request *index_waiters;
} namespace_state_t;

/* --- cursor_map.c ------------------------------------------------------------
 * The proxy owns the cursor-id namespace, as mongos does: clients see only
 * proxy ids, each mapped to (tier, the member that holds it, the tier's id), so
 * two servers never collide. */
typedef struct proxy_cursor {
    int64_t proxy_id;
    int64_t backend_id;
    proxy_tier_t tier;
    uint64_t member_id; /* backend_pool_member(): 0 for the tier's primary */
    char ns[PLAN_NAMESPACE_SIZE];
    int64_t last_used_ms;
    bool change_stream; /* a change stream on a tiered namespace: its batches lose the workers' events */
    bool update_lookup; /* ... opened with fullDocument: "updateLookup" */
    bson_t *stages;     /* ... its stages the proxy applies (a BSON array; NULL: none), owned */
} proxy_cursor_t;

typedef struct cursor_map cursor_map_t;

cursor_map_t *cursor_map_new(void);
void cursor_map_destroy(cursor_map_t *map);
/* Registers a cursor of the tier's member; returns the proxy id handed to the client. */
int64_t cursor_map_add(cursor_map_t *map, proxy_tier_t tier, uint64_t member_id, int64_t backend_id, const char *ns);
/* NULL when unknown. The pointer is valid until the next add or remove. */
proxy_cursor_t *cursor_map_find(cursor_map_t *map, int64_t proxy_id);
void cursor_map_remove(cursor_map_t *map, int64_t proxy_id);
/* Forgets cursors idle longer than the tiers keep theirs (10 minutes). */
void cursor_map_expire(cursor_map_t *map, int64_t now_ms);
size_t cursor_map_count(const cursor_map_t *map);

/* --- user_cache.c ----------------------------------------------------------------
 * The archive's users, read with usersInfo {showCredentials: true} through the
 * archive's pool, kept briefly (mongos reads the config servers' the same way). */
typedef struct proxy_user {
    bool found;                                 /* false: the archive has no such user */
    privileges_user_t user;                     /* name, database, roles */
    bool has_credentials[2];                    /* indexed by scram_mechanism_t */
    scram_credentials_t credentials[2];
    int64_t fetched_ms;                         /* clock_monotonic_ms() when read */
    uint64_t generation;                        /* the cache's generation then */
} proxy_user_t;

typedef struct user_cache user_cache_t;

/* user (valid only during the call) or error (the archive could not be asked or
 * refused: HostUnreachable, Unauthorized...). */
typedef void (*user_cache_fn)(void *context, const proxy_user_t *user, const bson_error_t *error);

user_cache_t *user_cache_new(backend_pool_t *archive, int64_t max_age_ms);

/* After the archive pool has closed (no read under way). Safe on NULL. */
void user_cache_destroy(user_cache_t *cache);

/* Calls done once, maybe at once: from the cache when user@database was read
 * less than max_age_ms ago and since the last invalidation, else after one
 * usersInfo to the archive shared by every lookup waiting for it. */
void user_cache_lookup(user_cache_t *cache, const char *user, const char *database, user_cache_fn done,
                       void *context);

/* Users may have changed (a user command went through the proxy): every lookup
 * from now on reads the archive again. */
void user_cache_invalidate(user_cache_t *cache);
uint64_t user_cache_generation(const user_cache_t *cache);

typedef struct proxy proxy_t;

/* --- access.c ------------------------------------------------------------------
 * Clients' authentication (SCRAM against the archive's users) and, with
 * authorization: enabled, the privilege check before every command. A client
 * connection's state lives in its server connection_data. */

/* Who sent a request; valid while the request is. */
typedef struct access_client {
    void **connection_data;
    uint64_t connection_id;
    const char *peer_address;
} access_client_t;

/* server_callbacks_t.connection_close: frees a connection's state. */
void access_session_destroy(void *application, void *session);

/* Called once with NULL to go on, or with the error to answer. */
typedef void (*access_admit_fn)(void *context, const bson_error_t *error);

/* Before a command is planned: with authorization enabled, may this client's
 * user run it (its roles read again first when they are older than the user
 * cache allows)? Unauthorized 13 with mongod's words otherwise. */
void access_admit(proxy_t *proxy, const access_client_t *client, const char *name, const bson_t *command,
                  access_admit_fn done, void *context);

/* Whether the proxy answers name itself, whatever authorization says:
 * saslStart, saslContinue, logout and connectionStatus concern the client's
 * connection to the proxy (forwarded, they would act on the proxy's own
 * authenticated connection to the archive). */
bool access_answers(const char *name);

/* reply: the body without ok (valid during the call), or error. */
typedef void (*access_reply_fn)(void *context, const bson_t *reply, const bson_error_t *error);

/* Runs one of the commands access_answers() names. */
void access_run(proxy_t *proxy, const access_client_t *client, const char *name, const bson_t *command,
                access_reply_fn done, void *context);

/* Whether a hello asks for authentication work (saslSupportedMechs,
 * speculativeAuthenticate); then access_hello() gives the fields to add (none
 * when the user is unknown or the speculative start fails: hello never fails). */
bool access_hello_wanted(const bson_t *command);
void access_hello(proxy_t *proxy, const access_client_t *client, const bson_t *command, access_reply_fn done,
                  void *context);

/* After a tier answered name: forgets the cached users if name may have
 * changed them (a user command, a write to admin.system.users). */
void access_note_reply(proxy_t *proxy, const char *name, const fields_t *command);

/* Whether a tier's reply to name must be trimmed to what the client may see
 * (listDatabases under authorization: only the databases its roles reach), and
 * the trimming. */
bool access_trims_reply(const proxy_t *proxy, const char *name);
void access_trim_reply(const access_client_t *client, bson_t *reply);

/* How long a user read from the archive serves before it is read again. */
#define PROXY_USER_CACHE_MS 10000

/* --- the proxy ------------------------------------------------------------------ */

/* recovery.c: one tier's probe for its primary. */
typedef struct recovery_probe {
    struct proxy *proxy;
    proxy_tier_t tier;
    bool in_flight;
} recovery_probe_t;

typedef struct proxy_metrics proxy_metrics_t;

/* --- reload.c, reload_changes.c: live reload ------------------------------------------ */

/* What a new config changes (reload_changes.c, pure). changed and refused are
 * BSON arrays of sentences ("slowOpThresholdMs: 100 -> 5"); anything refused
 * refuses the whole file. Free with reload_plan_cleanup(). */
typedef struct reload_plan {
    bson_t changed;
    bson_t refused;
    bool restart_workers;    /* namespaces or the workers' settings change */
    bool removes_namespaces; /* the feeder must first apply their writes */
    bool reload_tls;         /* the new config has TLS: its files are read again */
} reload_plan_t;

void reload_plan_compare(const config_t *old_config, const config_t *new_config, reload_plan_t *plan);
void reload_plan_cleanup(reload_plan_t *plan);

/* A config and the namespace table built from it. A request holds the one
 * current when it arrived (its namespace_state points into it); a replaced one
 * is freed once none holds it, no unique-index read of its namespaces is under
 * way and the workers no longer run on its config. */
typedef struct proxy_generation {
    config_t *config; /* owned */
    namespace_state_t *namespaces;
    size_t namespace_count;
    uint64_t requests;
    struct proxy_generation *next_retired;
} proxy_generation_t;

/* A generation owning config, its namespaces' states carrying over (counters,
 * read-your-writes times, unique indexes) those of previous (may be NULL; the
 * namespaces it lacks are awaiting_workers). */
proxy_generation_t *proxy_generation_new(config_t *config, const proxy_generation_t *previous);
/* router.c: when a request arrives and when it is freed. */
proxy_generation_t *proxy_generation_acquire(struct proxy *proxy);
void proxy_generation_release(struct proxy *proxy, proxy_generation_t *generation);

/* reply (valid during the call): what changed; or error (FILE:LINE for a bad
 * file, every setting that cannot change live): the running config stays. */
typedef void (*reload_fn)(void *context, const bson_t *reply, const bson_error_t *error);

/* Re-reads proxy->config_path and applies it (see reload.c); done is called
 * once, later, on the loop (NULL: SIGHUP, only logged). */
void proxy_reload(struct proxy *proxy, reload_fn done, void *context);
/* start: SIGHUP handled (after the loop exists); stop: the loop stops (a reload
 * waiting is answered); sweep: frees the retired generations nothing uses
 * (housekeeping); cleanup: frees every generation, after the loop ran. */
bool proxy_reload_start(struct proxy *proxy, bson_error_t *error) TC_MUST_CHECK;
void proxy_reload_stop(struct proxy *proxy);
void proxy_reload_sweep(struct proxy *proxy);
void proxy_reload_cleanup(struct proxy *proxy);

typedef struct proxy {
    /* The current generation's config and namespace table (reload.c swaps them). */
    config_t *config;
    server_t *server;
    uv_loop_t *loop;
    backend_pool_t *tiers[PROXY_TIER_COUNT];
    user_cache_t *users;       /* the archive's users, for client authentication */
    cursor_map_t *cursors;
    namespace_state_t *namespaces;
    size_t namespace_count;
    uv_timer_t housekeeping_timer;
    bool housekeeping_started;
    archive_share_t archive_share; /* the archive pool's in-flight limit while the feeder lags */
    bson_oid_t process_id;     /* topologyVersion.processId of our hello */
    uint64_t requests;         /* client requests handled */
    uint64_t requests_failed;  /* answered with a tier-unreachable error */
    /* The tier workers: threads of this process (workers_here), and their
     * progress, which reaches the loop through progress_async; workers of
     * another process are polled from the fast tier (poll_timer). */
    tier_progress_t *progress;
    tier_workers_t *workers;
    unsigned workers_here;
    uv_async_t progress_async;
    bool progress_async_started;
    uv_timer_t poll_timer;
    bool poll_timer_started;
    int polls_in_flight;
    int64_t last_poll_ms;
    /* With other proxies alive (tier_progress_peers), the fast tier's latest
     * operation time, asked once for every wait queued before the ask was sent
     * (router_wait.c): their writes must be fed too. */
    bool barrier_probe_in_flight;
    uint64_t barrier_probes_sent; /* generations */
    /* Writes' pins in the fast tier (router_pins.c): the round the next writes
     * join, the rounds whose upsert is in flight, and the pins of freed writes
     * (an array being built) removed once the delete in flight is answered. */
    struct pin_round *pin_round_collecting;
    int pin_rounds_writing;
    bson_t *unpin_keys;
    uint32_t unpin_key_count;
    bool unpin_in_flight;
    uint64_t pin_rounds;    /* upserts of pins sent (thermoclineStatus.fastTierPins) */
    uint64_t pinned_writes; /* writes whose pins they carried */
    /* Reads waiting for the feeder (router_wait.c), oldest first. */
    struct read_wait *waits_head;
    struct read_wait *waits_tail;
    size_t wait_count;
    uv_timer_t wait_timer;
    bool wait_timer_started;
    /* Retries waiting for their tier's primary (recovery.c). */
    struct recovery_waiter *recovery_waiters;
    recovery_probe_t recovery_probes[PROXY_TIER_COUNT];
    uv_timer_t recovery_timer;
    bool recovery_timer_started;
    bool recovery_stopped;
    uint64_t requests_retried; /* sent to a tier a second time (retry.h's rules) */
    /* The highest $clusterTime each tier has sent (cluster_time.c). */
    bson_t *cluster_times[PROXY_TIER_COUNT];
    uint64_t cluster_time_values[PROXY_TIER_COUNT];
    proxy_metrics_t *metrics; /* metrics.c; NULL without metricsListen */
    /* Live reload (reload.c). */
    const char *config_path;
    proxy_generation_t *generation;
    proxy_generation_t *retired;
    /* The config the workers read and whose namespace indexes are progress's
     * slots: the previous generation's until a reload has restarted them. */
    const config_t *workers_config;
    tls_context_t *tls_context;     /* the front door's, NULL without TLS */
    struct proxy_reload *reload;
} proxy_t;

/* --- unique_indexes.c: each namespace's unique indexes, read from the archive ---- */

/* Reads state's unique indexes from the archive (unless a read is under way). */
void unique_indexes_load(proxy_t *proxy, namespace_state_t *state);
/* Reads again those last read UNIQUE_INDEXES_REFRESH_MS ago (housekeeping). */
void unique_indexes_refresh_due(proxy_t *proxy);
/* After a catalog command: the next write waits for a fresh read. */
void unique_indexes_forget(proxy_t *proxy, namespace_state_t *state);
/* Fails the writes waiting for a read (shutdown). */
void unique_indexes_cancel_waits(proxy_t *proxy);

/* The namespace's state, or NULL when it has no policy. */
namespace_state_t *proxy_find_namespace(proxy_t *proxy, const char *ns);

/* The coverage the planner uses for state, now. */
plan_coverage_t proxy_coverage(const proxy_t *proxy, const namespace_state_t *state);

/* Copies the tier workers' progress into every namespace_state_t and lets the
 * waiting reads that may now run go (router_resume_waits). */
void proxy_refresh_progress(proxy_t *proxy);

/* The workers' progress listener (any thread: wakes the loop), and the poll of
 * the progress of workers of another process (started once namespaces exist). */
void proxy_on_worker_progress(void *context);
void proxy_start_polling(proxy_t *proxy);

/* A read began to wait: the poll runs at its waiting pace until none waits. */
void proxy_poll_while_waiting(proxy_t *proxy);

/* state's slot in proxy->progress (by name while the workers still run on a
 * replaced config), or SIZE_MAX when they do not know its namespace yet. */
size_t proxy_progress_slot(const proxy_t *proxy, const namespace_state_t *state);

/* Appends thermoclineStatus's fields to reply. */
void proxy_append_status(proxy_t *proxy, bson_t *reply);

/* metrics.c: GET /metrics on metricsListen (src/metrics), on the loop. start
 * (after the loop exists) does nothing without metricsListen; stop closes the
 * listener (loop stopping); destroy frees what is left. The router reports each
 * finished request (router_private.h) and each reply it sends: its error codes. */
bool proxy_metrics_start(proxy_t *proxy, bson_error_t *error) TC_MUST_CHECK;
void proxy_metrics_stop(proxy_t *proxy);
void proxy_metrics_destroy(proxy_t *proxy);
void proxy_metrics_reply(proxy_t *proxy, const uint8_t *reply, size_t length);
/* After a reload swapped the namespace table (previous: the replaced one): each
 * namespace keeps its counters, a removed one's are dropped. */
void proxy_metrics_namespaces_changed(proxy_t *proxy, const proxy_generation_t *previous);
/* A write to state's namespace the fast tier acknowledged at time (reply: its body):
 * pending for the feeder until its applied time reaches it (feeder lag in events). */
void proxy_metrics_fast_write(proxy_t *proxy, const namespace_state_t *state, uint64_t time, const bson_t *reply);

/* router.c: the server's handle_on_loop callback. */
void router_handle(void *application, server_pending_t *pending, const server_request_t *request);

/* router_wait.c: reads waiting for the feeder (read-your-writes across tiers). resume
 * sends those whose namespace the feeder has caught up on, or fails those whose
 * feed stopped; expire fails those past readYourWritesWait; cancel fails them all
 * (shutdown). */
void router_resume_waits(proxy_t *proxy);
void router_expire_waits(proxy_t *proxy);
void router_cancel_waits(proxy_t *proxy);

/* recovery.c: a retry waits here until its tier's pool has found the primary again:
 * a probe (ping) through the pool succeeds, which takes a connection whose
 * handshake found the writable primary. done(context, true) then, or
 * done(context, false) at deadline_ms or at shutdown; done may be called before
 * this returns (after recovery_stop). One probe per tier at a time, repeated every
 * RECOVERY_PROBE_INTERVAL_MS while retries wait. */
typedef void (*recovery_fn)(void *context, bool recovered);
void recovery_wait(proxy_t *proxy, proxy_tier_t tier, int64_t deadline_ms, recovery_fn done, void *context);

/* Shutdown: every waiting retry's done(false), and the timer closes. */
void recovery_stop(proxy_t *proxy);

/* cluster_time.c: $clusterTime gossip across tiers that are replica sets of their
 * own, each with its own clock and signing keys. note records a tier's reply's
 * $clusterTime when it is the highest seen from that tier. prepare_request readies
 * a message to tier (mutable, changed in place): a client's $clusterTime becomes the
 * tier's own latest, and a readConcern afterClusterTime beyond the tier's latest
 * time is lowered to it; when the client's $clusterTime cannot be replaced in place
 * (the tier's is unknown, or of another size), *out_message is a copy of message
 * (with those edits, and the router's: a getMore's cursor id) with the tier's own
 * spliced in for it, or without it when the tier's is unknown (the caller
 * bson_free()s it), else NULL. prepare_reply
 * raises a tier's reply's $clusterTime to the highest of both tiers, in place;
 * append adds that highest one to a reply the proxy builds, unless present. */
void cluster_time_note(proxy_t *proxy, proxy_tier_t tier, const bson_t *reply_body);
void cluster_time_prepare_request(proxy_t *proxy, proxy_tier_t tier, uint8_t *message, size_t length,
                                  uint8_t **out_message, size_t *out_length);
void cluster_time_prepare_reply(proxy_t *proxy, uint8_t *message, size_t length);
void cluster_time_append(proxy_t *proxy, bson_t *body);
void cluster_time_cleanup(proxy_t *proxy);

/* member_route.c: which member of each tier a read goes to. A read (find,
 * aggregate without $out/$merge, count, distinct, inline mapReduce, explain of
 * those) outside a transaction, with a $readPreference other than primary, goes
 * to the member backend_pool_select() picks, once the tier's members are
 * discovered; other commands with a $readPreference are only checked against the
 * topology (FailedToSatisfyReadPreference 133, as mongos) and go to the primary.
 * An archive read that must see writes the feeder applied (read-your-writes, I5:
 * its namespace, or any tiered one for a pipeline reading others, had fast-tier
 * writes acknowledged through this proxy) reads the archive's primary: its
 * secondaries may not have replicated the feeder's writes yet. choose calls done
 * once, maybe before it returns, with member_ids[PROXY_TIER_COUNT] (0: the
 * primary) or the error to answer (bad $readPreference, 133; prefixed as mongos
 * prefixes a find's). */
typedef void (*member_route_fn)(void *context, const uint64_t *member_ids, const bson_error_t *error);
void member_route_choose(proxy_t *proxy, const fields_t *command_fields, const char *command_name,
                         const plan_decision_t *decision, const namespace_state_t *state, member_route_fn done,
                         void *context);

/* A read sent to member failed_member of tier failed (failure: a network error, or
 * a retryable reply's code name): the member is marked unknown until it answers
 * hello again, and another is chosen by the command's $readPreference, maybe the
 * primary. false (error set) when none can be. */
bool member_route_choose_again(proxy_t *proxy, const bson_t *command, proxy_tier_t tier, uint64_t failed_member,
                               const char *failure, uint64_t *out_member_id, bson_error_t *error) TC_MUST_CHECK;

/* A read sent to tier's primary failed (failure as above): when its $readPreference
 * lets a secondary answer (primaryPreferred, secondaryPreferred, nearest) and the
 * proxy's rules let it leave the primary (a read outside a transaction, not an
 * archive read that must see the feeder's writes), the primary is marked unknown
 * until it answers hello again and a secondary is chosen, as a driver selects a
 * server again for a retryable read. false when none is: the caller waits for the
 * primary, as for any read. */
bool member_route_leave_failed_primary(proxy_t *proxy, const bson_t *command, const plan_decision_t *decision,
                                       const namespace_state_t *state, proxy_tier_t tier, const char *failure,
                                       uint64_t *out_member_id);

/* Whether worker runs in this process now: configured here and holding its lease
 * (tier/lease.h); its progress is then in memory, else polled from the fast tier. */
bool proxy_worker_runs_here(proxy_t *proxy, tier_worker_t worker);

#endif
