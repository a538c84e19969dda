/* What a program gets from an anonymous private mapping asked populated
 * (MAP_POPULATE), as the driver's checkpoint makes its host copy: whether
 * it is resident (within 10 s, untouched: the shim populates it behind
 * the caller), zeroed and writable, and how much of it lies on huge pages
 * (from /proc/self/smaps), and how many threads were started while it was
 * made (this program's pthread_create, exported, is the one a library
 * looking it up finds); and from one not asked populated.
 *   hostcopy MIB
 *   hostcopy unmapped MIB  one asked populated, unmapped at once and
 *                          another mapped where it was, not asked: how
 *                          much of that one is resident a second later
 *   hostcopy forked MIB    one asked populated, then a child that unmaps
 *                          it: whether the child's munmap returned */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int started;

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real)
        real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))dlsym(RTLD_NEXT, "pthread_create");
    __atomic_add_fetch(&started, 1, __ATOMIC_RELAXED);
    return real(t, attr, fn, arg);
}

/* Rss and AnonHugePages (KiB) of the mapping that starts at p. */
static void sizes(void *p, long *rss, long *huge)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[256];
    int in = 0;
    *rss = *huge = -1;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = lo == (unsigned long)p;
            continue;
        }
        if (in && !strncmp(line, "Rss:", 4))
            *rss = atol(line + 4);
        if (in && !strncmp(line, "AnonHugePages:", 14))
            *huge = atol(line + 14);
    }
    if (f)
        fclose(f);
}

static void show(const char *what, size_t n, int flags)
{
    started = 0;
    unsigned char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, flags, -1, 0);
    int threads = started;
    if (p == MAP_FAILED) {
        printf("%s: mmap failed\n", what);
        return;
    }
    long rss, huge;
    sizes(p, &rss, &huge);
    for (int i = 0; i < 1000 && (flags & MAP_POPULATE) && rss * 1024 < (long)n; i++) {
        struct timespec pause = {0, 10000000};
        nanosleep(&pause, NULL);
        sizes(p, &rss, &huge);
    }
    int zero = 1;
    for (size_t i = 0; i < n; i += 4096)
        zero &= p[i] == 0 && p[i + 4095] == 0;
    p[n - 1] = 7;
    printf("%s: resident %s, zeroed %s, writable %s, huge pages %s, threads started %d\n", what,
           rss * 1024 >= (long)n ? "all" : rss > 0 ? "part" : "none", zero ? "yes" : "no", p[n - 1] == 7 ? "yes" : "no",
           huge > 0 ? "some" : "none", threads);
    munmap(p, n);
}

int main(int argc, char **argv)
{
    size_t n = (size_t)(argc > 1 ? atol(argv[argc - 1]) : 256) << 20;
    int populated = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
    if (argc > 2 && !strcmp(argv[1], "unmapped")) {
        void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, populated, -1, 0);
        if (p == MAP_FAILED || munmap(p, n) != 0 ||
            mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != p) {
            printf("mmap or munmap failed\n");
            return 1;
        }
        sleep(1);
        long rss, huge;
        sizes(p, &rss, &huge);
        printf("the mapping made where it was: resident %s\n", rss > 0 ? "part" : rss == 0 ? "none" : "unknown");
        return 0;
    }
    if (argc > 2 && !strcmp(argv[1], "forked")) {
        void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, populated, -1, 0);
        pid_t child = fork();
        if (child == 0) {
            alarm(20);
            _exit(munmap(p, n) == 0 ? 0 : 1);
        }
        int st = 0;
        waitpid(child, &st, 0);
        printf("the child's munmap returned: %s\n", WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "yes" : "no");
        return 0;
    }
    show("asked populated", n, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE);
    show("not asked", n, MAP_PRIVATE | MAP_ANONYMOUS);
    return 0;
}
