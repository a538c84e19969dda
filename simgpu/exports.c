/* Simulated private export tables (cuGetExportTable). The real driver hands
 * the CUDA runtime and libraries arrays of words in read-only memory, some
 * with their size in bytes in slot 0, mixing functions and data. Tables A
 * and B are made up, under UUIDs of our own, with functions whose results
 * show whether a caller's arguments (registers, stack, floating point) and
 * return values went through unchanged: they are what flexgv census is
 * tested on. The context table is the driver's UUID with the two words
 * cuBLAS calls that a remoting client forwards (docs/EXPORT-TABLES.md):
 * what the H200's driver was seen to do. */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

/* "flexgv-sim-tab-A" and "flexgv-sim-tab-B" as bytes. */
static const CUuuid uuid_a = {{'f', 'l', 'e', 'x', 'g', 'v', '-', 's', 'i', 'm', '-', 't', 'a', 'b', '-', 'A'}};
static const CUuuid uuid_b = {{'f', 'l', 'e', 'x', 'g', 'v', '-', 's', 'i', 'm', '-', 't', 'a', 'b', '-', 'B'}};

static const void *const table_a[8];
static const void *const table_b[4];

/* Position-weighted: arguments 7 to 10 are on the stack, in order. */
static uint64_t a_sum10(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f, uint64_t g,
                        uint64_t h, uint64_t i, uint64_t j)
{
    return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h + 9 * i + 10 * j;
}

static double a_mix(double x, float y, int n) { return x * (double)y + n; }

static CUresult a_triple(int *out, int x)
{
    if (!out || x < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *out = 3 * x;
    return CUDA_SUCCESS;
}

static const void *a_self(void) { return table_a; }

static const struct {
    char name[16];
    int version;
} a_info = {"flexgv-sim", 1};

static const void *a_info_at(void) { return &a_info; }

static const void *b_self(void) { return table_b; }

/* Nine floats: the ninth is on the stack. */
static float b_fsum9(float a, float b, float c, float d, float e, float f, float g, float h, float i)
{
    return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h + 9 * i;
}

static CUresult b_uuid(CUuuid *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    *out = uuid_b;
    return CUDA_SUCCESS;
}

/* Word 51: an object for a context (NULL: the current one), as the real
 * driver makes before cuBLAS's first product; word 39: a word about it
 * (the H200 answered 7). The second and fourth arguments were 0 there;
 * other values are refused here, so that a test sees what reaches it. */
#define CTX_OBJECT_MAGIC 0x6f626a63u
struct ctx_object {
    uint32_t magic;
    CUcontext ctx;
};

static CUresult ctx_object(CUcontext ctx, uint64_t arg1, struct ctx_object **out, uint64_t arg3)
{
    if (arg1 || arg3)
        return CUDA_ERROR_INVALID_VALUE; /* never seen: a driver could read them */
    if (!ctx)
        ctx = (CUcontext)sim_current_ctx();
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx_object *o = malloc(sizeof *o);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *o = (struct ctx_object){CTX_OBJECT_MAGIC, ctx};
    *out = o;
    return CUDA_SUCCESS;
}

static CUresult ctx_object_query(CUcontext ctx, const struct ctx_object *o, uint64_t *value, uint64_t arg3)
{
    if (arg3)
        return CUDA_ERROR_INVALID_VALUE;
    if (!o || o->magic != CTX_OBJECT_MAGIC || !value)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_ctx_valid(ctx ? ctx : o->ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *value = 7;
    return CUDA_SUCCESS;
}

/* const: relocated, then made read-only by the loader, as the driver's are. */
static const void *const table_a[8] = {
    (const void *)sizeof table_a, /* size word */
    (const void *)a_sum10,
    (const void *)a_mix,
    NULL, /* a reserved slot */
    (const void *)a_self,
    &a_info, /* data */
    (const void *)a_info_at,
    (const void *)a_triple,
};

/* No size word: three functions, then a word that is not code. */
static const void *const table_b[4] = {(const void *)b_self, (const void *)b_fsum9, (const void *)b_uuid, NULL};

static const void *const table_ctx[93] = {
    [0] = (const void *)sizeof table_ctx,
    [39] = (const void *)ctx_object_query,
    [51] = (const void *)ctx_object,
};
static const CUuuid uuid_ctx = {{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}};

SIM_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    if (memcmp(pExportTableId, &uuid_a, sizeof uuid_a) == 0)
        *ppExportTable = table_a;
    else if (memcmp(pExportTableId, &uuid_b, sizeof uuid_b) == 0)
        *ppExportTable = table_b;
    else if (memcmp(pExportTableId, &uuid_ctx, sizeof uuid_ctx) == 0)
        *ppExportTable = table_ctx;
    else
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
