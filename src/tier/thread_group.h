/* A small group of worker threads with start, run and stop (WiredTiger's
 * WT_THREAD_GROUP): the feeder, the evictor and the warmer each run as one thread
 * of the group; stopping wakes every sleeper at once and joins them all. */
#ifndef TC_TIER_THREAD_GROUP_H
#define TC_TIER_THREAD_GROUP_H

#include "common/error.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct tier_group tier_group_t;

/* What one thread runs; it returns when tier_group_stopping() says so. */
typedef void (*tier_group_run_fn)(tier_group_t *group, void *context);

/* Free with tier_group_destroy(). */
tier_group_t *tier_group_new(void);

/* Starts one thread named name (at most 15 characters show in `top`) running
 * run(group, context). False with InternalError when the thread cannot start or
 * the group is full (8 threads). */
bool tier_group_start(tier_group_t *group, const char *name, tier_group_run_fn run, void *context,
                      bson_error_t *error) TC_MUST_CHECK;

/* True once tier_group_stop() has begun. Thread-safe. */
bool tier_group_stopping(tier_group_t *group);

/* Sleeps milliseconds, or less when the group stops; returns false when it is
 * stopping, so loops read `while (tier_group_sleep(group, 100)) {...}`. */
bool tier_group_sleep(tier_group_t *group, int64_t milliseconds);

/* A scope inside group, for code run by one of its threads that must be able to
 * stop alone (a worker whose lease was lost): tier_group_stopping() and
 * tier_group_sleep() on the scope answer for the scope or its group, whichever
 * stops first. No threads start in a scope. Free with tier_group_scope_destroy()
 * once its code has returned. */
tier_group_t *tier_group_scope_new(tier_group_t *parent);
void tier_group_scope_stop(tier_group_t *scope); /* thread-safe; wakes the scope's sleepers */
void tier_group_scope_destroy(tier_group_t *scope);

/* Asks every thread to stop, wakes the sleepers and joins them. Idempotent. */
void tier_group_stop(tier_group_t *group);

/* Stops the group if needed and frees it; safe on NULL. */
void tier_group_destroy(tier_group_t *group);

#endif
