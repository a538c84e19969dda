/* The host copies of the staging areas over shm:// (stage.c), split among
 * the calling thread and two helpers when large: one core's memcpy, about
 * 8 GB/s between the program's pages and the area, bounds a staged copy,
 * where the GPU's copy runs at 50 GB/s. The helpers start at the first such
 * copy (as many as can), block every signal, and wait on a condition
 * between copies; a forked child, which has none of them, starts its own.
 * One copy at a time is split; another made meanwhile is the calling
 * thread's alone. */
#include "client.h"

#include <string.h>

#define HELPERS 2
#define SPLIT_MIN (1u << 20) /* smaller copies are not split */

static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER; /* the one copy split at a time */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static struct {
    char *dst;
    const char *src;
    size_t n, part;
    unsigned gen; /* bumped for each copy */
    int left;     /* helpers yet to finish it */
} job;
static int started; /* 1: helpers run, -1: none could start */
static int nhelpers;

static void *helper(void *arg)
{
    size_t i = (size_t)(uintptr_t)arg;
    unsigned seen = 0;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (job.gen == seen)
            pthread_cond_wait(&go, &lock);
        seen = job.gen;
        size_t at = i * job.part, k = at >= job.n ? 0 : (job.n - at < job.part ? job.n - at : job.part);
        char *dst = job.dst + at;
        const char *src = job.src + at;
        pthread_mutex_unlock(&lock);
        memcpy(dst, src, k);
        pthread_mutex_lock(&lock);
        if (--job.left == 0)
            pthread_cond_signal(&done);
    }
    return NULL;
}

static int start(void)
{
    if (started)
        return started > 0;
    for (size_t i = 1; i <= HELPERS; i++) {
        if (fgr_thread_start(helper, (void *)(uintptr_t)i, 64 << 10, "flexgv-copy"))
            break;
        nhelpers++;
    }
    started = nhelpers ? 1 : -1;
    return started > 0;
}

void fgr_copy(void *dst, const void *src, size_t n)
{
    if (n < SPLIT_MIN || pthread_mutex_trylock(&busy) != 0) {
        memcpy(dst, src, n);
        return;
    }
    pthread_mutex_lock(&lock);
    if (!start()) {
        pthread_mutex_unlock(&lock);
        pthread_mutex_unlock(&busy);
        memcpy(dst, src, n);
        return;
    }
    size_t part = (n / (size_t)(nhelpers + 1) + 63) & ~(size_t)63;
    job.dst = dst;
    job.src = src;
    job.n = n;
    job.part = part;
    job.left = nhelpers;
    job.gen++;
    pthread_cond_broadcast(&go);
    pthread_mutex_unlock(&lock);
    memcpy(dst, src, part);
    pthread_mutex_lock(&lock);
    while (job.left)
        pthread_cond_wait(&done, &lock);
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&busy);
}

void fgr_copy_forked(void)
{
    pthread_mutex_init(&busy, NULL);
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&go, NULL);
    pthread_cond_init(&done, NULL);
    memset(&job, 0, sizeof job);
    started = nhelpers = 0;
}
