/* CUDA 1 and 2's forms of the device's attributes (cuDeviceGetProperties,
 * cuDeviceComputeCapability), which old programs still call, made from
 * cuDeviceGetAttribute's answers. Shared by the simulated GPU and the
 * remoting client. */
#ifndef FLEXGV_DEVPROP_H
#define FLEXGV_DEVPROP_H

#include "flexgv/cuda_types.h"

static inline CUresult fg_devprop(CUdevprop *prop, CUdevice dev, CUresult (*attr)(int *, CUdevice_attribute, CUdevice))
{
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    static const CUdevice_attribute a[] = {
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,          CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,           CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,           CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
        CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY,    CU_DEVICE_ATTRIBUTE_WARP_SIZE,
        CU_DEVICE_ATTRIBUTE_MAX_PITCH,                CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
        CU_DEVICE_ATTRIBUTE_CLOCK_RATE,               CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT,
    };
    int v[sizeof a / sizeof a[0]];
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        CUresult r = attr(&v[i], a[i], dev);
        if (r != CUDA_SUCCESS)
            return r;
    }
    *prop = (CUdevprop){v[0], {v[1], v[2], v[3]}, {v[4], v[5], v[6]}, v[7], v[8], v[9], v[10], v[11], v[12], v[13]};
    return CUDA_SUCCESS;
}

static inline CUresult fg_compute_capability(int *major, int *minor, CUdevice dev,
                                             CUresult (*attr)(int *, CUdevice_attribute, CUdevice))
{
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = attr(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    return r ? r : attr(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
}

#endif
