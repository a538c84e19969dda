/* Module images kept on the server's disk by their SHA-256 (flexgv serve
 * --module-cache DIR, one directory per tenant): a client across a network
 * asks for an image to be kept when it sends it; the handshake of later
 * connections lists what is kept, and their clients send the hash instead
 * of the bytes. Keeping is best effort: an image that cannot be written is
 * said once and simply sent again next time; a folder holds at most 65536
 * images and --module-cache-max bytes (8 GiB). Only an image the driver
 * loaded is kept. A file is named by the hash the executor computed over
 * what it received, and written whole before it is renamed into place, the
 * folder locked meanwhile (flock: the executors of a tenant count its room
 * one at a time, and a writer killed midway leaves its lock with it; its
 * partial file is removed by the next). */
#include "executor.h"
#include "../sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir; /* NULL: nothing is kept */
static uint64_t kept_max = 8ull << 30;

void fgr_images_dir(const char *d) { dir = d && *d ? d : NULL; }

int fgr_images_max(const char *bytes)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(bytes, &end, 10);
    if (errno || end == bytes || *end || bytes[0] == '-')
        return -1;
    kept_max = v;
    return 0;
}

static void path_of(const uint8_t h[32], char *path, size_t cap)
{
    int k = snprintf(path, cap, "%s/", dir);
    for (int i = 0; i < 32 && k + 2 < (int)cap; i++, k += 2)
        snprintf(path + k, cap - (size_t)k, "%02x", h[i]);
}

static int hex_name(const char *s, uint8_t h[32])
{
    if (strlen(s) != 64)
        return 0;
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (!strchr("0123456789abcdef", s[2 * i]) || !strchr("0123456789abcdef", s[2 * i + 1]) ||
            sscanf(s + 2 * i, "%2x", &v) != 1)
            return 0;
        h[i] = (uint8_t)v;
    }
    return 1;
}

void fgr_images_hello(struct fgr_buf *w)
{
    uint8_t(*kept)[32] = NULL;
    uint32_t n = 0, cap = 0;
    DIR *d = dir ? opendir(dir) : NULL;
    for (struct dirent *e; d && n < FGR_MAX_KEPT_IMAGES && (e = readdir(d));) {
        uint8_t h[32];
        if (!hex_name(e->d_name, h))
            continue;
        if (n == cap) {
            void *g = realloc(kept, (size_t)(cap = cap ? 2 * cap : 64) * 32);
            if (!g)
                break;
            kept = g;
        }
        memcpy(kept[n++], h, 32);
    }
    if (d)
        closedir(d);
    fgr_put_u32(w, n);
    for (uint32_t i = 0; i < n; i++)
        fgr_put_bytes(w, kept[i], 32);
    free(kept);
}

/* Whether n more bytes fit in the folder (d, locked): at most
 * FGR_MAX_KEPT_IMAGES images and kept_max bytes, so that a tenant's clients
 * cannot fill the server's disk. A partial file left by a writer that died
 * is removed: nobody else writes while the folder is locked. */
static int room_for(int d, uint64_t n)
{
    DIR *it = fdopendir(dup(d));
    if (!it)
        return 0;
    uint64_t count = 0, bytes = n;
    struct stat st;
    for (struct dirent *e; (e = readdir(it));) {
        uint8_t h[32];
        size_t len = strlen(e->d_name);
        if (len > 4 && !strcmp(e->d_name + len - 4, ".tmp"))
            unlinkat(d, e->d_name, 0);
        else if (hex_name(e->d_name, h) && fstatat(d, e->d_name, &st, 0) == 0) {
            count++;
            bytes += (uint64_t)st.st_size;
        }
    }
    closedir(it);
    return count < FGR_MAX_KEPT_IMAGES && bytes <= kept_max;
}

void fgr_image_keep(const void *p, uint64_t n)
{
    static int said, full;
    if (!dir)
        return;
    uint8_t h[32];
    char path[4096], tmp[4200];
    fgr_sha256(p, (size_t)n, h);
    path_of(h, path, sizeof path);
    if (access(path, F_OK) == 0)
        return;
    int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0 || flock(d, LOCK_EX) != 0) {
        if (!said++)
            fgr_logf("cannot keep a module image in %s: %s (images are sent whole instead)", dir, strerror(errno));
        if (d >= 0)
            close(d);
        return;
    }
    if (access(path, F_OK) == 0 || !room_for(d, n)) {
        if (access(path, F_OK) != 0 && !full++)
            fgr_logf("%s holds %u images or %llu bytes: no more are kept", dir, FGR_MAX_KEPT_IMAGES,
                     (unsigned long long)kept_max);
        close(d);
        return;
    }
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int ok = fd >= 0 && fgr_write_all(fd, p, (size_t)n) == 0;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (ok && rename(tmp, path) == 0) {
        close(d);
        return;
    }
    int e = errno;
    if (fd >= 0)
        unlink(tmp);
    close(d);
    if (!said++)
        fgr_logf("cannot keep a module image in %s: %s (images are sent whole instead)", dir, strerror(e));
}

void *fgr_image_kept(const uint8_t h[32], uint64_t n, struct fgr_req *q)
{
    char path[4096];
    if (!dir)
        return NULL;
    path_of(h, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    void *p = NULL;
    if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == n && n <= FGR_MAX_BUF &&
        (p = fgr_own(q, malloc((size_t)n))) != NULL && fgr_read_all(fd, p, (size_t)n) != 0)
        p = NULL;
    if (fd >= 0)
        close(fd);
    if (!p)
        fgr_logf("a module image the client named by its hash is not kept here (%s): answered CUDA_ERROR_INVALID_IMAGE", path);
    return p;
}
