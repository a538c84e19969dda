/* Uses the simulated driver's private export tables the way the CUDA runtime
 * does: cuGetExportTable from cuGetProcAddress_v2, several threads racing to
 * fetch both tables, twice each, then calling known slots a known number of
 * times and checking every result (stack arguments, floating point, pointers
 * out, error results). A forked child calls inherited tables; an exec'd one
 * fetches table A through dlsym. Prints the totals over all three processes
 * ("expect UUID/SLOT N", "expect requests:UUID N", "expect refused:UUID N"),
 * which library each slot points into ("owner UUID/SLOT LIB") and the
 * protection of each table's page ("prot UUID PERMS"). Exit status 0 when
 * every check passed. */
#include "common.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
#define A "666c6578-6776-2d73-696d-2d7461622d41"
#define B "666c6578-6776-2d73-696d-2d7461622d42"

typedef CUresult (*export_fn)(const void **, const CUuuid *);
typedef uint64_t (*sum10_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                             uint64_t, uint64_t);
typedef double (*mix_fn)(double, float, int);
typedef const void *(*ptr_fn)(void);
typedef CUresult (*triple_fn)(int *, int);
typedef float (*fsum9_fn)(float, float, float, float, float, float, float, float, float);
typedef CUresult (*uuid_fn)(CUuuid *);

static const CUuuid uuid_a = {{'f', 'l', 'e', 'x', 'g', 'v', '-', 's', 'i', 'm', '-', 't', 'a', 'b', '-', 'A'}};
static const CUuuid uuid_b = {{'f', 'l', 'e', 'x', 'g', 'v', '-', 's', 'i', 'm', '-', 't', 'a', 'b', '-', 'B'}};
static const CUuuid uuid_unknown = {{'f', 'l', 'e', 'x', 'g', 'v', '-', 'n', 'o', '-', 't', 'a', 'b', 'l', 'e', '!'}};

static export_fn get_table;
static pthread_barrier_t start;
static int failures;

#define SLOT(t, i, type) ((type)(uintptr_t)(t)[i])

static void fail(const char *what, long got, long want)
{
    fprintf(stderr, "exportclient: %s: got %ld, want %ld\n", what, got, want);
    __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
}

static void check(const char *what, long got, long want)
{
    if (got != want)
        fail(what, got, want);
}

static const void *const *fetch(export_fn f, const CUuuid *id)
{
    const void *t = NULL;
    CUresult r = f(&t, id);
    check("cuGetExportTable", r, CUDA_SUCCESS);
    if (!t) {
        fprintf(stderr, "exportclient: cuGetExportTable gave no table\n");
        exit(1);
    }
    return (const void *const *)t;
}

static void call_sum10(const void *const *a, uint64_t base)
{
    uint64_t want = 0;
    for (uint64_t k = 0; k < 10; k++)
        want += (k + 1) * (base + k);
    uint64_t got = SLOT(a, 1, sum10_fn)(base, base + 1, base + 2, base + 3, base + 4, base + 5, base + 6, base + 7,
                                        base + 8, base + 9);
    check("table A slot 1 (ten arguments)", (long)got, (long)want);
}

static void call_mix(const void *const *a, int n)
{
    double x = 1.5 + n;
    float y = 2.25f;
    check("table A slot 2 (double, float, int)", SLOT(a, 2, mix_fn)(x, y, n) == x * (double)y + n, 1);
}

static void call_fsum9(const void *const *b, int n)
{
    float v[9], want = 0;
    for (int k = 0; k < 9; k++) {
        v[k] = 0.5f * (float)(k + n);
        want += (float)(k + 1) * v[k];
    }
    float got = SLOT(b, 1, fsum9_fn)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
    check("table B slot 1 (nine floats)", got == want, 1);
}

static void *thread_main(void *arg)
{
    int t = (int)(intptr_t)arg;
    pthread_barrier_wait(&start);
    const void *const *a = fetch(get_table, &uuid_a), *const *b = fetch(get_table, &uuid_b);
    check("table A handed out again", fetch(get_table, &uuid_a) == a, 1);
    check("table B handed out again", fetch(get_table, &uuid_b) == b, 1);
    const void *none = &none;
    check("unknown table", get_table(&none, &uuid_unknown), CUDA_ERROR_INVALID_VALUE);

    /* The driver's own idea of where its tables and data are. */
    check("table A at the driver's address", SLOT(a, 4, ptr_fn)() == (const void *)a, 1);
    check("table B at the driver's address", SLOT(b, 0, ptr_fn)() == (const void *)b, 1);
    check("table A data slot untouched", SLOT(a, 6, ptr_fn)() == a[5], 1);
    check("table A slot 3 untouched", a[3] == NULL, 1);

    for (int i = 0; i <= t; i++)
        call_sum10(a, (uint64_t)(t * 100 + i) << 33);
    for (int i = 0; i < 2; i++)
        call_mix(a, t + i);
    int out = -1;
    for (int i = 0; i < 2; i++) {
        check("table A slot 7 result", SLOT(a, 7, triple_fn)(&out, t + i), CUDA_SUCCESS);
        check("table A slot 7 output", out, 3 * (t + i));
    }
    check("table A slot 7 error", SLOT(a, 7, triple_fn)(&out, -1), CUDA_ERROR_INVALID_VALUE);
    for (int i = 0; i < t + 2; i++)
        call_fsum9(b, t + i);
    CUuuid u;
    check("table B slot 2 result", SLOT(b, 2, uuid_fn)(&u), CUDA_SUCCESS);
    check("table B slot 2 output", memcmp(&u, &uuid_b, sizeof u), 0);
    return NULL;
}

static const char *owner(const void *p)
{
    Dl_info info;
    if (!dladdr(p, &info) || !info.dli_fname)
        return "none";
    const char *base = strrchr(info.dli_fname, '/');
    return base ? base + 1 : info.dli_fname;
}

static void print_prot(const char *name, const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && (uintptr_t)p >= lo && (uintptr_t)p < hi)
            printf("prot %s %s\n", name, perms);
    }
    if (f)
        fclose(f);
}

static int wait_ok(pid_t pid)
{
    int st;
    return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    if (argc > 1 && !strcmp(argv[1], "exec-child")) {
        export_fn f = (export_fn)dlsym(h, "cuGetExportTable");
        const void *const *a = fetch(f, &uuid_a);
        for (int i = 0; i < 4; i++)
            call_mix(a, 10 + i);
        return failures != 0;
    }
    fg_pfn_cuGetProcAddress_v2 gpa = (fg_pfn_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
    CHECK(gpa("cuGetExportTable", (void **)&get_table, 3000, 0, NULL));

    pthread_t th[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, thread_main, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);

    const void *const *a = fetch(get_table, &uuid_a), *const *b = fetch(get_table, &uuid_b);
    pid_t child = fork();
    if (child == 0) {
        call_sum10(a, 7);
        call_sum10(a, 8);
        call_fsum9(b, 3);
        exit(failures != 0);
    }
    if (!wait_ok(child))
        fail("forked child", 1, 0);
    child = fork();
    if (child == 0) {
        execl("/proc/self/exe", argv[0], "exec-child", (char *)NULL);
        _exit(127);
    }
    if (!wait_ok(child))
        fail("exec'd child", 1, 0);

    for (int i = 0; i < 8; i++)
        if (i != 0 && i != 3)
            printf("owner " A "/%d %s\n", i, owner(a[i]));
    for (int i = 0; i < 3; i++)
        printf("owner " B "/%d %s\n", i, owner(b[i]));
    print_prot(A, a);
    print_prot(B, b);

    /* Threads t = 0..3, then the forked child, then the exec'd one. */
    printf("expect " A "/1 %d\n", 1 + 2 + 3 + 4 + 2);
    printf("expect " A "/2 %d\n", 2 * THREADS + 4);
    printf("expect " A "/4 %d\n", THREADS);
    printf("expect " A "/6 %d\n", THREADS);
    printf("expect " A "/7 %d\n", 3 * THREADS);
    printf("expect " B "/0 %d\n", THREADS);
    printf("expect " B "/1 %d\n", 2 + 3 + 4 + 5 + 1);
    printf("expect " B "/2 %d\n", THREADS);
    printf("expect requests:" A " %d\n", 2 * THREADS + 1 + 1);
    printf("expect requests:" B " %d\n", 2 * THREADS + 1);
    printf("expect refused:666c6578-6776-2d6e-6f2d-7461626c6521 %d\n", THREADS);
    return failures != 0;
}
