/* Pointer attributes as the driver writes them (CUDA 13.0, driver 580 on
 * an H100): how many bytes each takes, each one's value for memory the
 * driver knows, and what cuPointerGetAttributes answers for memory it does
 * not know (pageable, freed, unregistered), where each attribute alone
 * answers CUDA_ERROR_INVALID_VALUE. Shared by the simulated GPU and the
 * remoting client (for the program's pinned memory, which is its own). */
#ifndef FLEXGV_POINTER_ATTRS_H
#define FLEXGV_POINTER_ATTRS_H
#include <stdint.h>
#include <string.h>

#include "flexgv/cuda_types.h"

/* The bytes an attribute's value takes; 0 for one the driver does not
 * have. */
static inline size_t fg_pointer_attr_size(int attr)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        return sizeof(int);
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        return sizeof(uint64_t);
    case 5: /* P2P_TOKENS: two 64-bit tokens */
        return 2 * sizeof(uint64_t);
    }
    return 0;
}

/* What the plural call writes of memory it does not know: zeroes, but the
 * host pointer (the pointer itself) and the device ordinal (-2, which the
 * runtime passes on as cudaPointerAttributes.device); the range's start
 * and size are left as they were. */
static inline void fg_pointer_attr_unknown(int attr, void *data, CUdeviceptr ptr)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: memcpy(data, &ptr, sizeof ptr); return;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = -2; return;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return;
    }
    memset(data, 0, fg_pointer_attr_size(attr));
}
/* An allocation as the attributes tell it. */
struct fg_pointer_facts {
    CUcontext ctx;            /* NULL for a pool's memory */
    CUmemoryPool pool;        /* the pool it came from, if any */
    uint64_t base, size, id;  /* its range; BUFFER_ID and MEMORY_BLOCK_ID */
    uint64_t mapping;         /* the mapping it lies in: 2 MiB, 32 MiB a pool's, a registered range's own */
    int dev;                  /* DEVICE_ORDINAL */
    int host, managed;        /* pinned or registered host memory; managed memory */
    int device;               /* cuMemAlloc's (legacy IPC, RDMA, decompression) */
    unsigned sync_memops;     /* as set (managed memory's is 1) */
};

/* The attribute's value at ptr, inside the allocation f tells:
 * CUDA_ERROR_INVALID_VALUE for one it lacks (the host pointer of device
 * memory) or one the driver does not have. */
static inline CUresult fg_pointer_attr(int attr, void *data, CUdeviceptr ptr, const struct fg_pointer_facts *f)
{
    uint64_t v = 0;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: v = (uintptr_t)f->ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: v = f->host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: v = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!f->host && !f->managed)
            return CUDA_ERROR_INVALID_VALUE;
        v = ptr;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: v = f->managed || f->sync_memops; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: v = f->id; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: v = f->managed != 0; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: v = (uint32_t)f->dev; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: v = f->device != 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: v = f->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: v = f->size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: v = 1; break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: v = 0; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: v = CU_MEM_ACCESS_FLAGS_PROT_READWRITE; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: v = (uintptr_t)f->pool; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        v = f->mapping ? (f->size + f->mapping - 1) / f->mapping * f->mapping : f->size;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    if (fg_pointer_attr_size(attr) == sizeof(int)) {
        uint32_t w = (uint32_t)v;
        memcpy(data, &w, sizeof w);
    } else {
        memcpy(data, &v, sizeof v);
    }
    return CUDA_SUCCESS;
}
#endif
