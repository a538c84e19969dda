/* Process setup and the dlsym interposer.
 *
 * Nothing here loads the CUDA driver: a program that never touches CUDA only
 * pays for resolving the real dlsym and reading the environment. */
#include "shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *(*fg_real_dlsym)(void *, const char *);

static int booted;

void fg_sigbus_chain(const struct sigaction *old, int sig, siginfo_t *si, void *uc)
{
    if (old->sa_flags & SA_SIGINFO) {
        old->sa_sigaction(sig, si, uc);
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
    } else {
        signal(SIGBUS, SIG_DFL); /* the faulting access repeats and ends the process */
    }
}

void fg_warn_once(int *flag, const char *fmt, ...)
{
    if (__atomic_exchange_n(flag, 1, __ATOMIC_RELAXED))
        return;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "flexgv: ");
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

static void after_fork_child(void)
{
    fg_trace_after_fork();
    fg_census_after_fork();
    if (fg_quota_on)
        fg_memquota_after_fork();
    if (fg_policy_on[FG_POLICY_COMPUTE])
        fg_compute_after_fork();
}

/* Idempotent and lock-free: another library's constructor may call dlsym
 * or the driver before ours runs, from any thread. A sanitizer's runtime
 * (AddressSanitizer and its kin) resolves its interceptors through dlsym
 * even before libc is set up, when getenv finds nothing (libc_ready 0):
 * the setup then waits for a later call, our constructor at the latest,
 * rather than run the program without its limits. */
static void boot(int libc_ready)
{
    if (!fg_real_dlsym) {
        void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!p)
            p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&fg_real_dlsym, (void *(*)(void *, const char *))p, __ATOMIC_RELEASE);
    }
    if (__atomic_load_n(&booted, __ATOMIC_ACQUIRE) || !libc_ready || __atomic_exchange_n(&booted, 1, __ATOMIC_ACQ_REL))
        return;
    const char *tenant = getenv("FLEXGV_TENANT");
    if (tenant && *tenant) {
        fg_tenant_init(tenant);
        /* Only a capped tenant's launches leave the pass-through path. */
        const char *compute = getenv("FLEXGV_COMPUTE");
        if (compute && strcmp(compute, "1") == 0)
            fg_policy_enable(FG_POLICY_COMPUTE);
    }
    const char *log = getenv("FLEXGV_LOG");
    const char *trace = getenv("FLEXGV_TRACE");
    if (trace && *trace) {
        fg_logging = log && strcmp(log, "1") == 0;
        fg_trace_attach(trace);
    }
    const char *census = getenv("FLEXGV_CENSUS");
    if (census && *census)
        fg_census_init(census);
    pthread_atfork(NULL, NULL, after_fork_child);
}

void fg_boot(void) { boot(environ != NULL); }

/* Libc is set up by the time constructors run, whatever environ holds. */
__attribute__((constructor)) static void fg_ctor(void) { boot(1); }

/* Hooked names found in a CUDA driver or NVML object are answered with the
 * wrapper of exactly that exported variant; every other lookup is a tail
 * call to the real dlsym, so RTLD_NEXT keeps its caller's meaning. */
/* glibc declares name nonnull, but callers do pass NULL: keep the check. */
#pragma GCC diagnostic ignored "-Wnonnull-compare"
FG_EXPORT void *dlsym(void *handle, const char *name)
{
    if (FG_UNLIKELY(!__atomic_load_n(&booted, __ATOMIC_ACQUIRE)))
        fg_boot();
    if (name && ((name[0] == 'c' && name[1] == 'u') || (name[0] == 'n' && name[1] == 'v'))) {
        int id = fg_lookup_name(name);
        if (id >= 0) {
            /* Resolved from here, RTLD_NEXT/RTLD_DEFAULT find the first
             * definition after the shim: the driver's, or none. */
            void *h = (handle == RTLD_DEFAULT || handle == RTLD_NEXT) ? RTLD_NEXT : handle;
            void *p = fg_real_dlsym(h, name);
            if (!p || p == fg_wrappers[id] || !fg_is_driver_object(p, id))
                return p;
            fg_adopt_real(id, p);
            return fg_wrappers[id];
        }
    }
    return fg_real_dlsym(handle, name);
}
