/* What a program passes to words of a driver export table, and what it
 * gets back (GPU machine; a diagnostic for words the remoting client does
 * not emulate yet). Preloaded, it asks the driver for each table, puts a
 * logger in each word (in place: callers are handed the same table), and
 * for the first 40 calls of each prints the six integer arguments, the
 * current context, 8 words at each argument that points at mapped memory
 * before and after the call (with the mapping each word points into), the
 * object a pointer written by the call points at, the result and the
 * calling library.
 *     gcc -shared -fPIC -O1 -o xt_spy.so xt_spy.c -ldl
 *     XT_SPY=21318c60-9714-3248-8ca6-41ff7324c8f2/51,UUID/WORD LD_PRELOAD=./xt_spy.so PROGRAM
 * The logger passes six integer arguments on: a word that takes more (on
 * the stack) cannot be watched this way. A spec "UUID/WORD/ARG" also
 * watches the function the caller passes as argument ARG (a callback the
 * word calls): its arguments are printed the same way, with the name of
 * any that is a function of the module the word's second argument names
 * (that module's functions are listed first). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef uint64_t (*word_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
enum { WATCHED = 8, WORDS = 8 };
static word_fn orig[WATCHED];
static int calls[WATCHED];
static char what[WATCHED][64];
static int (*ctx_current)(uint64_t *);
static int cb_arg[WATCHED] = {-1, -1, -1, -1, -1, -1, -1, -1};
static int (*fn_count)(unsigned *, uint64_t);
static int (*fn_list)(uint64_t *, unsigned, uint64_t);
static int (*fn_name)(const char **, uint64_t);
static __thread word_fn cb_orig;
static __thread uint64_t cb_module;

static int mapped(uint64_t p)
{
    unsigned char v;
    long page = sysconf(_SC_PAGESIZE);
    return p >= 0x10000 && p % 8 == 0 && mincore((void *)(p & ~(uint64_t)(page - 1)), 1, &v) == 0;
}

/* The mapping p lies in, as "perms file" (or "-" when none). */
static void region(uint64_t p, char *out, size_t n)
{
    snprintf(out, n, "-");
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        uint64_t lo, hi;
        char perms[8], file[400] = "";
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %*s %*s %*s %399s", &lo, &hi, perms, file) >= 3 && p >= lo &&
            p < hi) {
            const char *base = strrchr(file, '/');
            snprintf(out, n, "%s %s+%" PRIx64, perms, base ? base + 1 : (file[0] ? file : "anon"), p - lo);
            break;
        }
    }
    if (f)
        fclose(f);
}

static void words(const char *w, const char *when, int i, uint64_t p)
{
    const uint64_t *q = (const uint64_t *)p;
    for (int k = 0; k < WORDS; k++) {
        char r[160] = "";
        if (mapped(q[k]))
            region(q[k], r, sizeof r);
        fprintf(stderr, "xt_spy: %s   arg%d %s [%d] %016" PRIx64 " %s\n", w, i, when, k, q[k], r);
    }
}

/* The functions of module m, by handle and name. */
static void functions(const char *w, uint64_t m)
{
    unsigned n = 0;
    uint64_t f[64];
    if (!fn_count || fn_count(&n, m) || n == 0) {
        fprintf(stderr, "xt_spy: %s   %" PRIx64 " is not a module with functions\n", w, m);
        return;
    }
    if (n > 64)
        n = 64;
    if (fn_list(f, n, m))
        return;
    for (unsigned i = 0; i < n; i++) {
        const char *name = "?";
        fn_name(&name, f[i]);
        fprintf(stderr, "xt_spy: %s   module function %u: %016" PRIx64 " %s\n", w, i, f[i], name);
    }
}

static uint64_t cb_spy(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5)
{
    uint64_t a[6] = {a0, a1, a2, a3, a4, a5};
    fprintf(stderr, "xt_spy: callback: %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 "\n", a0,
            a1, a2, a3, a4, a5);
    for (int i = 0; i < 6; i++) {
        if (!mapped(a[i]))
            continue;
        words("callback", "at    ", i, a[i]);
        unsigned n = 0;
        uint64_t f[64];
        if (cb_module && fn_count && !fn_count(&n, cb_module) && n <= 64 && !fn_list(f, n, cb_module))
            for (unsigned k = 0; k < n; k++)
                if (f[k] == a[i])
                    fprintf(stderr, "xt_spy: callback   arg%d is module function %u\n", i, k);
    }
    uint64_t r = cb_orig(a0, a1, a2, a3, a4, a5);
    fprintf(stderr, "xt_spy: callback returns %" PRIx64 "\n", r);
    return r;
}

static uint64_t spy(int s, void *from, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5)
{
    uint64_t a[6] = {a0, a1, a2, a3, a4, a5}, before[6] = {0}, ctx = 0;
    int n = __atomic_add_fetch(&calls[s], 1, __ATOMIC_RELAXED);
    if (n > 40)
        return orig[s](a0, a1, a2, a3, a4, a5);
    Dl_info di = {0};
    dladdr(from, &di);
    if (ctx_current)
        ctx_current(&ctx);
    fprintf(stderr, "xt_spy: %s call %d from %s (current context %" PRIx64 "): %" PRIx64 " %" PRIx64 " %" PRIx64
            " %" PRIx64 " %" PRIx64 " %" PRIx64 "\n",
            what[s], n, di.dli_fname ? di.dli_fname : "?", ctx, a0, a1, a2, a3, a4, a5);
    for (int i = 0; i < 6; i++)
        if (mapped(a[i])) {
            char r[160];
            region(a[i], r, sizeof r);
            fprintf(stderr, "xt_spy: %s   arg%d points into %s\n", what[s], i, r);
            before[i] = *(const uint64_t *)a[i];
            words(what[s], "before", i, a[i]);
        }
    if (cb_arg[s] >= 0 && a[cb_arg[s]]) {
        cb_orig = (word_fn)a[cb_arg[s]];
        a[cb_arg[s]] = (uint64_t)cb_spy;
        cb_module = a1;
        functions(what[s], a1);
    }
    uint64_t r = orig[s](a[0], a[1], a[2], a[3], a[4], a[5]);
    for (int i = 0; i < 6; i++)
        if (mapped(a[i])) {
            words(what[s], "after ", i, a[i]);
            uint64_t now = *(const uint64_t *)a[i];
            if (now != before[i] && mapped(now)) /* an object the call made */
                words(what[s], "made  ", i, now);
        }
    fprintf(stderr, "xt_spy: %s call %d returns %" PRIx64 "\n", what[s], n, r);
    return r;
}

#define SPY(s)                                                                                                      \
    static uint64_t spy##s(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5)            \
    {                                                                                                               \
        return spy(s, __builtin_return_address(0), a0, a1, a2, a3, a4, a5);                                                                      \
    }
SPY(0) SPY(1) SPY(2) SPY(3) SPY(4) SPY(5) SPY(6) SPY(7)
static const word_fn spies[WATCHED] = {spy0, spy1, spy2, spy3, spy4, spy5, spy6, spy7};

/* Puts spy s in the word spec ("UUID/WORD") names. */
static void watch(int s, const char *spec, void *h)
{
    unsigned char uuid[16];
    int slot, k = 0;
    snprintf(what[s], sizeof what[s], "%s", spec);
    for (const char *p = spec; *p && *p != '/' && k < 16; p++) {
        if (*p == '-')
            continue;
        unsigned v;
        if (sscanf(p, "%2x", &v) != 1)
            break;
        uuid[k++] = (unsigned char)v;
        p++;
    }
    const char *sl = strchr(spec, '/');
    if (k != 16 || !sl || sscanf(sl + 1, "%d/%d", &slot, &cb_arg[s]) < 1 || cb_arg[s] > 5) {
        fprintf(stderr, "xt_spy: %s is not UUID/WORD\n", spec);
        return;
    }
    int (*get)(const void **, const unsigned char *) = (int (*)(const void **, const unsigned char *))dlsym(h, "cuGetExportTable");
    const void **t = NULL;
    if (!get || get((const void **)&t, uuid) || !t) {
        fprintf(stderr, "xt_spy: the driver does not hand out %s\n", spec);
        return;
    }
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t at = (uintptr_t)&t[slot] & ~(uintptr_t)(page - 1);
    if (mprotect((void *)at, (size_t)page * 2, PROT_READ | PROT_WRITE)) {
        perror("xt_spy: mprotect");
        return;
    }
    orig[s] = (word_fn)t[slot];
    t[slot] = (const void *)spies[s];
    fprintf(stderr, "xt_spy: %s is watched (the table's word 0: %" PRIx64 ")\n", spec, (uint64_t)(uintptr_t)t[0]);
}

__attribute__((constructor)) static void install(void)
{
    const char *specs = getenv("XT_SPY");
    if (!specs)
        return;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    int (*init)(unsigned) = h ? (int (*)(unsigned))dlsym(h, "cuInit") : NULL;
    if (!init || init(0)) {
        fprintf(stderr, "xt_spy: no driver to watch\n");
        return;
    }
    ctx_current = (int (*)(uint64_t *))dlsym(h, "cuCtxGetCurrent");
    fn_count = (int (*)(unsigned *, uint64_t))dlsym(h, "cuModuleGetFunctionCount");
    fn_list = (int (*)(uint64_t *, unsigned, uint64_t))dlsym(h, "cuModuleEnumerateFunctions");
    fn_name = (int (*)(const char **, uint64_t))dlsym(h, "cuFuncGetName");
    char buf[WATCHED * 64], *save = NULL;
    snprintf(buf, sizeof buf, "%s", specs);
    int s = 0;
    for (char *spec = strtok_r(buf, ",", &save); spec && s < WATCHED; spec = strtok_r(NULL, ",", &save))
        watch(s++, spec, h);
}
