/* What the driver really takes of device memory for each way of asking,
 * one entry per driver version: the shim charges it and the simulated GPU
 * reserves it, so both agree with the driver and with each other.
 *
 * Measured by scripts/gpu/memprobe.c (NVML's per-process figure and
 * cuMemGetInfo before and after each pattern; docs/MEASUREMENTS.md) on an
 * H200, driver 580.159.04 (CUDA 13.0):
 *   cuMemAlloc: up to 1 MiB sub-allocated, at 512 B or an eighth of the
 *     size's power of two, whichever is larger (1 B -> 512, 513 -> 1024,
 *     65537 -> 73728, 1024000 -> 1 MiB); above 1 MiB whole 2 MiB pages
 *     (2 MiB + 1 -> 4 MiB). Pitched: rows of 512 B, then as cuMemAlloc.
 *   arrays: 1D in whole 2 MiB pages; 2D and 3D at least 2 KiB, then as
 *     cuMemAlloc. Stream-ordered pools grow in 32 MiB steps. VMM: 2 MiB.
 *   module data (globals and constants): 2 MiB pages (1 GiB -> 1 GiB,
 *     2 MiB + 1 -> 4 MiB).
 *   local memory: every resident thread (SMs x threads per SM) holds the
 *     context's per-thread level, the stack limit or the largest
 *     CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES launched so far (16 B steps); the
 *     whole is in 2 MiB pages, rounded down; a context starts at 1 KiB.
 *     Setting the stack limit sets the level, also downwards.
 *   device-runtime pending launches: reserved when set, above the default
 *     2048, in 2 MiB pages: 8832 B each at 32768, 9349 B each at the
 *     driver's maximum (599186): the larger is charged.
 *   the printf FIFO took no device memory (64 MiB set, a printing kernel
 *     launched).
 *   a module whose kernels call device printf or malloc: 138 MiB more by
 *     its first launch (140 MiB against 2 MiB for the same module without
 *     them). The shim does not charge it (it would have to find those
 *     calls in the image): its backstop, NVML's count, sees it. */
#ifndef FLEXGV_DRVMEM_H
#define FLEXGV_DRVMEM_H

#include <stdint.h>

struct fg_drvmem {
    int from_version;       /* cuDriverGetVersion at which the entry starts */
    uint64_t page;          /* allocations above sub_max: whole pages */
    uint64_t sub_max;       /* up to this, sub-allocated */
    uint64_t sub_align;     /* ... at this at least */
    unsigned sub_steps;     /* ... or this fraction of the size's power of two */
    uint64_t pitch_align;   /* a pitched row */
    uint64_t array_min;     /* a 2D or 3D array, at least */
    uint64_t pool_step;     /* a stream-ordered pool grows by */
    uint64_t local_base;    /* per-thread local memory a context starts with */
    uint64_t local_align;   /* per-thread local level steps */
    uint64_t pending_base;  /* pending device launches the context holds */
    uint64_t pending_bytes; /* device memory per pending launch above it */
    uint64_t devrt_bytes;   /* a module calling device printf or malloc, more */
};

static const struct fg_drvmem fg_drvmem_table[] = {
    {13000, 2u << 20, 1u << 20, 512, 8, 512, 2048, 32u << 20, 1024, 16, 2048, 9349, 138u << 20},
};

/* The entry for a driver (cuDriverGetVersion): the last that starts at or
 * before it; an older driver gets the first. */
static inline const struct fg_drvmem *fg_drvmem_for(int version)
{
    const struct fg_drvmem *t = &fg_drvmem_table[0];
    for (unsigned i = 1; i < sizeof fg_drvmem_table / sizeof *fg_drvmem_table; i++)
        if (fg_drvmem_table[i].from_version <= version)
            t = &fg_drvmem_table[i];
    return t;
}

static inline uint64_t fg_drv_up(uint64_t v, uint64_t step)
{
    uint64_t r = v % step;
    return r == 0 ? v : v + (step - r) < v ? UINT64_MAX : v + (step - r);
}

/* What cuMemAlloc of bytes takes. */
static inline uint64_t fg_drv_alloc(const struct fg_drvmem *t, uint64_t bytes)
{
    if (bytes > t->sub_max)
        return fg_drv_up(bytes, t->page);
    uint64_t step = t->sub_align;
    if (bytes > 1 && (1ull << (63 - __builtin_clzll(bytes))) / t->sub_steps > step)
        step = (1ull << (63 - __builtin_clzll(bytes))) / t->sub_steps;
    return fg_drv_up(bytes ? bytes : 1, step);
}

static inline uint64_t fg_drv_pitch(const struct fg_drvmem *t, uint64_t width) { return fg_drv_up(width, t->pitch_align); }

/* An array of bytes texels' worth; one_d: no height. */
static inline uint64_t fg_drv_array(const struct fg_drvmem *t, uint64_t bytes, int one_d)
{
    if (one_d)
        return fg_drv_up(bytes, t->page);
    return fg_drv_alloc(t, bytes > t->array_min ? bytes : t->array_min);
}

static inline uint64_t fg_drv_module(const struct fg_drvmem *t, uint64_t data) { return fg_drv_up(data, t->page); }

/* Local memory a context holds at per-thread level for threads resident
 * threads (saturating: too much for any quota). */
static inline uint64_t fg_drv_local(const struct fg_drvmem *t, uint64_t level, uint64_t threads)
{
    uint64_t b;
    if (__builtin_mul_overflow(fg_drv_up(level, t->local_align), threads, &b))
        return UINT64_MAX / 2;
    return b / t->page * t->page;
}

/* Above what a context holds from its start. */
static inline uint64_t fg_drv_local_extra(const struct fg_drvmem *t, uint64_t level, uint64_t threads)
{
    uint64_t have = fg_drv_local(t, t->local_base, threads), want = fg_drv_local(t, level, threads);
    return want > have ? want - have : 0;
}

static inline uint64_t fg_drv_pending(const struct fg_drvmem *t, uint64_t count)
{
    uint64_t b;
    if (count <= t->pending_base)
        return 0;
    if (__builtin_mul_overflow(count, t->pending_bytes, &b))
        return UINT64_MAX / 2;
    return fg_drv_up(b, t->page);
}

#endif
