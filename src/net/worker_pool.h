/* Private to src/net: a fixed group of worker threads (WiredTiger's thread group)
 * that runs server requests off the event loop. Jobs go in through one queue and
 * come back through another (unless finish completed them on the worker); the
 * pool never touches libuv, it only calls notify. */
#ifndef TC_NET_WORKER_POOL_H
#define TC_NET_WORKER_POOL_H

#include "net/server.h"

#include <stdatomic.h>

typedef struct worker_pool worker_pool_t;

/* One request on its way through the pool. The submitter owns the job memory and
 * must keep it alive until the pool hands the job back. */
typedef struct worker_job {
    struct worker_job *next; /* queue link; belongs to the pool while submitted */
    void *owner;             /* the submitter's object, untouched by the pool */
    server_request_t request;
    server_reply_t reply;    /* zeroed by submit, filled by the handler */
    /* A held reply (server_hold_reply): the worker and the releaser each give up
     * one; the second completes the job, whichever thread it is. */
    atomic_int hold_count;
} worker_job_t;

/* Called on a worker thread when a completed job is queued where none waited to
 * be taken (later ones join that batch), with the pool's completion lock held:
 * once the submitter has taken a job, notify for it has returned. It must not
 * block or call into the pool (uv_async_send is the intended use). */
typedef void (*worker_pool_notify_fn)(void *context);

/* Called on the worker thread once handle has filled job->reply: true when the
 * submitter finished the job right there (e.g. wrote the reply itself), so the
 * job is not queued as completed and notify is not called for it; the pool does
 * not touch the job again. May be NULL. */
typedef bool (*worker_pool_finish_fn)(worker_job_t *job);

/* Starts worker_count threads; each calls callbacks->worker_start first. Returns
 * NULL and fills error if a thread cannot start (those already started are
 * stopped). Free with worker_pool_destroy(). */
worker_pool_t *worker_pool_new(int worker_count, const server_callbacks_t *callbacks,
                               worker_pool_finish_fn finish, worker_pool_notify_fn notify,
                               void *notify_context, bson_error_t *error) TC_MUST_CHECK;

/* Queues job; a worker runs callbacks->handle on it, in submission order. */
void worker_pool_submit(worker_pool_t *pool, worker_job_t *job);

/* Whether no job is queued or running: a job submitted now must wake a worker.
 * A hint, read without a lock. */
bool worker_pool_is_idle(worker_pool_t *pool);

/* Marks job's reply held (server_hold_reply): handed back only once both the
 * worker that ran it and worker_pool_release_held() are done with it. */
void worker_pool_hold(worker_job_t *job);

/* The releaser's side of a held job; any thread, once. */
void worker_pool_release_held(worker_pool_t *pool, worker_job_t *job);

/* Removes and returns the completed jobs, oldest first, linked through next;
 * NULL when none. */
worker_job_t *worker_pool_take_completed(worker_pool_t *pool);

/* Lets queued jobs finish, calls callbacks->worker_stop on each worker thread and
 * joins them. Completed jobs not yet taken are dropped (their owners keep them).
 * Safe on NULL. */
void worker_pool_destroy(worker_pool_t *pool);

#endif
