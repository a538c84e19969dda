/* Host functions over shm://, run as a GPU runs them (remote/ring.h): the
 * caller goes on, and the client's host-function thread runs the function
 * when the executor's gate says the stream got there; the stream waits
 * until it returns. Each function and its data get an id here; an id the
 * gate says was captured stays, since its graph runs it at every launch.
 * Over the sockets there is no memory both sides share, and functions run
 * on the calling thread after their stream's work (local.c). */
#include "client.h"
#include "../futex.h"
#include "../ring.h"

#include <stdlib.h>
#include <time.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct entry {
    CUhostFn fn;
    void *data;
    size_t next_free; /* 1 + the next free entry, 0: none */
} *tab;
static size_t ntab, free_head; /* free_head: 1 + the first free entry, 0: none */
static int thread_running;

static void release(size_t i)
{
    tab[i].fn = NULL;
    tab[i].next_free = free_head;
    free_head = i + 1;
}

/* Runs each function a gate reached, then sleeps until the next. */
static void *runner(void *arg)
{
    struct fgr_hostfn_area *a = &((struct fgr_ring *)arg)->m->hostfn;
    for (;;) {
        uint32_t seq = __atomic_load_n(&a->reached_seq, __ATOMIC_ACQUIRE);
        for (int i = 0; i < FGR_HOSTFN_SLOTS; i++) {
            struct fgr_hostfn_slot *s = &a->slot[i];
            if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != FGR_HOSTFN_REACHED)
                continue;
            uint64_t id = __atomic_load_n(&s->id, __ATOMIC_RELAXED), k = (id & ~FGR_HOSTFN_KEEP) - 1;
            pthread_mutex_lock(&mu);
            struct entry e = k < ntab ? tab[k] : (struct entry){0};
            if (e.fn && !(id & FGR_HOSTFN_KEEP))
                release((size_t)k);
            pthread_mutex_unlock(&mu);
            if (e.fn)
                e.fn(e.data);
            __atomic_store_n(&s->state, FGR_HOSTFN_DONE, __ATOMIC_RELEASE);
            fgr_futex_wake(&s->state);
        }
        fgr_futex_wait(&a->reached_seq, seq, 1000);
    }
    return NULL;
}

/* The runner (mu held), with a stack of the usual size: it runs the
 * program's functions. */
static int runner_start(struct fgr_ring *r)
{
    if (thread_running)
        return 0;
    if (fgr_thread_start(runner, r, 0, "flexgv-hostfn"))
        return -1;
    thread_running = 1;
    return 0;
}

/* More entries, all free (mu held): 0, or -1 without memory. */
static int grow(void)
{
    size_t n = ntab ? 2 * ntab : 64;
    struct entry *t = realloc(tab, n * sizeof *t);
    if (!t)
        return -1;
    tab = t;
    for (size_t i = n; i-- > ntab;)
        release(i);
    ntab = n;
    return 0;
}

CUresult fgr_hostfn_launch(CUstream s, CUhostFn fn, void *data, unsigned pt)
{
    struct fgr_ring *r = fgr_conn_ring();
    if (!r)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&mu);
    if (runner_start(r) || (!free_head && grow())) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_NOT_SUPPORTED; /* run by the caller, then */
    }
    size_t i = free_head - 1;
    free_head = tab[i].next_free;
    tab[i] = (struct entry){fn, data, 0};
    pthread_mutex_unlock(&mu);
    return fgrHostFn(s, (unsigned long long)i + 1, pt);
}

/* A graph's host node (graphs.c): an entry never released, since every
 * launch runs it; its id, flagged kept, for the executor's gate. */
CUresult fgr_hostfn_node(CUhostFn fn, void *data, unsigned long long *id)
{
    struct fgr_ring *r = fgr_conn_ring();
    if (!r)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&mu);
    if (runner_start(r) || (!free_head && grow())) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t i = free_head - 1;
    free_head = tab[i].next_free;
    tab[i] = (struct entry){fn, data, 0};
    pthread_mutex_unlock(&mu);
    *id = ((unsigned long long)i + 1) | FGR_HOSTFN_KEEP;
    return CUDA_SUCCESS;
}

/* A forked child has no runner, and its own connection. */
void fgr_hostfn_forked(void)
{
    pthread_mutex_init(&mu, NULL);
    thread_running = 0;
    free(tab);
    tab = NULL;
    ntab = free_head = 0;
}
