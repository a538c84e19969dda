/* Compute caps: the share of a device's time this process's kernels may
 * occupy, even when the device is idle (the tenant's compute_max; enforced
 * per process, in the process).
 *
 * GPU time is measured from completions: after each launch an event without
 * timing is recorded on its stream, and the launch counts as busy from when
 * it was made (or the previous completion, if later) until its event is
 * seen complete. A token bucket per device earns cap x elapsed time, up to
 * a small burst, and pays for each completion; a launch waits while the
 * bucket cannot pay for what is already in flight: on the oldest event when
 * something is in flight, asleep otherwise. In-flight work is kept short so
 * that the debt a completion brings stays small; it is carried, so the
 * long-run share tends to the cap. Nothing is locked while waiting, and the
 * shim's own event calls never change what a launch returns. */
#include "memquota.h"

#include <pthread.h>
#include <string.h>

enum { RING = 64 };                   /* launches in flight per device, at most */
#define BURST_NS 5000000ll            /* credit an idle device may bank */
#define AHEAD_NS 2000000ll            /* expected work let ahead of completions */

struct launch {
    CUevent ev;
    uint64_t at; /* host time of the launch */
};

struct dev {
    pthread_mutex_t lock;
    int known;    /* cap read from the tenant */
    uint32_t cap; /* hundredths of a percent; 0: none */
    struct launch ring[RING];
    unsigned head, count;
    CUevent pool[RING]; /* completed events, to be recorded again */
    unsigned npool;
    int64_t credit;     /* ns of device time still allowed */
    uint64_t refilled;  /* when credit was last earned */
    uint64_t last_done; /* host time of the last completion */
    uint64_t avg;       /* moving average of one launch's busy time (ns); 0: none measured */
};

static struct dev devs[FG_NDEV] = {[0 ... FG_NDEV - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER}};

/* Async-signal-safe: a forked child has nothing in flight (and no thread
 * that could hold a lock). */
void fg_compute_after_fork(void)
{
    memset(devs, 0, sizeof devs);
    for (int i = 0; i < FG_NDEV; i++)
        devs[i].lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

static void earn(struct dev *d, uint64_t now)
{
    if (now > d->refilled)
        d->credit += (int64_t)((now - d->refilled) * d->cap / 10000);
    if (d->credit > BURST_NS)
        d->credit = BURST_NS;
    d->refilled = now;
}

/* Pays for the in-flight launches that have completed, oldest first. */
static void reap(struct dev *d, uint64_t now)
{
    fg_real_cuEventQuery query = REAL(cuEventQuery);
    while (d->count) {
        struct launch *l = &d->ring[d->head];
        if (query && query(l->ev) == CUDA_ERROR_NOT_READY)
            break;
        uint64_t start = l->at > d->last_done ? l->at : d->last_done;
        if (now > start) {
            uint64_t busy = now - start;
            d->credit -= (int64_t)busy;
            d->avg = d->avg ? (7 * d->avg + busy) / 8 : busy;
            d->last_done = now;
        }
        d->pool[d->npool++] = l->ev;
        d->head = (d->head + 1) % RING;
        d->count--;
    }
}

/* Work still queued: at least what the oldest launch has been running. */
static int64_t ahead(const struct dev *d, uint64_t now)
{
    if (!d->count)
        return 0;
    uint64_t since = d->ring[d->head].at > d->last_done ? d->ring[d->head].at : d->last_done;
    int64_t running = now > since ? (int64_t)(now - since) : 0;
    int64_t expected = (int64_t)(d->count * d->avg);
    return expected > running ? expected : running;
}

/* The device's state if the tenant caps it, locked. */
static struct dev *capped(int dev)
{
    if (dev < 0 || dev >= FG_NDEV)
        return NULL;
    struct dev *d = &devs[dev];
    pthread_mutex_lock(&d->lock);
    if (!d->known) {
        d->cap = fg_compute_max_of(dev);
        d->credit = BURST_NS;
        d->refilled = fg_now_ns();
        d->known = 1;
    }
    if (!d->cap) {
        pthread_mutex_unlock(&d->lock);
        return NULL;
    }
    return d;
}

/* Waits until the cap allows one more launch; returns d locked. Until one
 * launch has been measured, launches go one at a time. */
static void gate(struct dev *d)
{
    for (;;) {
        uint64_t now = fg_now_ns();
        earn(d, now);
        reap(d, now);
        int64_t queued = ahead(d, now);
        if (d->count < RING && queued < AHEAD_NS && d->credit > queued && (d->avg || !d->count))
            return;
        if (d->count) {
            CUevent ev = d->ring[d->head].ev;
            pthread_mutex_unlock(&d->lock);
            fg_real_cuEventSynchronize sync = REAL(cuEventSynchronize);
            CUstreamCaptureMode m = fg_relaxed_begin();
            if (sync)
                sync(ev);
            fg_relaxed_end(m);
        } else {
            /* Asleep until the bucket has earned back its debt. */
            uint64_t ns = (uint64_t)(-d->credit + 1) * 10000 / d->cap + 1;
            pthread_mutex_unlock(&d->lock);
            struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&d->lock);
    }
}

/* Puts a launch on s in flight; d is locked and unlocked here. */
static void track(struct dev *d, CUstream s, uint64_t at)
{
    CUevent ev = NULL;
    if (d->npool) {
        ev = d->pool[--d->npool];
    } else {
        fg_real_cuEventCreate create = REAL(cuEventCreate);
        if (!create || create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
            ev = NULL;
    }
    fg_real_cuEventRecord record = REAL(cuEventRecord);
    if (ev && record && record(ev, s) == CUDA_SUCCESS && d->count < RING) {
        d->ring[(d->head + d->count) % RING] = (struct launch){ev, at};
        d->count++;
    } else if (ev) {
        fg_real_cuEventDestroy_v2 destroy = REAL(cuEventDestroy_v2);
        if (destroy)
            destroy(ev);
    }
    pthread_mutex_unlock(&d->lock);
}

/* Launch through the cap: LAUNCH is the program's call on stream s. */
#define CAPPED(s, per_thread, LAUNCH)                                               \
    do {                                                                            \
        CUstream s_ = (per_thread) && (s) == NULL ? CU_STREAM_PER_THREAD : (s);     \
        struct dev *d_ = fg_stream_capturing(s_, 0) == 1 ? NULL : capped(fg_current_device()); \
        if (!d_)                                                                    \
            return LAUNCH;                                                          \
        gate(d_);                                                                   \
        pthread_mutex_unlock(&d_->lock);                                            \
        CUresult r_ = LAUNCH;                                                       \
        if (r_ != CUDA_SUCCESS)                                                     \
            return r_;                                                              \
        pthread_mutex_lock(&d_->lock);                                              \
        track(d_, s_, fg_now_ns());                                                 \
        return r_;                                                                  \
    } while (0)

CUresult fg_compute_cuLaunchKernel(fg_real_cuLaunchKernel next, CUfunction f, unsigned int gx, unsigned int gy,
                                   unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shared, CUstream s, void **params, void **extra)
{
    CAPPED(s, 0, next(f, gx, gy, gz, bx, by, bz, shared, s, params, extra));
}

CUresult fg_compute_cuLaunchKernel_ptsz(fg_real_cuLaunchKernel_ptsz next, CUfunction f, unsigned int gx,
                                        unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shared, CUstream s, void **params, void **extra)
{
    CAPPED(s, 1, next(f, gx, gy, gz, bx, by, bz, shared, s, params, extra));
}

CUresult fg_compute_cuLaunchKernelEx(fg_real_cuLaunchKernelEx next, const CUlaunchConfig *config, CUfunction f,
                                     void **params, void **extra)
{
    if (!config)
        return next(config, f, params, extra);
    CAPPED(config->hStream, 0, next(config, f, params, extra));
}

CUresult fg_compute_cuLaunchKernelEx_ptsz(fg_real_cuLaunchKernelEx_ptsz next, const CUlaunchConfig *config,
                                          CUfunction f, void **params, void **extra)
{
    if (!config)
        return next(config, f, params, extra);
    CAPPED(config->hStream, 1, next(config, f, params, extra));
}

CUresult fg_compute_cuLaunchCooperativeKernel(fg_real_cuLaunchCooperativeKernel next, CUfunction f, unsigned int gx,
                                              unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                                              unsigned int bz, unsigned int shared, CUstream s, void **params)
{
    CAPPED(s, 0, next(f, gx, gy, gz, bx, by, bz, shared, s, params));
}

CUresult fg_compute_cuLaunchCooperativeKernel_ptsz(fg_real_cuLaunchCooperativeKernel_ptsz next, CUfunction f,
                                                   unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                                   unsigned int by, unsigned int bz, unsigned int shared, CUstream s,
                                                   void **params)
{
    CAPPED(s, 1, next(f, gx, gy, gz, bx, by, bz, shared, s, params));
}

/* A graph launch is bracketed as a whole. */
CUresult fg_compute_cuGraphLaunch(fg_real_cuGraphLaunch next, CUgraphExec exec, CUstream s)
{
    CAPPED(s, 0, next(exec, s));
}

CUresult fg_compute_cuGraphLaunch_ptsz(fg_real_cuGraphLaunch_ptsz next, CUgraphExec exec, CUstream s)
{
    CAPPED(s, 1, next(exec, s));
}
