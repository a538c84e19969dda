/* NVML for the test clients: the versioned names, and NCHECK, which ends
 * the program (exit 1) when a call fails, saying which. */
#ifndef FLEXGV_TESTS_NVMLCHECK_H
#define FLEXGV_TESTS_NVMLCHECK_H

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>
#include <stdio.h>

#define NCHECK(call)                                                          \
    do {                                                                      \
        nvmlReturn_t r_ = (call);                                             \
        if (r_ != NVML_SUCCESS) {                                             \
            fprintf(stderr, "%s failed: %s\n", #call, nvmlErrorString(r_));   \
            return 1;                                                         \
        }                                                                     \
    } while (0)

#endif
