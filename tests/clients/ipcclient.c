/* Device memory shared between two programs through IPC handles, as
 * NVIDIA's simpleIPC shares it: the parent exports an allocation of its
 * own pages and a small one sharing a page, a child process (a program of
 * its own: exec'd) opens both, reads the parent's bytes, writes its own,
 * and the parent reads them; then what may not be opened: a handle of
 * memory freed since, a forged one, and misuse of what was opened. Prints
 * what each program sees, so local and remote runs compare (the H200's
 * driver prints the same). With "vmm", the same of a physical allocation, as
 * NVIDIA's memMapIPCDrv shares it: exported as a file descriptor the child
 * inherits, imported and mapped there (locally as remotely). */
#include "common.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

enum { BIG = 3 << 20, SMALL = 4096 };

static void hex(char *out, const CUipcMemHandle *h)
{
    for (int i = 0; i < 64; i++)
        sprintf(out + 2 * i, "%02x", (unsigned char)h->reserved[i]);
}

static CUipcMemHandle unhex(const char *s)
{
    CUipcMemHandle h;
    for (int i = 0; i < 64; i++) {
        unsigned v;
        sscanf(s + 2 * i, "%2x", &v);
        h.reserved[i] = (char)v;
    }
    return h;
}

/* Whether all n bytes at device address p are v. */
static int all(CUdeviceptr p, size_t n, unsigned char v)
{
    unsigned char *b = malloc(n);
    CHECK(cuMemcpyDtoH_v2(b, p, n));
    size_t i = 0;
    while (i < n && b[i] == v)
        i++;
    free(b);
    return i == n;
}

static int child(const char *what, const char *a, const char *b)
{
    primary_context();
    CUdeviceptr big, small;
    if (strcmp(what, "open")) { /* a handle that opens nothing */
        printf("%s handle opened: %s\n", what, result_name(cuIpcOpenMemHandle_v2(&big, unhex(a), 0)));
        return 0;
    }
    CHECK(cuIpcOpenMemHandle_v2(&big, unhex(a), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK(cuIpcOpenMemHandle_v2(&small, unhex(b), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    size_t n = 0;
    CHECK(cuMemGetAddressRange_v2(NULL, &n, small + 100));
    printf("child: the parent's bytes: %s %s; the small one's size %zu\n", all(big, BIG, 0x11) ? "yes" : "no",
           all(small, SMALL, 0x22) ? "yes" : "no", n);
    CHECK(cuMemsetD8_v2(big, 0x33, BIG));
    CHECK(cuMemsetD8_v2(small, 0x44, SMALL));
    CHECK(cuCtxSynchronize());
    printf("child: freed as its own: %s\n", result_name(cuMemFree_v2(small)));
    CHECK(cuIpcCloseMemHandle(big));
    CHECK(cuIpcCloseMemHandle(small));
    printf("child: closed again: %s\n", result_name(cuIpcCloseMemHandle(small)));
    return 0;
}

static int spawn(const char *what, const char *a, const char *b);

/* The child of "vmm": the allocation behind descriptor fd, mapped here. */
static int vmm_child(int fd)
{
    primary_context();
    CUmemGenericAllocationHandle h;
    int null = open("/dev/null", O_RDONLY);
    printf("child: /dev/null imported: %s\n",
           cuMemImportFromShareableHandle(&h, (void *)(intptr_t)null, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ? "no"
                                                                                                             : "yes");
    CHECK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    size_t g;
    CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, g, 0, 0, 0));
    CHECK(cuMemMap(va, g, 0, h, 0));
    CHECK(cuMemRelease(h)); /* the mapping keeps it */
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(va, g, &acc, 1));
    printf("child: the parent's bytes: %s\n", all(va, g, 0x55) ? "yes" : "no");
    CHECK(cuMemsetD8_v2(va, 0x66, g));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemUnmap(va, g));
    CHECK(cuMemAddressFree(va, g));
    return 0;
}

static int vmm(void)
{
    primary_context();
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    size_t g;
    CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    CHECK(cuMemCreate(&h, g, &prop, 0));
    CHECK(cuMemAddressReserve(&va, g, 0, 0, 0));
    CHECK(cuMemMap(va, g, 0, h, 0));
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(va, g, &acc, 1));
    CHECK(cuMemsetD8_v2(va, 0x55, g));
    CHECK(cuCtxSynchronize());
    int fd = -1;
    CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    char arg[16];
    snprintf(arg, sizeof arg, "%d", fd);
    int st = spawn("vmm", arg, arg);
    printf("parent: the child's bytes: %s (child exit %d)\n", all(va, g, 0x66) ? "yes" : "no", st);
    close(fd);
    CHECK(cuMemUnmap(va, g));
    CHECK(cuMemRelease(h));
    CHECK(cuMemAddressFree(va, g));
    printf("ipcclient vmm: ok\n");
    return 0;
}

/* Runs this program again with its arguments; its exit status. For "vmm",
 * a is a descriptor the child keeps (a shareable handle closes on exec),
 * as descriptor 100. */
static int spawn(const char *what, const char *a, const char *b)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!strcmp(what, "vmm") && dup2(atoi(a), 100) == 100)
            a = b = "100";
        execl("/proc/self/exe", "ipcclient", "child", what, a, b, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "child"))
        return !strcmp(argv[2], "vmm") ? vmm_child(atoi(argv[3])) : child(argv[2], argv[3], argv[4]);
    if (argc == 2 && !strcmp(argv[1], "vmm"))
        return vmm();
    primary_context();
    CUdeviceptr big, pad, small;
    CHECK(cuMemAlloc_v2(&big, BIG));
    CHECK(cuMemAlloc_v2(&pad, 1000)); /* the small one not at its page's start */
    CHECK(cuMemAlloc_v2(&small, SMALL));
    CHECK(cuMemsetD8_v2(big, 0x11, BIG));
    CHECK(cuMemsetD8_v2(small, 0x22, SMALL));
    CHECK(cuCtxSynchronize());
    CUipcMemHandle hb, hs, h;
    CHECK(cuIpcGetMemHandle(&hb, big));
    CHECK(cuIpcGetMemHandle(&hs, small));
    printf("inside an allocation: %s\n", result_name(cuIpcGetMemHandle(&h, big + 4096)));
    printf("no allocation: %s\n", result_name(cuIpcGetMemHandle(&h, 8)));
    printf("no handle: %s\n", result_name(cuIpcGetMemHandle(NULL, big)));
    char a[129], b[129];
    hex(a, &hb);
    hex(b, &hs);
    int st = spawn("open", a, b);
    printf("parent: the child's bytes: %s %s (child exit %d)\n", all(big, BIG, 0x33) ? "yes" : "no",
           all(small, SMALL, 0x44) ? "yes" : "no", st);
    CHECK(cuMemFree_v2(small));
    spawn("freed", b, b);
    CUipcMemHandle forged = hb;
    forged.reserved[16] ^= 1; /* another secret */
    hex(a, &forged);
    spawn("forged", a, a);
    memset(&forged, 0, sizeof forged);
    hex(a, &forged);
    spawn("zero", a, a);
    CHECK(cuMemFree_v2(big));
    CHECK(cuMemFree_v2(pad));
    printf("ipcclient: ok\n");
    return 0;
}
