/* Every other entry point of NVIDIA's nvml.h (the list is made from it at
 * build time): NVML_ERROR_NOT_SUPPORTED, said once per entry point on
 * stderr. Weak, so that nvml.c's answers win when the library is linked.
 * One argument-less definition serves every signature: the arguments are
 * ignored, and the caller removes them (as the C calling conventions of
 * the platforms the client builds on have it). Not compiled with nvml.h,
 * whose prototypes these definitions would contradict. */
#include <stdio.h>

#define NVML_ERROR_NOT_SUPPORTED 3

int fgn_unsupported(int *said, const char *name);

int fgn_unsupported(int *said, const char *name)
{
    if (!__atomic_exchange_n(said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "flexgv remote: %s is not supported remotely (NVML_ERROR_NOT_SUPPORTED)\n", name);
    return NVML_ERROR_NOT_SUPPORTED;
}

#define X(name)                                                        \
    int name(void) __attribute__((weak, visibility("default")));       \
    int name(void)                                                     \
    {                                                                  \
        static int said;                                               \
        return fgn_unsupported(&said, #name);                          \
    }
#include "nvml_names.def"
#undef X
