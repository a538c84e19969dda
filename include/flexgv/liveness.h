/* Liveness, one scheme for every shared region (tenant files, trace
 * regions, the simulated GPU's state): a process holds an OFD write lock on
 * one byte of the region's file per slot it owns. The kernel drops the lock
 * when the last descriptor of that open file description closes, so when
 * the process dies, at any instruction and in any PID namespace. A slot
 * whose byte nobody locks belongs to nobody alive. Other processes' locks
 * are seen with F_OFD_GETLK or by trying to take the lock; a descriptor's
 * own locks never conflict with it. */
#ifndef FLEXGV_LIVENESS_H
#define FLEXGV_LIVENESS_H

#include <fcntl.h>
#include <sys/types.h>

/* Takes (F_WRLCK) or drops (F_UNLCK) the lock on byte off; 0 on success,
 * -1 with errno EAGAIN when another open file description holds it. */
static inline int fg_lock_byte(int fd, off_t off, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = off, .l_len = 1};
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* Whether another open file description holds a lock on byte off. */
static inline int fg_byte_held(int fd, off_t off)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = off, .l_len = 1};
    return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

#endif
