/* Prints the kernel parameter layouts include/flexgv/cubin.h reads from module
 * images (compressed entries too, by libzstd), a line per kernel in the
 * order found:
 *     kparamdump [--arch N] FILE...  FILE: NAME offsets O0 O1 ... sizes S0 S1 ...
 *                                    (--arch: the cubins a device of compute
 *                                    capability N runs, 90 for 9.0)
 *     kparamdump --mangle FILE       the same walk over every prefix of FILE
 *                                    and over FILE with each byte changed, to
 *                                    show a damaged image ends nothing but
 *                                    its walk; prints how many walks ran */
#include "flexgv/cubin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print(void *ctx, const char *name, size_t len, unsigned count, const unsigned *offsets,
                  const unsigned *sizes)
{
    printf("%s: %.*s offsets", (const char *)ctx, (int)len, name);
    for (unsigned i = 0; i < count; i++)
        printf(" %u", offsets[i]);
    printf(" sizes");
    for (unsigned i = 0; i < count; i++)
        printf(" %u", sizes[i]);
    printf("\n");
}

static void ignore(void *ctx, const char *name, size_t len, unsigned count, const unsigned *offsets,
                   const unsigned *sizes)
{
    (void)ctx, (void)name, (void)len, (void)count, (void)offsets, (void)sizes;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *b = malloc(1 << 24);
    *n = b ? fread(b, 1, 1 << 24, f) : 0;
    fclose(f);
    /* exactly its size: reading past it is caught by tools */
    unsigned char *c = b ? realloc(b, *n ? *n : 1) : NULL;
    if (!c)
        free(b);
    return c;
}

int main(int argc, char **argv)
{
    struct fg_cubin_opts opts = {fg_cubin_zstd, NULL, 0};
    int first = 1;
    if (argc > 2 && !strcmp(argv[1], "--arch")) {
        opts.arch = (unsigned)atoi(argv[2]);
        first = 3;
    }
    if (argc == 3 && !strcmp(argv[1], "--mangle")) {
        size_t n;
        unsigned char *b = slurp(argv[2], &n);
        if (!b)
            return 1;
        unsigned long walks = 0;
        for (size_t k = 0; k <= n; k++, walks++) {
            unsigned char *c = malloc(k ? k : 1);
            memcpy(c, b, k);
            fg_cubin_kernels_opt(c, k, ignore, NULL, &opts);
            free(c);
        }
        for (size_t i = 0; i < n; i++)
            for (int v = 0; v < 256; v += 85, walks++) {
                unsigned char old = b[i];
                b[i] = (unsigned char)(old ^ (v | 1));
                fg_cubin_kernels_opt(b, n, ignore, NULL, &opts);
                b[i] = old;
            }
        free(b);
        printf("walks %lu\n", walks);
        return 0;
    }
    for (int i = first; i < argc; i++) {
        size_t n;
        unsigned char *b = slurp(argv[i], &n);
        if (!b)
            return 1;
        const char *base = strrchr(argv[i], '/');
        unsigned k = fg_cubin_kernels_opt(b, n, print, (void *)(base ? base + 1 : argv[i]), &opts);
        printf("%s: %u kernel(s)\n", base ? base + 1 : argv[i], k);
        free(b);
    }
    return 0;
}
