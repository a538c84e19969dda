/* JIT linking (cuLink*). The simulated GPU links its own modules: each
 * input is one (FLEXGV-SIM-MODULE text), whatever its input type says,
 * and the linked image is their kernels and variables under one header.
 * Anything else (PTX, a real cubin) is refused with
 * CUDA_ERROR_INVALID_IMAGE, as a linker refuses an input it cannot read.
 * The image belongs to the state until it is destroyed, as the driver's
 * does. */
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINK_MAGIC 0x4c494e4bu

static const char HEADER[] = "FLEXGV-SIM-MODULE\n";

struct sim_link {
    uint32_t magic;
    char *text; /* HEADER, then each input's lines */
    size_t len;
    int inputs;
    char *log[2]; /* the program's info and error logs, as a driver writes them */
    size_t nlog[2];
};

/* A line into log i (0: info, 1: error), where the program gave one. */
static void say(struct sim_link *l, int i, const char *fmt, const char *what, size_t n)
{
    if (l->log[i] && l->nlog[i])
        snprintf(l->log[i], l->nlog[i], fmt, what, n);
}

static struct sim_link *as_link(CUlinkState s)
{
    struct sim_link *l = (struct sim_link *)s;
    return l && l->magic == LINK_MAGIC ? l : NULL;
}

SIM_EXPORT CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
                                    CUlinkState *stateOut)
{
    SIM_GATE();
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if (!stateOut)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_link *l = calloc(1, sizeof *l);
    if (!l || !(l->text = strdup(HEADER))) {
        free(l);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* The logs, written at later calls (their sizes as given: the option
     * checks below write a load's log into them). */
    for (unsigned i = 0; options && optionValues && i < numOptions; i++)
        if (options[i] == CU_JIT_INFO_LOG_BUFFER || options[i] == CU_JIT_ERROR_LOG_BUFFER)
            l->log[options[i] == CU_JIT_ERROR_LOG_BUFFER] = optionValues[i];
        else if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            l->nlog[options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES] = (uintptr_t)optionValues[i];
    if ((r = sim_jit_options(numOptions, options, optionValues)) != CUDA_SUCCESS) {
        free(l->text);
        free(l);
        return r;
    }
    l->magic = LINK_MAGIC;
    l->len = sizeof HEADER - 1;
    *stateOut = (CUlinkState)l;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
                                     const char *name, unsigned int numOptions, CUjit_option *options,
                                     void **optionValues)
{
    SIM_GATE();
    (void)name;
    struct sim_link *l = as_link(state);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!data || !size || (unsigned)type > CU_JIT_INPUT_LIBRARY)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_jit_options(numOptions, options, optionValues);
    if (r)
        return r;
    const char *in = data;
    size_t n = strnlen(in, size);
    if (n < sizeof HEADER - 1 || memcmp(in, HEADER, sizeof HEADER - 1) != 0) {
        say(l, 1, "error   : input %s is not a module of the simulated GPU (%zu bytes)", name ? name : "(unnamed)", size);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    in += sizeof HEADER - 1;
    n -= sizeof HEADER - 1;
    char *t = realloc(l->text, l->len + n + 2);
    if (!t)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(t + l->len, in, n);
    l->len += n;
    if (n && t[l->len - 1] != '\n')
        t[l->len++] = '\n';
    t[l->len] = 0;
    l->text = t;
    l->inputs++;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
                                     unsigned int numOptions, CUjit_option *options, void **optionValues)
{
    SIM_GATE();
    if (!as_link(state))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!path)
        return CUDA_ERROR_INVALID_VALUE;
    char buf[65536];
    long n = sim_read_text(path, buf, sizeof buf);
    if (n < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    return cuLinkAddData_v2(state, type, buf, (size_t)n + 1, path, numOptions, options, optionValues);
}

SIM_EXPORT CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
    SIM_GATE();
    struct sim_link *l = as_link(state);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!cubinOut || !sizeOut)
        return CUDA_ERROR_INVALID_VALUE;
    if (!strstr(l->text, "\nkernel ")) {
        say(l, 1, "error   : %s to link (%zu inputs)", "no kernel", (size_t)l->inputs);
        return CUDA_ERROR_INVALID_IMAGE; /* nothing to link */
    }
    say(l, 0, "info    : %s: %zu inputs linked", "simulated GPU", (size_t)l->inputs);
    *cubinOut = l->text;
    *sizeOut = l->len + 1;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuLinkDestroy(CUlinkState state)
{
    SIM_GATE();
    struct sim_link *l = as_link(state);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    l->magic = 0;
    free(l->text);
    free(l);
    return CUDA_SUCCESS;
}
