/* Reads driver entry point names, one a line, and checks that the
 * libcuda.so.1 on the library path exports each (dlsym, as the dynamic
 * linker binds a -lcuda program) and that cuGetProcAddress_v2 resolves it
 * by its base name at CUDA 13.0 (as the runtime resolves it), with the
 * per-thread default stream flag for _ptsz and _ptds variants. A line
 * "BASE VERSION [pt]" (a typedef of the driver's headers) is only
 * resolved, at that version (with the flag after pt). Prints
 * "missing NAME export" or "missing NAME procaddr STATUS" for each that
 * fails, then "checked N missing M". Called without a context: entry
 * points resolve before cuInit. */
#include "common.h"

static void base_of(const char *name, char *base, size_t n)
{
    snprintf(base, n, "%s", name);
    size_t len = strlen(base);
    if (len > 5 && (!strcmp(base + len - 5, "_ptsz") || !strcmp(base + len - 5, "_ptds")))
        base[len -= 5] = 0;
    char *v = strrchr(base, '_');
    if (v && v[1] == 'v' && v[2] >= '0' && v[2] <= '9' && strspn(v + 2, "0123456789") == strlen(v + 2))
        *v = 0;
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    fg_pfn_cuGetProcAddress_v2 gpa = (fg_pfn_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        fprintf(stderr, "no cuGetProcAddress_v2\n");
        return 1;
    }
    char name[256], base[256];
    int checked = 0, missing = 0;
    while (fgets(name, sizeof name, stdin)) {
        name[strcspn(name, "\r\n")] = 0;
        if (!name[0])
            continue;
        checked++;
        int version = 13000, pt;
        char flag[8] = "";
        if (sscanf(name, "%255s %d %7s", base, &version, flag) >= 2) {
            pt = !strcmp(flag, "pt");
            snprintf(name, sizeof name, "%s@%d%s", base, version, pt ? "_pt" : "");
        } else {
            if (!dlsym(h, name)) {
                printf("missing %s export\n", name);
                missing++;
            }
            size_t len = strlen(name);
            pt = len > 5 && (!strcmp(name + len - 5, "_ptsz") || !strcmp(name + len - 5, "_ptds"));
            base_of(name, base, sizeof base);
        }
        void *fn = NULL;
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CUresult r = gpa(base, &fn, version, pt ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0, &st);
        if (r != CUDA_SUCCESS || !fn || st != CU_GET_PROC_ADDRESS_SUCCESS) {
            printf("missing %s procaddr %d\n", name, (int)st);
            missing++;
        }
    }
    printf("checked %d missing %d\n", checked, missing);
    return 0;
}
