/* Shared helpers of the test clients: they print "expect NAME COUNT" for
 * every driver entry point they call, so a test can compare what the
 * program did with what flexgv trace reports. */
#ifndef FLEXGV_TEST_COMMON_H
#define FLEXGV_TEST_COMMON_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flexgv/cuda_api_gen.h"

#define CHECK(call)                                                                 \
    do {                                                                            \
        CUresult r_ = (call);                                                       \
        if (r_ != CUDA_SUCCESS) {                                                   \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, (int)r_); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

/* Simulated module with a builtin vector add, a fill and an empty kernel. */
static const char SIM_MODULE[] = "FLEXGV-SIM-MODULE\n"
                                 "kernel vecadd 20 builtin=vecadd\n"
                                 "kernel fill 5 builtin=fill\n"
                                 "kernel empty 0\n";

struct expect {
    const char *name;
    long n;
};

static struct expect expects[256];
static int nexpects;

__attribute__((unused)) static void count(const char *name, long n)
{
    for (int i = 0; i < nexpects; i++)
        if (!strcmp(expects[i].name, name)) {
            expects[i].n += n;
            return;
        }
    expects[nexpects].name = name;
    expects[nexpects++].n = n;
}

__attribute__((unused)) static void print_expects(void)
{
    for (int i = 0; i < nexpects; i++)
        printf("expect %s %ld\n", expects[i].name, expects[i].n);
    fflush(stdout);
}

#endif
