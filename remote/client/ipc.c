/* What names a physical allocation or an event to another program the
 * same host serves (remote/executor/ipc.c); cuMemAlloc memory's handles
 * are the arena's (arena.c). A shareable handle is a file descriptor of
 * the program's, which it may send to another process: a file holding the
 * token the executor gave, which the other program's executor presents to
 * this one's. */
#include "client.h"

#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TOKEN 64

FGR_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                 CUmemAllocationHandleType handleType, unsigned long long flags)
{
    if (!fgr_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!shareableHandle || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return fgr_unsupported(-1, "cuMemExportToShareableHandle", "a handle type other than a POSIX file descriptor");
    char token[TOKEN];
    CUresult r = fgrIpcExportHandle(handle, token);
    if (r != CUDA_SUCCESS)
        return r;
    int fd = (int)syscall(SYS_memfd_create, "flexgv-shareable", 0u);
    if (fd < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    if (pwrite(fd, token, sizeof token, 0) != (ssize_t)sizeof token) {
        close(fd);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                   CUmemAllocationHandleType shHandleType)
{
    if (!fgr_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return fgr_unsupported(-1, "cuMemImportFromShareableHandle", "a handle type other than a POSIX file descriptor");
    char token[TOKEN];
    if (pread((int)(intptr_t)osHandle, token, sizeof token, 0) != (ssize_t)sizeof token)
        return CUDA_ERROR_INVALID_VALUE; /* not a file cuMemExportToShareableHandle gave */
    return fgrIpcImportHandle(handle, token);
}

FGR_EXPORT CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    return fgrIpcOpenEvent(phEvent, handle.reserved);
}
