/* Sleeping on a word of memory both sides of a shm:// connection map
 * (remote/ring.h's host-function slots): a futex of the shared mapping. */
#ifndef FLEXGV_REMOTE_FUTEX_H
#define FLEXGV_REMOTE_FUTEX_H

#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps while *w is v, at most ms milliseconds (or until woken). */
static inline void fgr_futex_wait(uint32_t *w, uint32_t v, long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    syscall(SYS_futex, w, FUTEX_WAIT, v, &ts, NULL, 0);
}

static inline void fgr_futex_wake(uint32_t *w) { syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0); }

#endif
