/* JIT linking as a program uses it (cuLinkCreate, cuLinkAddData,
 * cuLinkAddFile, cuLinkComplete, a module loaded from the linked image,
 * cuLinkDestroy), and its refusals; prints what it sees, so local and
 * remote runs compare.
 *   linker FILE   FILE: a module (the simulated GPU's text) to add by path */
#include "common.h"

#include <stdint.h>

static const char FILL[] = "FLEXGV-SIM-MODULE\nkernel fill 5 builtin=fill\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: linker FILE\n");
        return 2;
    }
    primary_context();

    char log[256] = "untouched", errors[40] = "untouched";
    CUjit_option o[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE,
                        CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *v[] = {log, (void *)(uintptr_t)sizeof log, (void *)(uintptr_t)1, errors, (void *)(uintptr_t)sizeof errors};
    CUlinkState st;
    CHECK(cuLinkCreate_v2(5, o, v, &st));
    CHECK(cuLinkAddData_v2(st, CU_JIT_INPUT_PTX, (void *)FILL, sizeof FILL, "fill", 0, NULL, NULL));
    CHECK(cuLinkAddFile_v2(st, CU_JIT_INPUT_CUBIN, argv[1], 0, NULL, NULL));
    char junk[] = "not a module";
    printf("junk added: %s\n", result_name(cuLinkAddData_v2(st, CU_JIT_INPUT_CUBIN, junk, sizeof junk, "junk", 0,
                                                             NULL, NULL)));
    printf("error log (cut to its buffer): \"%s\"\n", errors);
    printf("a missing file: %s\n",
           result_name(cuLinkAddFile_v2(st, CU_JIT_INPUT_CUBIN, "/nonexistent/k.cubin", 0, NULL, NULL)));
    void *image;
    size_t n;
    CHECK(cuLinkComplete(st, &image, &n));
    printf("linked: %zu bytes, \"%.*s\"\n", n, (int)strcspn(image, "\n"), (const char *)image);
    printf("info log: \"%s\"\n", log);

    CUmodule mod;
    CUfunction fill, other;
    CHECK(cuModuleLoadData(&mod, image));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    printf("the file's kernel: %s\n", result_name(cuModuleGetFunction(&other, mod, "other")));
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, 64));
    unsigned val = 42, back[16];
    int count = 16;
    void *params[] = {&d, &val, &count};
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
    CHECK(cuMemcpyDtoH_v2(back, d, sizeof back));
    printf("filled: %u %u\n", back[0], back[15]);
    CHECK(cuLinkDestroy(st));
    printf("completed after destroy: %s\n", result_name(cuLinkComplete(st, &image, &n)));

    CUlinkState empty;
    CUjit_option eo[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *ev[] = {errors, (void *)(uintptr_t)sizeof errors};
    CHECK(cuLinkCreate_v2(2, eo, ev, &empty));
    printf("nothing to link: %s\n", result_name(cuLinkComplete(empty, &image, &n)));
    printf("its error log: \"%s\"\n", errors);
    CHECK(cuLinkDestroy(empty));
    CHECK(cuModuleUnload(mod));
    CHECK(cuMemFree_v2(d));
    printf("linker: ok\n");
    return 0;
}
