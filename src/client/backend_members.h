/* Private to backend*.c: a tier's replica set members (backend_members.c), which
 * the tier's pool (backend.c) owns, and what backend.c offers it to open and watch
 * a member's pool. Loop thread only. */
#ifndef TC_CLIENT_BACKEND_MEMBERS_H
#define TC_CLIENT_BACKEND_MEMBERS_H

#include "client/backend.h"

typedef struct backend_members backend_members_t;

/* The members of tier's replica set; nothing opens before the first discover. Free
 * with backend_members_destroy() once backend_members_closed(). */
backend_members_t *backend_members_new(backend_pool_t *tier, uv_loop_t *loop, int connect_timeout_ms);

/* backend_pool_discover(): done once the first round of hellos is over. */
void backend_members_discover(backend_members_t *members, backend_discover_fn done, void *context);

/* Whether the first round of hellos is over (then backend_members_select() knows
 * every member the primary lists). */
bool backend_members_known(const backend_members_t *members);

bool backend_members_select(backend_members_t *members, const read_preference_t *preference,
                            uint64_t *out_member_id, bson_error_t *error) TC_MUST_CHECK;

/* The member's pool, NULL for an unknown id (0 is not a member here). */
backend_pool_t *backend_members_pool(backend_members_t *members, uint64_t member_id);

/* The cluster time up to which the member has applied its oplog, as its last hello
 * said (lastWrite.opTime); 0 when unknown. */
uint64_t backend_members_applied_time(backend_members_t *members, uint64_t member_id);

void backend_members_mark_failed(backend_members_t *members, uint64_t member_id, const char *reason);
void backend_members_append_status(const backend_members_t *members, bson_t *out);

/* Answers the discover waiters, closes the members' pools and the monitor's timer.
 * Called by backend.c before it closes the tier's own pool. */
void backend_members_close(backend_members_t *members);
bool backend_members_closed(const backend_members_t *members);

/* Safe on NULL. */
void backend_members_destroy(backend_members_t *members);

/* --- backend.c, for the above -------------------------------------------------------- */

/* A pool to the member at address ("host:port", "[v6]:port") whose handshake
 * accepts only a secondary of set_name; it uses tier's credentials and TLS context,
 * so tier must outlive it. NULL when address is not host:port. */
backend_pool_t *backend_pool_new_member(backend_pool_t *tier, const char *address, const char *set_name);

/* backend_pool_close(), failing what waits with reason. */
void backend_pool_close_with_reason(backend_pool_t *pool, const char *reason);

/* The round trip of the request whose reply is being handed to its done, in
 * microseconds (from its bytes' sending, not its wait in the queue): valid only
 * during that call. */
int64_t backend_pool_round_trip_us(const backend_pool_t *pool);

#endif
