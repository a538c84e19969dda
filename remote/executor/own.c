/* What this connection may name: the handles the driver gave it and the
 * device memory it allocated. A handle or device pointer a client sends is
 * passed to the driver only when it is one of these; anything else (another
 * connection's handle, an address in the executor's own memory) is refused
 * before the driver sees it. Each entry may have an owner (the context it
 * was made in, the module a function came from): destroying the owner drops
 * it too, as the driver frees it. */
#include "executor.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t fgr_ctx;
const char *fgr_peer = "client";

struct ent {
    uint64_t v, owner;
    uint32_t refs; /* references beyond the first (a physical allocation's retains) */
    uint8_t kind, okind; /* 0: empty slot; FGR_H_DEAD: removed */
};
#define FGR_H_DEAD 0xff

static struct ent *tab;
static size_t cap, used; /* used counts removed slots too, until a rehash */

struct range {
    uint64_t base, end, owner;
    uint8_t okind;
};
static struct range *mem;
static size_t nmem, capmem;

static size_t slot_of(int kind, uint64_t v)
{
    uint64_t h = (v ^ (uint64_t)kind * 0x9e3779b97f4a7c15ULL) * 0xff51afd7ed558ccdULL;
    return (size_t)(h >> 17) & (cap - 1);
}

static struct ent *find(int kind, uint64_t v)
{
    if (!cap)
        return NULL;
    for (size_t i = slot_of(kind, v);; i = (i + 1) & (cap - 1)) {
        if (!tab[i].kind)
            return NULL;
        if (tab[i].kind == kind && tab[i].v == v)
            return &tab[i];
    }
}

/* Rehashes without the removed entries: twice as large when at least half
 * of what is used is live, else the same size (a client that creates and
 * destroys events in a loop does not grow the table). */
static int grow(void)
{
    size_t live = 0;
    for (size_t i = 0; i < cap; i++)
        live += tab[i].kind && tab[i].kind != FGR_H_DEAD;
    size_t ncap = !cap ? 256 : live * 2 >= used ? cap * 2 : cap;
    struct ent *n = calloc(ncap, sizeof *n), *old = tab;
    if (!n)
        return -1;
    size_t ocap = cap;
    tab = n;
    cap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (!old[i].kind || old[i].kind == FGR_H_DEAD)
            continue;
        size_t j = slot_of(old[i].kind, old[i].v);
        while (tab[j].kind)
            j = (j + 1) & (cap - 1);
        tab[j] = old[i];
    }
    used = live;
    free(old);
    return 0;
}

int fgr_has(int kind, uint64_t v)
{
    /* NULL is the driver's to refuse (or the current context, the
     * default stream); the two special streams are not pointers. */
    if (v == 0 || (kind == FGR_H_CUstream && (v == 1 || v == 2)))
        return 1;
    /* A kernel may be given where a function is asked for. */
    return find(kind, v) || (kind == FGR_H_CUfunction && find(FGR_H_CUkernel, v));
}

void fgr_add(int kind, uint64_t v, int okind, uint64_t owner)
{
    if (v == 0 || find(kind, v))
        return;
    if ((used + 1) * 4 > cap * 3 && grow())
        return; /* unknown then, so refused: never a handle the client did not get */
    size_t i = slot_of(kind, v);
    while (tab[i].kind && tab[i].kind != FGR_H_DEAD)
        i = (i + 1) & (cap - 1);
    if (!tab[i].kind)
        used++;
    tab[i] = (struct ent){v, owner, 0, (uint8_t)kind, (uint8_t)okind};
}

void fgr_retain(int kind, uint64_t v)
{
    struct ent *e = find(kind, v);
    if (e && e->refs < UINT32_MAX)
        e->refs++;
}

static void drop_owned(int kind, uint64_t v);

/* A shadow entry is of kind | SHADOWED, owned by its real handle: it goes
 * when the handle does. */
#define SHADOWED 0x40

void fgr_shadow_add(int kind, uint64_t id, uint64_t real) { fgr_add(kind | SHADOWED, id, kind, real); }

uint64_t fgr_unshadow(int kind, uint64_t v)
{
    if (!fgr_is_shadow(v))
        return v;
    struct ent *e = find(kind | SHADOWED, v);
    return e ? e->owner : v;
}

void fgr_drop(int kind, uint64_t v)
{
    struct ent *e = find(kind, v);
    if (e && e->refs) { /* released, but retained more often */
        e->refs--;
        return;
    }
    if (e) {
        e->kind = FGR_H_DEAD;
        drop_owned(kind, v);
    }
    if (kind == FGR_H_MEM) {
        for (size_t i = 0; i < nmem; i++)
            if (mem[i].base == v) {
                memmove(&mem[i], &mem[i + 1], (nmem - i - 1) * sizeof *mem);
                nmem--;
                break;
            }
    }
}

/* Everything owned by (kind, v), and what that owns in turn. */
static void drop_owned(int kind, uint64_t v)
{
    for (size_t i = 0; i < cap; i++)
        if (tab[i].kind && tab[i].kind != FGR_H_DEAD && tab[i].okind == kind && tab[i].owner == v)
            fgr_drop(tab[i].kind, tab[i].v);
    for (size_t i = 0; i < nmem;) {
        if (mem[i].okind == kind && mem[i].owner == v) {
            memmove(&mem[i], &mem[i + 1], (nmem - i - 1) * sizeof *mem);
            nmem--;
        } else {
            i++;
        }
    }
}

/* The index of the first range whose base is above p (the bases are
 * sorted). */
static size_t above(uint64_t p)
{
    size_t lo = 0, hi = nmem;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (mem[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The range holding p. */
static struct range *range_of(uint64_t p)
{
    size_t i = above(p);
    return i && p < mem[i - 1].end ? &mem[i - 1] : NULL;
}

int fgr_mem_in(uint64_t p, uint64_t n)
{
    struct range *r = range_of(p);
    if (n == 0) /* touches nothing: NULL, or an address of the client's */
        return p == 0 || r || range_of(p - 1);
    return r && n <= r->end - p;
}

int fgr_mem_base(uint64_t p) { return p == 0 || find(FGR_H_MEM, p); }

int fgr_mem_clear(uint64_t p, uint64_t n)
{
    if (n == 0 || p + n < p || range_of(p))
        return 0;
    size_t i = above(p);
    return i == nmem || mem[i].base >= p + n;
}

void fgr_mem_drop_within(uint64_t lo, uint64_t hi)
{
    for (size_t i = 0; i < nmem;)
        if (mem[i].base >= lo && mem[i].base < hi)
            fgr_drop(FGR_H_MEM, mem[i].base); /* moves the rest down */
        else
            i++;
}

void fgr_mem_add(uint64_t base, uint64_t size, int okind, uint64_t owner)
{
    if (base == 0 || size == 0 || base + size < base || range_of(base))
        return;
    if (nmem == capmem) {
        size_t n = capmem ? 2 * capmem : 64;
        struct range *m = realloc(mem, n * sizeof *m);
        if (!m)
            return; /* unknown then, so refused */
        mem = m;
        capmem = n;
    }
    size_t i = above(base);
    memmove(&mem[i + 1], &mem[i], (nmem - i) * sizeof *mem);
    mem[i] = (struct range){base, base + size, owner, (uint8_t)okind};
    nmem++;
    fgr_add(FGR_H_MEM, base, okind, owner);
}

void fgr_mem_add_found(uint64_t p, int okind, uint64_t owner)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    if (p && fgr_drv.range && fgr_drv.range(&base, &size, (CUdeviceptr)p) == CUDA_SUCCESS)
        fgr_mem_add(base, size, okind, owner);
}

static int refusals;

void fgr_logf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "flexgv-executor[%d] %s: ", (int)getpid(), fgr_peer);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

CUresult fgr_refuse(const char *call, const char *param, uint64_t v, CUresult r)
{
    if (refusals++ == 0)
        fprintf(stderr,
                "flexgv-executor[%d] %s: refusing %s: %s=0x%llx is not a %s this connection was given "
                "(error %d; further refusals on this connection are not logged)\n",
                (int)getpid(), fgr_peer, call, param, (unsigned long long)v,
                r == CUDA_ERROR_INVALID_VALUE ? "device address range" : "handle", (int)r);
    return r;
}

CUresult fgr_refuse_size(const char *call, const char *param, uint64_t v, CUresult r)
{
    if (refusals++ == 0)
        fgr_logf("refusing %s: %s would be %llu bytes, more than the %u a result of its kind may be "
                 "(error %d; further refusals on this connection are not logged)",
                 call, param, (unsigned long long)v, FGR_SMALL_FRAME, (int)r);
    return r;
}

int fgr_has_n(int kind, const void *arr, uint64_t n)
{
    const uint64_t *v = arr;
    for (uint64_t i = 0; v && i < n; i++)
        if (!fgr_has(kind, v[i]))
            return 0;
    return 1;
}
