/* Frame encoding and decoding shared by the client and the executor. */
#include "wire.h"
#include "flexgv/pointer_attrs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int fgr_reserve(struct fgr_buf *b, size_t n)
{
    if (b->oom)
        return -1;
    if (b->tail) { /* something follows the tail: it becomes part of p */
        const void *t = b->tail;
        size_t k = b->tail_len;
        b->tail = NULL;
        b->tail_len = 0;
        fgr_put_bytes(b, t, k);
        if (b->oom)
            return -1;
    }
    if (n > FGR_MAX_FRAME || b->len + n > (size_t)FGR_MAX_FRAME + 4) {
        b->oom = 1;
        return -1;
    }
    if (b->len + n <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void fgr_put_bytes(struct fgr_buf *b, const void *p, size_t n)
{
    if (n == 0 || fgr_reserve(b, n))
        return;
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_le(struct fgr_buf *b, uint64_t v, int n)
{
    uint8_t x[8];
    for (int i = 0; i < n; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    fgr_put_bytes(b, x, (size_t)n);
}

void fgr_put_u8(struct fgr_buf *b, uint8_t v) { put_le(b, v, 1); }
void fgr_put_u16(struct fgr_buf *b, uint16_t v) { put_le(b, v, 2); }
void fgr_put_u32(struct fgr_buf *b, uint32_t v) { put_le(b, v, 4); }
void fgr_put_u64(struct fgr_buf *b, uint64_t v) { put_le(b, v, 8); }

void fgr_put_buf(struct fgr_buf *b, const void *p, uint64_t n)
{
    fgr_put_u8(b, p != NULL);
    if (!p)
        return;
    fgr_put_u64(b, n);
    if (n > FGR_MAX_BUF) {
        b->oom = 1;
        return;
    }
    if (b->by_ref && n >= FGR_BY_REF_MIN && !b->oom) {
        if (b->len + n > (size_t)FGR_MAX_FRAME + 4) {
            b->oom = 1;
            return;
        }
        b->tail = p;
        b->tail_len = (size_t)n;
        return;
    }
    fgr_put_bytes(b, p, (size_t)n);
}

int fgr_buf_write(const struct fgr_buf *b, int (*write)(const void *, size_t))
{
    if (write(b->p, b->len))
        return -1;
    return b->tail ? write(b->tail, b->tail_len) : 0;
}

void fgr_put_str(struct fgr_buf *b, const char *s)
{
    fgr_put_buf(b, s, s ? strlen(s) + 1 : 0);
}

void fgr_finish_frame(struct fgr_buf *b)
{
    uint32_t n = (uint32_t)(b->len - 4 + b->tail_len);
    for (int i = 0; i < 4; i++)
        b->p[i] = (uint8_t)(n >> (8 * i));
}

static uint64_t get_le(struct fgr_rd *r, int n)
{
    if (r->bad || r->left < (size_t)n) {
        r->bad = 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    r->left -= (size_t)n;
    return v;
}

uint8_t fgr_get_u8(struct fgr_rd *r) { return (uint8_t)get_le(r, 1); }
uint16_t fgr_get_u16(struct fgr_rd *r) { return (uint16_t)get_le(r, 2); }
uint32_t fgr_get_u32(struct fgr_rd *r) { return (uint32_t)get_le(r, 4); }
uint64_t fgr_get_u64(struct fgr_rd *r) { return get_le(r, 8); }

const void *fgr_get_bytes(struct fgr_rd *r, uint64_t n)
{
    if (r->bad || n > r->left) {
        r->bad = 1;
        return NULL;
    }
    const void *p = r->p;
    r->p += n;
    r->left -= (size_t)n;
    return p;
}

const char *fgr_get_cstr(struct fgr_rd *r)
{
    if (!fgr_get_u8(r))
        return NULL;
    uint64_t n = fgr_get_u64(r);
    if (n == 0 || n > FGR_MAX_STR) {
        r->bad = 1;
        return NULL;
    }
    const char *s = fgr_get_bytes(r, n);
    if (!s || s[n - 1] != '\0' || memchr(s, '\0', n) != s + n - 1) {
        r->bad = 1;
        return NULL;
    }
    return s;
}

int fgr_write_all(int fd, const void *p, size_t n)
{
    const uint8_t *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == ENOTSOCK) /* a file */
            w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int fgr_read_all(int fd, void *p, size_t n)
{
    uint8_t *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            errno = 0;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static uint64_t rd_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#define FATBIN_MAGIC 0xba55ed50u

uint64_t fgr_image_size(const void *image, uint64_t max)
{
    const uint8_t *p = image;
    if (!p)
        return 0;
    /* Fatbinary: u32 magic, u16 version, u16 header size, u64 payload size. */
    if (max >= 16 && rd_le(p, 4) == FATBIN_MAGIC) {
        uint64_t hdr = rd_le(p + 6, 2), body = rd_le(p + 8, 8);
        if (hdr < 16 || body > FGR_MAX_BUF)
            return 0;
        return hdr + body <= max ? hdr + body : 0;
    }
    /* 64-bit ELF: it ends with its section or program header table. */
    if (max >= 64 && memcmp(p, "\177ELF", 4) == 0) {
        if (p[4] != 2)
            return 0;
        uint64_t phoff = rd_le(p + 0x20, 8), shoff = rd_le(p + 0x28, 8);
        uint64_t phsz = rd_le(p + 0x36, 2) * rd_le(p + 0x38, 2), shsz = rd_le(p + 0x3a, 2) * rd_le(p + 0x3c, 2);
        if (phoff > FGR_MAX_BUF || shoff > FGR_MAX_BUF)
            return 0;
        uint64_t end = phoff + phsz > shoff + shsz ? phoff + phsz : shoff + shsz;
        if (end < 64)
            end = 64;
        return end <= max ? end : 0;
    }
    /* Text (PTX, or the simulated GPU's modules): up to its NUL. */
    const uint8_t *nul = memchr(p, '\0', (size_t)(max < FGR_MAX_BUF ? max : FGR_MAX_BUF));
    return nul ? (uint64_t)(nul - p) + 1 : 0;
}

uint64_t fgr_mempool_attr_bytes(int attr)
{
    switch (attr) {
    case 1: /* REUSE_FOLLOW_EVENT_DEPENDENCIES */
    case 2: /* REUSE_ALLOW_OPPORTUNISTIC */
    case 3: /* REUSE_ALLOW_INTERNAL_DEPENDENCIES */
        return sizeof(int);
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        return sizeof(cuuint64_t);
    }
    return FGR_MAX_BUF + 1;
}

/* The bytes cuPointerGetAttribute writes for an attribute; too many for
 * one it does not know, which refuses it. */
uint64_t fgr_pointer_attr_bytes(int attr)
{
    size_t n = fg_pointer_attr_size(attr);
    return n ? n : FGR_MAX_BUF + 1;
}
