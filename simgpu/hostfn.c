/* Host functions as a GPU runs them: cuLaunchHostFunc, cuStreamAddCallback
 * and graphs' host nodes return at once; the function runs on a thread of
 * the process's own once its stream has reached it, and the stream's later
 * work waits until it has returned (a host item in the lane, state.c).
 * Functions of one stream run in order; those of different streams in the
 * order their streams reach them, one at a time, as a driver's callback
 * thread runs them. A process without a thread of its own runs them in
 * the caller, once the stream is done. */
#include "sim.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

struct pending {
    struct pending *next;
    int lane;
    uint64_t count; /* the host item's */
    CUhostFn fn;
    CUstreamCallback cb; /* or this, told its stream */
    CUstream stream;
    void *data;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct pending *queue;
static int running;           /* the thread is there */

/* A function whose stream has reached it, taken off the queue. A stream's
 * later function is reached only once its earlier one has returned: that
 * one's item is before it in the lane. */
static struct pending *take_reached(void)
{
    for (struct pending **pp = &queue; *pp; pp = &(*pp)->next)
        if (sim_finished((*pp)->lane, (*pp)->count - 1)) {
            struct pending *p = *pp;
            *pp = p->next;
            return p;
        }
    return NULL;
}

static void *runner(void *arg)
{
    (void)arg;
    long idle_ns = 20000; /* looks again this soon, twice as late each time up to 1 ms */
    for (;;) {
        pthread_mutex_lock(&mu);
        while (!queue)
            pthread_cond_wait(&cv, &mu);
        struct pending *p = take_reached();
        pthread_mutex_unlock(&mu);
        if (!p) {
            struct timespec ts = {0, idle_ns};
            nanosleep(&ts, NULL);
            idle_ns = idle_ns < 500000 ? 2 * idle_ns : 1000000;
            continue;
        }
        idle_ns = 20000;
        if (p->cb)
            p->cb(p->stream, CUDA_SUCCESS, p->data);
        else
            p->fn(p->data);
        sim_host_release(p->lane, p->count);
        free(p);
    }
    return NULL;
}

/* Device work that waits for a condition of memory (a stream waiting for
 * a word the program or another stream writes): its place in the lane is
 * released by a thread of its own once the stream has reached it and
 * ready(arg) holds, so that host functions go on meanwhile. */
struct watched {
    struct watched *next;
    int lane;
    uint64_t count;
    int (*ready)(void *arg);
    void *arg; /* freed once ready */
};

static pthread_mutex_t wmu = PTHREAD_MUTEX_INITIALIZER;
static struct watched *watched;
static int watching; /* the thread is there */

static void *watcher(void *arg)
{
    (void)arg;
    long idle_ns = 20000;
    for (;;) {
        int released = 0;
        pthread_mutex_lock(&wmu);
        for (struct watched **pp = &watched; *pp;) {
            struct watched *w = *pp;
            if (sim_finished(w->lane, w->count - 1) && w->ready(w->arg)) {
                *pp = w->next;
                sim_host_release(w->lane, w->count);
                free(w->arg);
                free(w);
                released = 1;
            } else {
                pp = &w->next;
            }
        }
        pthread_mutex_unlock(&wmu);
        struct timespec ts = {0, idle_ns};
        nanosleep(&ts, NULL);
        idle_ns = released ? 20000 : idle_ns < 500000 ? 2 * idle_ns : 1000000;
    }
    return NULL;
}

static void after_fork_child(void)
{
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&cv, NULL);
    queue = NULL; /* the parent's, on its lanes */
    running = 0;
    pthread_mutex_init(&wmu, NULL);
    watched = NULL;
    watching = 0;
}

static void at_fork(void) { pthread_atfork(NULL, NULL, after_fork_child); }

/* A thread of the simulated driver's: detached, none of the program's
 * signals. 1 once started. */
static int start(void *(*fn)(void *))
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, at_fork);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int ok = pthread_create(&t, &at, fn, NULL) == 0;
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return ok;
}

/* An entry of size bytes (allocated) for a place in s's lane (*count)
 * that the thread fn (*running, under m) releases; NULL where there is
 * no such place. */
static void *place(struct sim_stream *s, pthread_mutex_t *m, int *running, void *(*fn)(void *), size_t size,
                   uint64_t *count)
{
    pthread_mutex_lock(m);
    if (!*running)
        *running = start(fn);
    int thread = *running;
    pthread_mutex_unlock(m);
    /* Not under m: a full lane waits here for the thread. */
    void *entry = thread ? malloc(size) : NULL;
    *count = entry ? sim_submit_host(s->lane) : 0;
    if (!*count) {
        free(entry);
        return NULL;
    }
    return entry;
}

int sim_host_wait_until(struct sim_stream *s, int (*ready)(void *arg), void *arg)
{
    uint64_t c;
    struct watched *w = place(s, &wmu, &watching, watcher, sizeof *w, &c);
    if (!w)
        return 0;
    *w = (struct watched){NULL, s->lane, c, ready, arg};
    s->last = c;
    pthread_mutex_lock(&wmu);
    w->next = watched;
    watched = w;
    pthread_mutex_unlock(&wmu);
    return 1;
}

/* Queues fn(data), or cb(stream, status, data), behind s's work. */
void sim_host_enqueue(struct sim_stream *s, CUhostFn fn, CUstreamCallback cb, CUstream stream, void *data)
{
    uint64_t c;
    struct pending *p = place(s, &mu, &running, runner, sizeof *p, &c);
    if (!p) {
        sim_wait(s->lane, s->last);
        if (cb)
            cb(stream, CUDA_SUCCESS, data);
        else
            fn(data);
        return;
    }
    *p = (struct pending){NULL, s->lane, c, fn, cb, stream, data};
    s->last = c;
    pthread_mutex_lock(&mu);
    p->next = queue;
    queue = p;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
}
