/* What names a physical allocation, a pool or an event to another program the
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

/* A file of the program's holding token: the shareable handle. */
static CUresult to_file(const char *token, void *shareableHandle)
{
    /* Closed on exec, as the driver's is. */
    int fd = (int)syscall(SYS_memfd_create, "flexgv-shareable", 1u /* MFD_CLOEXEC */);
    if (fd < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    if (pwrite(fd, token, TOKEN, 0) != TOKEN) {
        close(fd);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

/* Whether a call on shareable handles goes on (CUDA_SUCCESS), else its
 * answer: POSIX file descriptors only. */
static CUresult shareable(const char *name, const void *out, CUmemAllocationHandleType type, unsigned long long flags)
{
    if (!fgr_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return fgr_unsupported(-1, name, "a handle type other than a POSIX file descriptor");
    return CUDA_SUCCESS;
}

/* The token in such a file: 0, or -1 for a file that holds none. */
static int from_file(void *osHandle, char *token)
{
    return pread((int)(intptr_t)osHandle, token, TOKEN, 0) == TOKEN ? 0 : -1;
}

FGR_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                 CUmemAllocationHandleType handleType, unsigned long long flags)
{
    CUresult r = shareable("cuMemExportToShareableHandle", shareableHandle, handleType, flags);
    if (r != CUDA_SUCCESS)
        return r;
    char token[TOKEN];
    r = fgrIpcExportHandle(handle, token);
    return r == CUDA_SUCCESS ? to_file(token, shareableHandle) : r;
}

FGR_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                   CUmemAllocationHandleType shHandleType)
{
    CUresult r = shareable("cuMemImportFromShareableHandle", handle, shHandleType, 0);
    if (r != CUDA_SUCCESS)
        return r;
    char token[TOKEN];
    if (from_file(osHandle, token) != 0)
        return CUDA_ERROR_INVALID_VALUE; /* not a file cuMemExportToShareableHandle gave */
    return fgrIpcImportHandle(handle, token);
}

FGR_EXPORT CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                     CUmemAllocationHandleType handleType, unsigned long long flags)
{
    CUresult r = shareable("cuMemPoolExportToShareableHandle", handle_out, handleType, flags);
    if (r != CUDA_SUCCESS)
        return r;
    char token[TOKEN];
    r = fgrIpcExportPool(pool, token);
    return r == CUDA_SUCCESS ? to_file(token, handle_out) : r;
}

FGR_EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                       CUmemAllocationHandleType handleType, unsigned long long flags)
{
    CUresult r = shareable("cuMemPoolImportFromShareableHandle", pool_out, handleType, flags);
    if (r != CUDA_SUCCESS)
        return r;
    char token[TOKEN];
    if (from_file(handle, token) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return fgrIpcImportPool(pool_out, token);
}

FGR_EXPORT CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    return fgrIpcOpenEvent(phEvent, handle.reserved);
}
