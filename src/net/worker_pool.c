/* Worker threads for the server: a mutex+condvar queue of submitted jobs and a
 * mutex-protected list of completed ones, handed back through the notify hook
 * (one call per batch the submitter has not taken yet). */
#include "net/worker_pool.h"
#include "common/log.h"

#include "common/clock.h"

#include <pthread.h>
#include <string.h>

typedef struct worker_thread {
    worker_pool_t *pool;
    int index;
    pthread_t thread;
} worker_thread_t;

typedef struct worker_job_queue {
    worker_job_t *head;
    worker_job_t *tail;
} worker_job_queue_t;

struct worker_pool {
    server_callbacks_t callbacks;
    worker_pool_finish_fn finish;
    worker_pool_notify_fn notify;
    void *notify_context;

    pthread_mutex_t submitted_lock;
    pthread_cond_t submitted_ready;
    worker_job_queue_t submitted;
    bool stopping; /* under submitted_lock: workers exit once the queue is empty */
    int sleeping_count; /* under submitted_lock: workers waiting on submitted_ready */

    pthread_mutex_t completed_lock;
    worker_job_queue_t completed;

    worker_thread_t *threads;
    int started_count;

    /* Jobs submitted and not yet run to the end of handle: 0 when every worker
     * waits for work (worker_pool_is_idle). */
    atomic_int busy_count;
};

static void worker_job_queue_push(worker_job_queue_t *queue, worker_job_t *job)
{
    job->next = NULL;
    if (queue->tail == NULL) {
        queue->head = job;
    } else {
        queue->tail->next = job;
    }
    queue->tail = job;
}

static worker_job_t *worker_job_queue_pop(worker_job_queue_t *queue)
{
    worker_job_t *job = queue->head;
    if (job != NULL) {
        queue->head = job->next;
        if (queue->head == NULL) {
            queue->tail = NULL;
        }
        job->next = NULL;
    }
    return job;
}

/* Hands a job whose handler has run back to the submitter: finish, else the
 * completed queue. */
static void complete_job(worker_pool_t *pool, worker_job_t *job)
{
    if (pool->finish != NULL && pool->finish(job)) {
        return; /* the job may be gone already */
    }
    pthread_mutex_lock(&pool->completed_lock);
    bool first = pool->completed.head == NULL;
    worker_job_queue_push(&pool->completed, job);
    if (first) {
        /* Later completions join the batch the submitter has not taken yet:
         * one wake-up of the loop serves them all. */
        pool->notify(pool->notify_context);
    }
    pthread_mutex_unlock(&pool->completed_lock);
}

static void *worker_thread_main(void *argument)
{
    worker_thread_t *self = argument;
    worker_pool_t *pool = self->pool;
    void *state = NULL;
    tc_log_set_thread_name("worker");
    if (pool->callbacks.worker_start != NULL) {
        state = pool->callbacks.worker_start(pool->callbacks.application, self->index);
    }

    for (;;) {
        pthread_mutex_lock(&pool->submitted_lock);
        while (pool->submitted.head == NULL && !pool->stopping) {
            pool->sleeping_count++;
            pthread_cond_wait(&pool->submitted_ready, &pool->submitted_lock);
            pool->sleeping_count--;
        }
        worker_job_t *job = worker_job_queue_pop(&pool->submitted);
        pthread_mutex_unlock(&pool->submitted_lock);
        if (job == NULL) {
            break; /* stopping and nothing left to run */
        }

        pool->callbacks.handle(pool->callbacks.application, state, &job->request, &job->reply);
        atomic_fetch_sub_explicit(&pool->busy_count, 1, memory_order_relaxed);
        if (job->reply.held) {
            worker_pool_release_held(pool, job); /* the worker's side */
        } else {
            complete_job(pool, job);
        }
    }

    if (pool->callbacks.worker_stop != NULL) {
        pool->callbacks.worker_stop(pool->callbacks.application, state);
    }
    return NULL;
}

worker_pool_t *worker_pool_new(int worker_count, const server_callbacks_t *callbacks,
                               worker_pool_finish_fn finish, worker_pool_notify_fn notify,
                               void *notify_context, bson_error_t *error)
{
    if (worker_count < 1 || callbacks == NULL || callbacks->handle == NULL || notify == NULL) {
        tc_error_set(error, TC_ERR_BAD_VALUE,
                     "the worker pool needs at least one thread and a handle callback");
        return NULL;
    }
    worker_pool_t *pool = BSON_ALIGNED_ALLOC0(worker_pool_t);
    pool->callbacks = *callbacks;
    pool->finish = finish;
    pool->notify = notify;
    pool->notify_context = notify_context;
    pthread_mutex_init(&pool->submitted_lock, NULL);
    pthread_cond_init(&pool->submitted_ready, NULL);
    pthread_mutex_init(&pool->completed_lock, NULL);
    pool->threads = bson_malloc0((size_t)worker_count * sizeof *pool->threads);

    for (int index = 0; index < worker_count; index++) {
        worker_thread_t *thread = &pool->threads[index];
        thread->pool = pool;
        thread->index = index;
        int result = pthread_create(&thread->thread, NULL, worker_thread_main, thread);
        if (result != 0) {
            tc_error_set(error, TC_ERR_INTERNAL, "cannot start worker thread %d of %d: %s",
                         index + 1, worker_count, strerror(result));
            worker_pool_destroy(pool);
            return NULL;
        }
        pool->started_count++;
    }
    return pool;
}

void worker_pool_submit(worker_pool_t *pool, worker_job_t *job)
{
    memset(&job->reply, 0, sizeof job->reply);
    job->request.submitted_us = clock_monotonic_us();
    atomic_fetch_add_explicit(&pool->busy_count, 1, memory_order_relaxed);
    pthread_mutex_lock(&pool->submitted_lock);
    worker_job_queue_push(&pool->submitted, job);
    bool wake = pool->sleeping_count > 0;
    pthread_mutex_unlock(&pool->submitted_lock);
    if (wake) {
        /* After unlocking, so the woken worker does not block at once on the lock. */
        pthread_cond_signal(&pool->submitted_ready);
    }
}

bool worker_pool_is_idle(worker_pool_t *pool)
{
    return atomic_load_explicit(&pool->busy_count, memory_order_relaxed) == 0;
}

void worker_pool_hold(worker_job_t *job)
{
    atomic_store(&job->hold_count, 2);
    job->reply.held = true;
}

void worker_pool_release_held(worker_pool_t *pool, worker_job_t *job)
{
    if (atomic_fetch_sub(&job->hold_count, 1) == 1) {
        complete_job(pool, job);
    }
}

worker_job_t *worker_pool_take_completed(worker_pool_t *pool)
{
    pthread_mutex_lock(&pool->completed_lock);
    worker_job_t *jobs = pool->completed.head;
    pool->completed.head = NULL;
    pool->completed.tail = NULL;
    pthread_mutex_unlock(&pool->completed_lock);
    return jobs;
}

void worker_pool_destroy(worker_pool_t *pool)
{
    if (pool == NULL) {
        return;
    }
    pthread_mutex_lock(&pool->submitted_lock);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->submitted_ready);
    pthread_mutex_unlock(&pool->submitted_lock);
    for (int index = 0; index < pool->started_count; index++) {
        pthread_join(pool->threads[index].thread, NULL);
    }
    pthread_mutex_destroy(&pool->submitted_lock);
    pthread_cond_destroy(&pool->submitted_ready);
    pthread_mutex_destroy(&pool->completed_lock);
    bson_free(pool->threads);
    bson_free(pool);
}
