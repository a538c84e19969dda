/* Tensor maps (cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col and its
 * wide form, cuTensorMapReplaceAddress): the driver's checks on what it is given,
 * from the driver API reference, and an encoding of our own (the real one
 * is opaque); a map is only ever read back by the program, never by a
 * simulated kernel. */
#include "sim.h"

#include <stdint.h>
#include <string.h>

#define MAP_MAGIC 0x54454e534f524d41ull

static int aligned(const void *p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

/* Bytes of an element of each data type; 0 for the packed sub-byte ones. */
static unsigned elem_bytes(unsigned type)
{
    static const unsigned char bytes[16] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4, 0, 0, 0};
    return type < 16 ? bytes[type] : 0;
}

/* Without interleave, a swizzled row of the box (inner elements of the
 * type) spans no more than the swizzle's 32, 64 or 128 bytes; the 128-byte
 * atom swizzles (4 and up) are compute capability 10's, refused here as an
 * H100's driver refuses them. */
static int swizzle_fits(unsigned type, unsigned interleave, unsigned swizzle, uint64_t inner)
{
    if (swizzle >= 4)
        return 0;
    return interleave || !swizzle || !elem_bytes(type) || inner * elem_bytes(type) <= 16u << swizzle;
}

/* The checks both encodings share; interleave (0 none, 1 16 bytes, 2 32
 * bytes) sets the alignment of the address and strides. */
static CUresult check(CUtensorMap *map, unsigned type, cuuint32_t rank, cuuint32_t min_rank, void *addr,
                      const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *estrides,
                      unsigned interleave, unsigned swizzle, unsigned l2, unsigned oob)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    uintptr_t align = interleave == 2 ? 32 : 16;
    if (!map || !aligned(map, 64) || rank < min_rank || rank > 5 || !addr || !aligned(addr, align) || !dims ||
        (rank > 1 && !strides) || !estrides || type > 15 || interleave > 2 || swizzle > 4 || l2 > 3 || oob > 1)
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i < rank; i++)
        if (dims[i] == 0 || dims[i] > (1ull << 32) || estrides[i] == 0 || estrides[i] > 8)
            return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i + 1 < rank; i++)
        if (strides[i] % align || strides[i] >= (1ull << 40))
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Words: magic, address, then the shape folded in, so that different
 * arguments give different maps. */
static void encode(CUtensorMap *map, uint64_t kind, void *addr, cuuint32_t rank, const cuuint64_t *dims,
                   const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *estrides, uint64_t modes)
{
    memset(map, 0, sizeof *map);
    map->opaque[0] = MAP_MAGIC ^ kind;
    map->opaque[1] = (uint64_t)(uintptr_t)addr;
    map->opaque[2] = modes | (uint64_t)rank << 56;
    for (cuuint32_t i = 0; i < rank; i++) {
        map->opaque[3 + i] = dims[i] | (uint64_t)estrides[i] << 40 | (uint64_t)(box ? box[i] : 0) << 48;
        if (i + 1 < rank)
            map->opaque[8 + i] = strides[i];
    }
}

SIM_EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                           cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
                                           const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
                                           const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                           CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                           CUtensorMapFloatOOBfill oobFill)
{
    CUresult r = check(tensorMap, tensorDataType, tensorRank, 1, globalAddress, globalDim, globalStrides,
                       elementStrides, interleave, swizzle, l2Promotion, oobFill);
    if (r)
        return r;
    if (!boxDim)
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i < tensorRank; i++)
        if (boxDim[i] == 0 || boxDim[i] > 256)
            return CUDA_ERROR_INVALID_VALUE;
    if (!swizzle_fits(tensorDataType, interleave, swizzle, boxDim[0]))
        return CUDA_ERROR_INVALID_VALUE;
    encode(tensorMap, 1, globalAddress, tensorRank, globalDim, globalStrides, boxDim, elementStrides,
           (uint64_t)tensorDataType | (uint64_t)interleave << 8 | (uint64_t)swizzle << 16 |
               (uint64_t)l2Promotion << 24 | (uint64_t)oobFill << 32);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                            cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
                                            const cuuint64_t *globalStrides, const int *pixelBoxLowerCorner,
                                            const int *pixelBoxUpperCorner, cuuint32_t channelsPerPixel,
                                            cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
                                            CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                            CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
    CUresult r = check(tensorMap, tensorDataType, tensorRank, 3, globalAddress, globalDim, globalStrides,
                       elementStrides, interleave, swizzle, l2Promotion, oobFill);
    if (r)
        return r;
    if (!pixelBoxLowerCorner || !pixelBoxUpperCorner || channelsPerPixel == 0 || channelsPerPixel > 256 ||
        pixelsPerColumn == 0 || pixelsPerColumn > 1024 || !swizzle_fits(tensorDataType, interleave, swizzle, channelsPerPixel))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t corners = 0;
    for (cuuint32_t i = 0; i + 2 < tensorRank; i++)
        corners = corners * 31 + (uint64_t)(pixelBoxLowerCorner[i] & 0xffff) * 65536 + (pixelBoxUpperCorner[i] & 0xffff);
    encode(tensorMap, 2, globalAddress, tensorRank, globalDim, globalStrides, NULL, elementStrides,
           (uint64_t)tensorDataType | (uint64_t)interleave << 8 | (uint64_t)swizzle << 16 |
               (uint64_t)l2Promotion << 24 | (uint64_t)oobFill << 32);
    tensorMap->opaque[13] = corners;
    tensorMap->opaque[14] = (uint64_t)channelsPerPixel << 32 | pixelsPerColumn;
    return CUDA_SUCCESS;
}

/* Rows loaded along W only (CUDA 12.8): one corner offset each side of W,
 * in the W mode (pixelsPerColumn columns a row) or the W128 one. */
SIM_EXPORT CUresult cuTensorMapEncodeIm2colWide(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                                cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
                                                const cuuint64_t *globalStrides, int pixelBoxLowerCornerWidth,
                                                int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
                                                cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
                                                CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
                                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                                CUtensorMapFloatOOBfill oobFill)
{
    CUresult r = check(tensorMap, tensorDataType, tensorRank, 3, globalAddress, globalDim, globalStrides,
                       elementStrides, interleave, swizzle, l2Promotion, oobFill);
    if (r)
        return r;
    if (mode > CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128 || channelsPerPixel == 0 || channelsPerPixel > 256 ||
        !swizzle_fits(tensorDataType, interleave, swizzle, channelsPerPixel) ||
        pixelsPerColumn == 0 || pixelsPerColumn > 1024 || pixelBoxLowerCornerWidth < -32768 ||
        pixelBoxLowerCornerWidth > 32767 || pixelBoxUpperCornerWidth < -32768 || pixelBoxUpperCornerWidth > 32767)
        return CUDA_ERROR_INVALID_VALUE;
    encode(tensorMap, 3, globalAddress, tensorRank, globalDim, globalStrides, NULL, elementStrides,
           (uint64_t)tensorDataType | (uint64_t)interleave << 8 | (uint64_t)swizzle << 16 |
               (uint64_t)l2Promotion << 24 | (uint64_t)oobFill << 32 | (uint64_t)mode << 40);
    tensorMap->opaque[13] = (uint64_t)(pixelBoxLowerCornerWidth & 0xffff) << 16 | (pixelBoxUpperCornerWidth & 0xffff);
    tensorMap->opaque[14] = (uint64_t)channelsPerPixel << 32 | pixelsPerColumn;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!tensorMap || !aligned(tensorMap, 64) || !globalAddress || !aligned(globalAddress, 16) ||
        (tensorMap->opaque[0] != (MAP_MAGIC ^ 1) && tensorMap->opaque[0] != (MAP_MAGIC ^ 2) &&
         tensorMap->opaque[0] != (MAP_MAGIC ^ 3)))
        return CUDA_ERROR_INVALID_VALUE;
    tensorMap->opaque[1] = (uint64_t)(uintptr_t)globalAddress;
    return CUDA_SUCCESS;
}
