/* The tier workers' thread group: pthreads, one stop flag, one condition
 * variable every sleeper waits on so that a stop wakes them all at once. */
#include "tier/thread_group.h"
#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define GROUP_MAX_THREADS 8

typedef struct group_thread {
    tier_group_t *group;
    tier_group_run_fn run;
    void *context;
    pthread_t thread;
    char name[16];
} group_thread_t;

struct tier_group {
    pthread_mutex_t mutex;
    pthread_cond_t wake; /* signalled by tier_group_stop */
    atomic_bool stopping;
    group_thread_t threads[GROUP_MAX_THREADS];
    int thread_count;
    bool joined;
    /* A scope (tier_group_scope_new): no threads of its own; it sleeps on its
     * parent's condition variable and stops with it. */
    tier_group_t *parent;
};

/* The group whose mutex and condition variable a scope shares. */
static tier_group_t *owner_of(tier_group_t *group)
{
    return group->parent != NULL ? group->parent : group;
}

tier_group_t *tier_group_new(void)
{
    tier_group_t *group = bson_malloc0(sizeof *group);
    pthread_condattr_t attributes;
    pthread_mutex_init(&group->mutex, NULL);
    /* Sleeps measure monotonic time: a wall-clock jump must not stall a worker. */
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&group->wake, &attributes);
    pthread_condattr_destroy(&attributes);
    atomic_init(&group->stopping, false);
    return group;
}

static void *thread_main(void *argument)
{
    group_thread_t *thread = argument;
    pthread_setname_np(pthread_self(), thread->name);
    tc_log_set_thread_name(thread->name); /* the json log's ctx: "tc-feeder", "tc-warmer"... */
    thread->run(thread->group, thread->context);
    return NULL;
}

bool tier_group_start(tier_group_t *group, const char *name, tier_group_run_fn run, void *context,
                      bson_error_t *error)
{
    if (group->thread_count >= GROUP_MAX_THREADS) {
        return tc_error_set(error, TC_ERR_INTERNAL, "cannot start worker %s: the thread group is full", name);
    }
    group_thread_t *thread = &group->threads[group->thread_count];
    thread->group = group;
    thread->run = run;
    thread->context = context;
    snprintf(thread->name, sizeof thread->name, "%s", name);
    int result = pthread_create(&thread->thread, NULL, thread_main, thread);
    if (result != 0) {
        return tc_error_set(error, TC_ERR_INTERNAL, "cannot start worker thread %s: %s", name, strerror(result));
    }
    group->thread_count++;
    return true;
}

bool tier_group_stopping(tier_group_t *group)
{
    return atomic_load(&group->stopping) || (group->parent != NULL && atomic_load(&group->parent->stopping));
}

tier_group_t *tier_group_scope_new(tier_group_t *parent)
{
    tier_group_t *scope = bson_malloc0(sizeof *scope);
    scope->parent = parent;
    atomic_init(&scope->stopping, false);
    return scope;
}

void tier_group_scope_stop(tier_group_t *scope)
{
    tier_group_t *owner = owner_of(scope);
    pthread_mutex_lock(&owner->mutex);
    atomic_store(&scope->stopping, true);
    pthread_cond_broadcast(&owner->wake); /* its sleepers wake; the others sleep on */
    pthread_mutex_unlock(&owner->mutex);
}

void tier_group_scope_destroy(tier_group_t *scope)
{
    bson_free(scope);
}

bool tier_group_sleep(tier_group_t *group, int64_t milliseconds)
{
    if (milliseconds <= 0) {
        return !tier_group_stopping(group);
    }
    struct timespec deadline = clock_deadline_after_ms(CLOCK_MONOTONIC, milliseconds);
    tier_group_t *owner = owner_of(group);
    pthread_mutex_lock(&owner->mutex);
    while (!tier_group_stopping(group)) {
        if (pthread_cond_timedwait(&owner->wake, &owner->mutex, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    pthread_mutex_unlock(&owner->mutex);
    return !tier_group_stopping(group);
}

void tier_group_stop(tier_group_t *group)
{
    pthread_mutex_lock(&group->mutex);
    atomic_store(&group->stopping, true);
    pthread_cond_broadcast(&group->wake);
    pthread_mutex_unlock(&group->mutex);
    if (!group->joined) {
        for (int i = 0; i < group->thread_count; i++) {
            pthread_join(group->threads[i].thread, NULL);
        }
        group->joined = true;
    }
}

void tier_group_destroy(tier_group_t *group)
{
    if (group == NULL) {
        return;
    }
    tier_group_stop(group);
    pthread_cond_destroy(&group->wake);
    pthread_mutex_destroy(&group->mutex);
    bson_free(group);
}
