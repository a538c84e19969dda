/* Finding the real driver entry points and mapping a real pointer back to
 * the hooked variant it belongs to. Everything is lock-free and idempotent:
 * racing threads may both do the work, one result wins. */
#include "shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *fg_real[FG_NUM_APIS];

enum { LIB_CUDA, LIB_NVML, NLIBS };
#define LOAD_FAILED ((void *)1)

static void *handles[NLIBS];
static int warned[NLIBS];

static int lib_of(int id) { return id < FG_NUM_CUDA_APIS ? LIB_CUDA : LIB_NVML; }

static const char *lib_path(int lib)
{
    const char *env = getenv(lib == LIB_CUDA ? "FLEXGV_DRIVER" : "FLEXGV_NVML");
    if (env && *env)
        return env;
    return lib == LIB_CUDA ? "libcuda.so.1" : "libnvidia-ml.so.1";
}

static char load_error[256];

/* The library's handle, loaded on first use; NULL if it cannot be loaded
 * (said on stderr once when warn is set: the program asked for it). */
static void *lib_handle(int lib, int warn)
{
    void *h = __atomic_load_n(&handles[lib], __ATOMIC_ACQUIRE);
    if (h == LOAD_FAILED && warn)
        fg_warn_once(&warned[lib], "cannot load %s (%s); its calls fail with %s", lib_path(lib), load_error,
                     lib == LIB_CUDA ? "CUDA_ERROR_NOT_INITIALIZED" : "NVML_ERROR_LIBRARY_NOT_FOUND");
    if (h)
        return h == LOAD_FAILED ? NULL : h;
    const char *path = lib_path(lib);
    h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        const char *err = dlerror();
        snprintf(load_error, sizeof load_error, "%s", err ? err : "unknown error");
        h = LOAD_FAILED;
    }
    void *expected = NULL;
    if (!__atomic_compare_exchange_n(&handles[lib], &expected, h, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        if (h != LOAD_FAILED)
            dlclose(h);
        h = expected;
    }
    return h == LOAD_FAILED ? lib_handle(lib, warn) : h;
}

void fg_adopt_real(int id, void *addr)
{
    void *expected = NULL;
    __atomic_compare_exchange_n(&fg_real[id], &expected, addr, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static void *resolve(int id, int warn)
{
    fg_boot();
    void *h = lib_handle(lib_of(id), warn);
    if (!h)
        return NULL;
    void *p = fg_real_dlsym(h, fg_api_names[id]);
    if (!p)
        return NULL;
    fg_adopt_real(id, p);
    return __atomic_load_n(&fg_real[id], __ATOMIC_ACQUIRE);
}

/* A direct call reached a wrapper whose real function is not known yet. */
void *fg_resolve(int id) { return resolve(id, 1); }

/* The shim's own lookups: a missing library is no message of ours. */
void *fg_resolve_quiet(int id)
{
    void *p = __atomic_load_n(&fg_real[id], __ATOMIC_ACQUIRE);
    return p ? p : resolve(id, 0);
}

void *fg_cuda_sym(const char *name)
{
    void *h = lib_handle(LIB_CUDA, 0);
    return h ? fg_real_dlsym(h, name) : NULL;
}

void *fg_nvml_sym(const char *name)
{
    void *h = lib_handle(LIB_NVML, 0);
    return h ? fg_real_dlsym(h, name) : NULL;
}

int fg_missing(int id)
{
    return lib_of(id) == LIB_CUDA ? CUDA_ERROR_NOT_INITIALIZED : NVML_ERROR_LIBRARY_NOT_FOUND;
}

int fg_lookup_name(const char *name)
{
    int lo = 0, hi = FG_NUM_APIS - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int id = fg_api_by_name[mid];
        int c = strcmp(name, fg_api_names[id]);
        if (c == 0)
            return id;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return -1;
}

/* True when addr lies in a CUDA driver (for CUDA ids) or NVML library. */
int fg_is_driver_object(const void *addr, int id)
{
    Dl_info info;
    if (!dladdr(addr, &info) || !info.dli_fname)
        return 0;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    int lib = lib_of(id);
    if (strncmp(base, lib == LIB_CUDA ? "libcuda.so" : "libnvidia-ml.so", lib == LIB_CUDA ? 10 : 15) == 0)
        return 1;
    /* A driver configured under another file name. */
    const char *cfg = lib_path(lib);
    const char *cbase = strrchr(cfg, '/');
    cbase = cbase ? cbase + 1 : cfg;
    return strcmp(base, cbase) == 0;
}

/* Address map of the driver that cuGetProcAddress answers from: every hooked
 * variant's real address, sorted, built once. */
struct addr_entry {
    uintptr_t addr;
    int id;
};
struct addr_map {
    int n;
    struct addr_entry e[FG_NUM_CUDA_APIS];
};
static struct addr_map *addr_map;

static int cmp_addr(const void *a, const void *b)
{
    uintptr_t x = ((const struct addr_entry *)a)->addr, y = ((const struct addr_entry *)b)->addr;
    return x < y ? -1 : x > y;
}

static struct addr_map *get_addr_map(const void *in_driver)
{
    struct addr_map *m = __atomic_load_n(&addr_map, __ATOMIC_ACQUIRE);
    if (m)
        return m;
    Dl_info info;
    if (!dladdr(in_driver, &info) || !info.dli_fname)
        return NULL;
    void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return NULL;
    m = calloc(1, sizeof *m);
    if (!m) {
        dlclose(h);
        return NULL;
    }
    for (int id = 0; id < FG_NUM_CUDA_APIS; id++) {
        void *p = fg_real_dlsym(h, fg_api_names[id]);
        if (p) {
            m->e[m->n].addr = (uintptr_t)p;
            m->e[m->n].id = id;
            m->n++;
        }
    }
    dlclose(h);
    qsort(m->e, (size_t)m->n, sizeof m->e[0], cmp_addr);
    struct addr_map *expected = NULL;
    if (!__atomic_compare_exchange_n(&addr_map, &expected, m, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        free(m);
        m = expected;
    }
    return m;
}

/* The hooked variant whose real address is addr; when several variants share
 * one address, the one asked for by base name wins. -1 if none. */
int fg_lookup_addr(const void *addr, const char *base)
{
    struct addr_map *m = get_addr_map(addr);
    if (!m)
        return -1;
    int lo = 0, hi = m->n - 1, at = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (m->e[mid].addr == (uintptr_t)addr) {
            at = mid;
            break;
        }
        if (m->e[mid].addr < (uintptr_t)addr)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    if (at < 0)
        return -1;
    while (at > 0 && m->e[at - 1].addr == (uintptr_t)addr)
        at--;
    int best = m->e[at].id;
    for (int i = at; i < m->n && m->e[i].addr == (uintptr_t)addr; i++)
        if (base && strcmp(fg_api_bases[m->e[i].id], base) == 0)
            return m->e[i].id;
    return best;
}
