/* What a program passes to one word of a driver export table, and what it
 * gets back (GPU machine; a diagnostic for words the remoting client does
 * not emulate yet). Preloaded, it asks the driver for the table, puts a
 * logger in the word (in place: callers are handed the same table), and
 * for the first 40 calls prints the six integer arguments, 4 words at each
 * one that points at mapped memory before and after the call, the result
 * and the calling library.
 *     gcc -shared -fPIC -O1 -o xt_spy.so xt_spy.c -ldl
 *     XT_SPY=21318c60-9714-3248-8ca6-41ff7324c8f2/51 LD_PRELOAD=./xt_spy.so PROGRAM */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef uint64_t (*word_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
static word_fn orig;
static int calls;
static char what[64];

static int mapped(uint64_t p)
{
    unsigned char v;
    long page = sysconf(_SC_PAGESIZE);
    return p >= 0x10000 && p % 8 == 0 && mincore((void *)(p & ~(uint64_t)(page - 1)), 1, &v) == 0;
}

static void words(const char *when, int i, uint64_t p)
{
    const uint64_t *q = (const uint64_t *)p;
    fprintf(stderr, "xt_spy:   arg%d %s: %016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64 "\n", i, when, q[0],
            q[1], q[2], q[3]);
}

static uint64_t spy(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5)
{
    uint64_t a[6] = {a0, a1, a2, a3, a4, a5};
    int n = __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    if (n > 40)
        return orig(a0, a1, a2, a3, a4, a5);
    Dl_info di = {0};
    dladdr(__builtin_return_address(0), &di);
    fprintf(stderr, "xt_spy: %s call %d from %s: %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 "\n",
            what, n, di.dli_fname ? di.dli_fname : "?", a0, a1, a2, a3, a4, a5);
    for (int i = 0; i < 6; i++)
        if (mapped(a[i]))
            words("before", i, a[i]);
    uint64_t r = orig(a0, a1, a2, a3, a4, a5);
    for (int i = 0; i < 6; i++)
        if (mapped(a[i]))
            words("after ", i, a[i]);
    fprintf(stderr, "xt_spy: %s call %d returns %" PRIx64 "\n", what, n, r);
    return r;
}

__attribute__((constructor)) static void install(void)
{
    const char *spec = getenv("XT_SPY");
    unsigned char uuid[16];
    int slot, k = 0;
    if (!spec || strlen(spec) >= sizeof what)
        return;
    snprintf(what, sizeof what, "%s", spec);
    for (const char *p = spec; *p && *p != '/' && k < 16; p++) {
        if (*p == '-')
            continue;
        unsigned v;
        if (sscanf(p, "%2x", &v) != 1)
            break;
        uuid[k++] = (unsigned char)v;
        p++;
    }
    const char *s = strchr(spec, '/');
    if (k != 16 || !s || sscanf(s + 1, "%d", &slot) != 1) {
        fprintf(stderr, "xt_spy: XT_SPY=%s is not UUID/SLOT\n", spec);
        return;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    int (*init)(unsigned) = h ? (int (*)(unsigned))dlsym(h, "cuInit") : NULL;
    int (*get)(const void **, const unsigned char *) =
        h ? (int (*)(const void **, const unsigned char *))dlsym(h, "cuGetExportTable") : NULL;
    const void **t = NULL;
    if (!init || !get || init(0) || get((const void **)&t, uuid) || !t) {
        fprintf(stderr, "xt_spy: the driver does not hand out %s\n", spec);
        return;
    }
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t at = (uintptr_t)&t[slot] & ~(uintptr_t)(page - 1);
    if (mprotect((void *)at, (size_t)page * 2, PROT_READ | PROT_WRITE)) {
        perror("xt_spy: mprotect");
        return;
    }
    orig = (word_fn)t[slot];
    t[slot] = (const void *)spy;
    fprintf(stderr, "xt_spy: %s is watched\n", spec);
}
