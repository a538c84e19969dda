/* For every hooked variant: dlsym on the driver handle and cuGetProcAddress
 * (with the variant's own cudaVersion and stream flags) must both return the
 * exported function of exactly that name: the shim's wrapper under the shim
 * (argv[1] == "shim"), the driver's own function without it. Unhooked
 * entry points must always come back as the driver's. */
#include "common.h"
#include "variants_gen.h"

static int bad;

static void expect_at(const char *how, const char *name, void *p, const char *lib)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_sname || strcmp(info.dli_sname, name) != 0 ||
        info.dli_saddr != p || !strstr(info.dli_fname, lib)) {
        printf("MISMATCH %s %s: got %s in %s\n", how, name, p && info.dli_sname ? info.dli_sname : "(none)",
               p ? info.dli_fname : "(null)");
        bad++;
    }
}

int main(int argc, char **argv)
{
    int shim = argc > 1 && !strcmp(argv[1], "shim");
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!cuda || !nvml) {
        fprintf(stderr, "hookmap: %s\n", dlerror());
        return 1;
    }
    fg_pfn_cuGetProcAddress_v2 gpa = (fg_pfn_cuGetProcAddress_v2)dlsym(cuda, "cuGetProcAddress_v2");
    int n = (int)(sizeof fg_variants / sizeof fg_variants[0]), checked = 0;
    for (int i = 0; i < n; i++) {
        const struct fg_variant *v = &fg_variants[i];
        const char *lib = shim ? "libflexgv" : (v->nvml ? "libnvidia-ml" : "libcuda");
        expect_at("dlsym", v->name, dlsym(v->nvml ? nvml : cuda, v->name), lib);
        if (!v->nvml) {
            void *p = NULL;
            cuuint64_t flags = v->per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
            CUdriverProcAddressQueryResult st;
            if (gpa(v->base, &p, v->version, flags, &st) != CUDA_SUCCESS) {
                printf("MISMATCH cuGetProcAddress %s@%d: not found\n", v->base, v->version);
                bad++;
            } else {
                expect_at("cuGetProcAddress", v->name, p, lib);
            }
        }
        checked++;
    }
    static const char *unhooked[] = {"cuDeviceGetPCIBusId", "cuCtxGetId"};
    for (int i = 0; i < 2; i++) {
        void *p = NULL;
        expect_at("dlsym", unhooked[i], dlsym(cuda, unhooked[i]), "libcuda");
        CHECK(gpa(unhooked[i], &p, 13000, 0, NULL));
        expect_at("cuGetProcAddress", unhooked[i], p, "libcuda");
    }
    printf("hookmap: %d variants checked, %d mismatches\n", checked, bad);
    return bad != 0;
}
