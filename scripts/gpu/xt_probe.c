/* What a word of one of the real driver's private tables does, for the
 * remoting client's emulation: calls it, on the real driver (link with
 * -lcuda from the toolkit), with the primary context current, in argument
 * shapes a table function takes, each in a child process (a wrong guess
 * may crash), and prints the result and the words it wrote.
 *     xt_probe UUID WORD      (UUID as docs/EXPORT-TABLES.md writes it)
 * Shapes: (out), (ctx, out), (out, ctx), (NULL, out), (out, dev 0),
 * (dev 0, out); out is a zeroed 128-byte buffer. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef uint64_t (*word_fn)(uint64_t, uint64_t, uint64_t, uint64_t);

static int parse_uuid(const char *s, CUuuid *u)
{
    int n = 0;
    for (; *s && n < 16; s++) {
        if (*s == '-')
            continue;
        unsigned v;
        if (sscanf(s, "%2x", &v) != 1)
            return 0;
        u->bytes[n++] = (char)v;
        s++;
    }
    return n == 16 && !*s;
}

int main(int argc, char **argv)
{
    CUuuid id;
    if (argc != 3 || !parse_uuid(argv[1], &id)) {
        fprintf(stderr, "usage: xt_probe UUID WORD\n");
        return 2;
    }
    int word = atoi(argv[2]);
    CUdevice dev;
    CUcontext ctx;
    const void **table;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
        fprintf(stderr, "xt_probe: no context on device 0\n");
        return 1;
    }
    CUresult r = cuGetExportTable((const void **)&table, &id);
    if (r != CUDA_SUCCESS) {
        printf("table %s: refused (%d)\n", argv[1], (int)r);
        return 1;
    }
    printf("table %s word %d = %p; context %p\n", argv[1], word, table[word], (void *)ctx);
    const char *names[] = {"(out)", "(ctx, out)", "(out, ctx)", "(NULL, out)", "(out, dev 0)", "(dev 0, out)"};
    for (int shape = 0; shape < 6; shape++) {
        fflush(stdout);
        pid_t p = fork();
        if (p == 0) {
            uint64_t buf[16] = {0}, out = (uint64_t)(uintptr_t)buf, c = (uint64_t)(uintptr_t)ctx;
            uint64_t a[6][2] = {{out, 0}, {c, out}, {out, c}, {0, out}, {out, 0}, {0, out}};
            uint64_t ret = ((word_fn)table[word])(a[shape][0], a[shape][1], 0, 0);
            printf("%-14s returns %#llx, wrote", names[shape], (unsigned long long)ret);
            for (int i = 0; i < 16; i++)
                if (buf[i])
                    printf(" [%d]=%#llx", i, (unsigned long long)buf[i]);
            printf("\n");
            fflush(stdout);
            _exit(0);
        }
        int st;
        waitpid(p, &st, 0);
        if (!WIFEXITED(st))
            printf("%-14s crashed (signal %d)\n", names[shape], WTERMSIG(st));
    }
    return 0;
}
