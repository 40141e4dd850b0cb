/* Which member of each tier answers a read with a $readPreference: router.c's one
 * call (member_route_choose) and its retry on another member. The tiers' members
 * are discovered on first use and monitored by client/backend_members.c, and chosen by
 * client/read_preference.c's rules; this file adds the proxy's own rules (which commands
 * may leave the primary, and read-your-writes across tiers). */
#include "proxy/proxy_private.h"

#include "client/read_preference.h"

#include <string.h>

typedef struct member_choice {
    proxy_t *proxy;
    read_preference_t preference;
    proxy_tier_t tiers[PROXY_TIER_COUNT];
    size_t tier_count;
    size_t discovered;         /* tiers[0, discovered) have had their discovery */
    bool sends_to_members;     /* a read: it goes to the members chosen; else only checked */
    bool archive_from_primary; /* it must see the feeder's writes (I5) */
    bool query_prefix;         /* a find: mongos prefixes its errors */
    member_route_fn done;
    void *context;
} member_choice_t;

/* Whether an archive read must see writes the feeder applied to the archive's
 * primary: those its secondaries may not have yet. */
static bool reads_feeder_writes(const proxy_t *proxy, const plan_decision_t *decision, const namespace_state_t *state)
{
    if (state != NULL && state->last_write_time != 0) {
        return true;
    }
    for (size_t i = 0; decision->reads_other_namespaces && i < proxy->namespace_count; i++) {
        if (proxy->namespaces[i].last_write_time != 0) {
            return true;
        }
    }
    return false;
}

/* Whether a fast-tier member holds every copy of the warmer: a secondary that has
 * not applied the warmer's last copy (the cluster time it published when coverage
 * became valid) may miss documents a range read routed there expects, so the read
 * goes to the primary until the member's hello says it caught up. The latest time
 * of any namespace: simpler than one per namespace, and only for those seconds. */
static bool holds_warm_copies(proxy_t *proxy, proxy_tier_t tier, uint64_t member_id)
{
    uint64_t copy_time = 0;
    for (size_t i = 0; tier == PROXY_TIER_FAST && member_id != 0 && i < proxy->namespace_count; i++) {
        uint64_t time = proxy->namespaces[i].progress.warm_copy_time;
        copy_time = time > copy_time ? time : copy_time;
    }
    return copy_time == 0 || backend_pool_member_applied_time(proxy->tiers[tier], member_id) >= copy_time;
}

/* Writes, $out/$merge and transactions stay on the primary, as on a mongos. */
static bool may_leave_primary(const plan_decision_t *decision)
{
    return decision->kind == PLAN_KIND_READ && !decision->writes_output && !decision->in_transaction;
}

static void finish_choice(member_choice_t *choice)
{
    uint64_t member_ids[PROXY_TIER_COUNT] = {0};
    bson_error_t error;
    bool ok = true;
    for (size_t i = 0; i < choice->tier_count && ok; i++) {
        proxy_tier_t tier = choice->tiers[i];
        uint64_t member_id;
        ok = backend_pool_select(choice->proxy->tiers[tier], &choice->preference, &member_id, &error);
        if (ok && choice->sends_to_members && !(tier == PROXY_TIER_ARCHIVE && choice->archive_from_primary) &&
            holds_warm_copies(choice->proxy, tier, member_id)) {
            member_ids[tier] = member_id;
        }
    }
    if (!ok && choice->query_prefix) {
        tc_error_prefix(&error, "Encountered non-retryable error during query :: caused by :: ");
    }
    member_route_fn done = choice->done;
    void *context = choice->context;
    read_preference_cleanup(&choice->preference);
    bson_free(choice);
    done(context, ok ? member_ids : NULL, ok ? NULL : &error);
}

/* Discovers each tier's members in turn (at once when known), then chooses. */
static void discover_next(void *context)
{
    member_choice_t *choice = context;
    if (choice->discovered < choice->tier_count) {
        proxy_tier_t tier = choice->tiers[choice->discovered++];
        backend_pool_discover(choice->proxy->tiers[tier], discover_next, choice);
        return;
    }
    finish_choice(choice);
}

void member_route_choose(proxy_t *proxy, const fields_t *command_fields, const char *command_name,
                         const plan_decision_t *decision, const namespace_state_t *state, member_route_fn done,
                         void *context)
{
    static const uint64_t primaries[PROXY_TIER_COUNT] = {0};
    const bson_t *command = command_fields->document;
    bson_error_t error;
    if ((decision->kind != PLAN_KIND_READ && decision->kind != PLAN_KIND_OTHER) ||
        !fields_has(command_fields, "$readPreference")) {
        done(context, primaries, NULL);
        return;
    }
    member_choice_t *choice = bson_malloc0(sizeof *choice);
    if (!read_preference_parse(command, &choice->preference, &error)) {
        read_preference_cleanup(&choice->preference);
        bson_free(choice);
        done(context, NULL, &error);
        return;
    }
    if (decision->route == PLAN_ROUTE_FAST || decision->route == PLAN_ROUTE_FAST_THEN_ARCHIVE) {
        choice->tiers[choice->tier_count++] = PROXY_TIER_FAST;
    }
    if (decision->route == PLAN_ROUTE_ARCHIVE || decision->route == PLAN_ROUTE_FAST_THEN_ARCHIVE) {
        choice->tiers[choice->tier_count++] = PROXY_TIER_ARCHIVE;
    }
    if (choice->preference.mode == READ_PREFERENCE_PRIMARY || choice->tier_count == 0) {
        read_preference_cleanup(&choice->preference);
        bson_free(choice);
        done(context, primaries, NULL);
        return;
    }
    choice->proxy = proxy;
    choice->sends_to_members = may_leave_primary(decision);
    choice->archive_from_primary = reads_feeder_writes(proxy, decision, state);
    choice->query_prefix = strcmp(command_name, "find") == 0;
    choice->done = done;
    choice->context = context;
    discover_next(choice);
}

bool member_route_choose_again(proxy_t *proxy, const bson_t *command, proxy_tier_t tier, uint64_t failed_member,
                               const char *failure, uint64_t *out_member_id, bson_error_t *error)
{
    read_preference_t preference;
    backend_pool_member_failed(proxy->tiers[tier], failed_member, failure);
    bool ok = read_preference_parse(command, &preference, error) &&
              backend_pool_select(proxy->tiers[tier], &preference, out_member_id, error);
    read_preference_cleanup(&preference);
    if (ok && !holds_warm_copies(proxy, tier, *out_member_id)) {
        *out_member_id = 0;
    }
    return ok;
}

bool member_route_leave_failed_primary(proxy_t *proxy, const bson_t *command, const plan_decision_t *decision,
                                       const namespace_state_t *state, proxy_tier_t tier, const char *failure,
                                       uint64_t *out_member_id)
{
    read_preference_t preference;
    bson_error_t error;
    *out_member_id = 0;
    if (!may_leave_primary(decision) || (tier == PROXY_TIER_ARCHIVE && reads_feeder_writes(proxy, decision, state)) ||
        !bson_has_field(command, "$readPreference")) {
        return false;
    }
    bool leaves = read_preference_parse(command, &preference, &error) &&
                  preference.mode != READ_PREFERENCE_PRIMARY && preference.mode != READ_PREFERENCE_SECONDARY;
    if (leaves) {
        backend_pool_member_failed(proxy->tiers[tier], 0, failure);
        leaves = backend_pool_select(proxy->tiers[tier], &preference, out_member_id, &error) && *out_member_id != 0 &&
                 holds_warm_copies(proxy, tier, *out_member_id);
    }
    read_preference_cleanup(&preference);
    if (!leaves) {
        *out_member_id = 0;
    }
    return leaves;
}
