/* User objects: a program's resource a graph holds references to, whose
 * destructor runs once the last reference goes (cuUserObjectCreate). A
 * graph, its clones and its executables each hold their own references;
 * an executable lets its references go when destroyed (its launches'
 * effects are made when enqueued here, so none is in flight). Destructors
 * run on the thread that lets the last reference go, after the driver's
 * locks are released (a driver runs them on a thread of its own; either is
 * allowed with CU_USER_OBJECT_NO_DESTRUCTOR_SYNC, the one flag taken). */
#include "sim.h"

#include <pthread.h>
#include <stdlib.h>

#define UOBJ_MAGIC 0x554f424au

struct sim_uobj {
    uint32_t magic;
    unsigned refs;
    void *ptr;
    CUhostFn destroy;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static struct sim_uobj *as_uobj(CUuserObject h)
{
    struct sim_uobj *o = (struct sim_uobj *)h;
    return o && o->magic == UOBJ_MAGIC ? o : NULL;
}

/* Takes count references from o (mu held): o when that was its last, to
 * be destroyed by the caller once it let mu go. */
static struct sim_uobj *drop_locked(struct sim_uobj *o, unsigned count)
{
    o->refs -= count;
    if (o->refs)
        return NULL;
    o->magic = 0;
    return o;
}

static void destroyed(struct sim_uobj *o)
{
    if (o) {
        o->destroy(o->ptr);
        free(o);
    }
}

SIM_EXPORT CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                                       unsigned int initialRefcount, unsigned int flags)
{
    if (!object_out || !destroy || !initialRefcount || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_uobj *o = malloc(sizeof *o);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *o = (struct sim_uobj){UOBJ_MAGIC, initialRefcount, ptr, destroy};
    *object_out = (CUuserObject)o;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuUserObjectRetain(CUuserObject object, unsigned int count)
{
    pthread_mutex_lock(&mu);
    struct sim_uobj *o = as_uobj(object);
    CUresult r = !o || !count || o->refs > UINT32_MAX - count ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        o->refs += count;
    pthread_mutex_unlock(&mu);
    return r;
}

/* More references than the program holds are refused (a driver's behaviour
 * is undefined there). */
SIM_EXPORT CUresult cuUserObjectRelease(CUuserObject object, unsigned int count)
{
    pthread_mutex_lock(&mu);
    struct sim_uobj *o = as_uobj(object), *gone = NULL;
    CUresult r = !o || !count || count > o->refs ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        gone = drop_locked(o, count);
    pthread_mutex_unlock(&mu);
    destroyed(gone);
    return r;
}

/* ---- a graph's or an executable's references ---- */

static struct sim_uref *find(struct sim_urefs *l, struct sim_uobj *o)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].o == o)
            return &l->v[i];
    return NULL;
}

/* count more of o's references in l (mu held); take: the program's own,
 * moved (else new ones). */
static CUresult hold_locked(struct sim_urefs *l, struct sim_uobj *o, unsigned count, int take)
{
    if (take ? count > o->refs : o->refs > UINT32_MAX - count)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_uref *u = find(l, o);
    if (!u) {
        struct sim_uref *v = realloc(l->v, (l->n + 1) * sizeof *v);
        if (!v)
            return CUDA_ERROR_OUT_OF_MEMORY;
        l->v = v;
        u = &l->v[l->n++];
        *u = (struct sim_uref){o, 0};
    }
    u->count += count;
    if (!take)
        o->refs += count;
    return CUDA_SUCCESS;
}

CUresult sim_urefs_hold(struct sim_urefs *l, CUuserObject object, unsigned count, unsigned flags)
{
    if (!count || (flags & ~(unsigned)CU_GRAPH_USER_OBJECT_MOVE))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct sim_uobj *o = as_uobj(object);
    CUresult r = o ? hold_locked(l, o, count, flags == CU_GRAPH_USER_OBJECT_MOVE) : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult sim_urefs_let_go(struct sim_urefs *l, CUuserObject object, unsigned count)
{
    pthread_mutex_lock(&mu);
    struct sim_uobj *o = as_uobj(object), *gone = NULL;
    struct sim_uref *u = o ? find(l, o) : NULL;
    CUresult r = !u || !count || count > u->count ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
        u->count -= count;
        gone = drop_locked(o, count);
        if (!u->count)
            *u = l->v[--l->n];
    }
    pthread_mutex_unlock(&mu);
    destroyed(gone);
    return r;
}

CUresult sim_urefs_copy(struct sim_urefs *to, const struct sim_urefs *from)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < from->n && r == CUDA_SUCCESS; i++)
        r = hold_locked(to, from->v[i].o, from->v[i].count, 0);
    pthread_mutex_unlock(&mu);
    return r;
}

void sim_urefs_free(struct sim_urefs *l)
{
    pthread_mutex_lock(&mu);
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        if (drop_locked(l->v[i].o, l->v[i].count))
            l->v[n++].o = l->v[i].o; /* the last reference: destroyed below */
    pthread_mutex_unlock(&mu);
    for (size_t i = 0; i < n; i++)
        destroyed(l->v[i].o);
    free(l->v);
    *l = (struct sim_urefs){0};
}
