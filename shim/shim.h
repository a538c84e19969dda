/* Internal interface of libflexgv.so. */
#ifndef FLEXGV_SHIM_H
#define FLEXGV_SHIM_H

#define _GNU_SOURCE
#include <stdint.h>
#include <signal.h>
#include <stddef.h>
#include <time.h>

#include "flexgv/cuda_api_gen.h"
#include "flexgv/api_ids_gen.h"
#include "flexgv/trace_layout_gen.h"
#include "flexgv/tenant_layout_gen.h"
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>
#include "hooks_gen.h"

#define FG_EXPORT __attribute__((visibility("default")))
#define FG_LIKELY(x) __builtin_expect(!!(x), 1)
#define FG_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Generated tables (hooks_gen.c). */
extern const char *const fg_api_names[FG_NUM_APIS];
extern const char *const fg_api_bases[FG_NUM_APIS];
extern const unsigned short fg_api_by_name[FG_NUM_APIS];
extern void *const fg_wrappers[FG_NUM_APIS];
extern unsigned char fg_divert[FG_NUM_APIS];
extern unsigned char fg_ondemand[FG_NUM_APIS];
extern unsigned char fg_policy_on[FG_NUM_POLICIES];
void fg_policy_enable(enum fg_policy p);

/* Real entry points, filled lazily and lock-free (driver.c). */
extern void *fg_real[FG_NUM_APIS];
void *fg_resolve(int id);
void *fg_resolve_quiet(int id);
void *fg_nvml_sym(const char *name);
void *fg_cuda_sym(const char *name); /* a driver function the shim does not hook */
int fg_missing(int id);
int fg_lookup_name(const char *name);
int fg_lookup_addr(const void *addr, const char *base);
int fg_is_driver_object(const void *addr, int id);
void fg_adopt_real(int id, void *addr);

static inline void *fg_real_fn(int id)
{
    void *p = __atomic_load_n(&fg_real[id], __ATOMIC_ACQUIRE);
    return FG_LIKELY(p != NULL) ? p : fg_resolve(id);
}

/* Process setup (boot.c). */
extern void *(*fg_real_dlsym)(void *, const char *);
void fg_boot(void);
void fg_warn_once(int *flag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Tracing (trace.c). */
extern int fg_tracing;
extern int fg_logging;
extern struct fg_api_stat *fg_stats;
void fg_trace_attach(const char *path);
void fg_trace_after_fork(void);
void fg_log(int id, int result, uint64_t dt_ns, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Export-table census (census.c). */
void fg_census_init(const char *prefix);
void fg_census_after_fork(void);

/* Exported wrapper NAME for hook INDEX: when the real entry point is known
 * and nothing diverts the hook, jump straight to it with every argument untouched;
 * otherwise jump to fg_slow_NAME, which has NAME's exact signature. Written
 * in assembly because compilers copy stack arguments around a sibling call;
 * this path is seven instructions whatever the signature. */
#define FG_SLOW __attribute__((visibility("hidden"), noinline, used))
#if defined(__x86_64__)
#define FG_FAST_PATH(name, index)                                  \
    __asm__(".text\n"                                              \
            ".globl " #name "\n"                                   \
            ".type " #name ", @function\n"                         \
            ".p2align 4\n" #name ":\n"                             \
            "\tendbr64\n"                                          \
            "\tmovq fg_real+8*" #index "(%rip), %rax\n"            \
            "\ttestq %rax, %rax\n"                                 \
            "\tjz fg_slow_" #name "\n"                             \
            "\tcmpb $0, fg_divert+" #index "(%rip)\n"               \
            "\tjne fg_slow_" #name "\n"                            \
            "\tjmp *%rax\n"                                        \
            ".size " #name ", .-" #name "\n");
#else
#error "FG_FAST_PATH needs a port to this architecture"
#endif

/* Memory quotas: the tenant's shared state (tenant.c) and the policies
 * (quota_*.c, memquota.h). Devices are CUDA ordinals unless named entries:
 * the tenant keys its quotas by GPU UUID. */
#define FG_NDEV ((int)FG_MAX_DEVICES)
#define fg_quota_on fg_policy_on[FG_POLICY_MEM]
void fg_tenant_init(const char *path);
/* What NVML says this process holds on CUDA device dev, or -1 unknown. */
long long fg_nvml_self_used(int dev);
/* The driver may have taken memory no charge knows of: the next charge
 * reads its count (the backstop). */
void fg_backstop_soon(void);
/* The driver's count read again at once for dev: memory it showed was
 * given back on the way out of a refusal (tenant.c). */
void fg_backstop_again(int dev);
int fg_tenant_ready(void);
int fg_tenant_refused(void);
void fg_tenant_after_fork(void);
int fg_entry_of(int dev);
int fg_uuid_entry(const char *uuid);
int fg_index_entry(int nvml_index);
/* Whether pid, as this process or NVML sees pids, is one of the tenant's
 * processes; fg_tenant_nvml_pid records ours as NVML reports it (learnt
 * when a context is made, quota_ctx.c). */
int fg_tenant_has_pid(unsigned pid);
void fg_tenant_nvml_pid(unsigned pid);
uint64_t fg_entry_view(int entry, uint64_t *used);
uint64_t fg_quota_of(int dev);
uint64_t fg_ctx_estimate(int dev);
void fg_ctx_measured(int dev, uint64_t bytes);
uint64_t fg_tenant_used(int dev);
int fg_charge(int dev, uint64_t bytes, const char *what);
void fg_force_charge(int dev, uint64_t bytes);
void fg_uncharge(int dev, uint64_t bytes);
void fg_memquota_after_fork(void);
void fg_graph_after_fork(void);

/* Passes a SIGBUS that is not ours to the handler we displaced, as if we
 * were never installed (boot.c). */
void fg_sigbus_chain(const struct sigaction *old, int sig, siginfo_t *si, void *uc);

/* The tenant as attach read it (NULL before, or when there is none). */
const char *fg_tenant_name(void);
const char *fg_tenant_path(void);
const char *fg_entry_uuid(int entry);
/* Whether a policy that cannot be set up refuses CUDA (the default) rather
 * than letting it through (FLEXGV_ON_ERROR=passthrough). */
int fg_refuse_on_error(void);

/* Compute shares, priorities and caps (compute*.c, compute.h). */
void fg_compute_after_fork(void);

static inline const char *fg_str(const char *s) { return s ? s : "(null)"; }

static inline uint64_t fg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void fg_record(int id, int failed, uint64_t dt_ns, uint64_t bytes)
{
    struct fg_api_stat *s = &fg_stats[id];
    __atomic_fetch_add(&s->calls, 1, __ATOMIC_RELAXED);
    if (failed)
        __atomic_fetch_add(&s->errors, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&s->ns, dt_ns, __ATOMIC_RELAXED);
    if (bytes)
        __atomic_fetch_add(&s->bytes, bytes, __ATOMIC_RELAXED);
}

#endif
