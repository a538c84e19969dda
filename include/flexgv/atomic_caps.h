/* What cuDeviceGetHostAtomicCapabilities and cuDeviceGetP2PAtomicCapabilities
 * answer: the request checked, then each operation's capabilities on a link
 * with native atomics, or none. Shared by the simulated GPU and the
 * remoting client (which gives no host-native atomics). */
#ifndef FLEXGV_ATOMIC_CAPS_H
#define FLEXGV_ATOMIC_CAPS_H

#include "flexgv/cuda_types.h"

static inline CUresult fg_atomic_caps(unsigned int *caps, const CUatomicOperation *ops, unsigned int count, int native)
{
    enum {
        INT = CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED | CU_ATOMIC_CAPABILITY_SCALAR_32 |
              CU_ATOMIC_CAPABILITY_SCALAR_64,
        RED = INT | CU_ATOMIC_CAPABILITY_REDUCTION,
        FLT = CU_ATOMIC_CAPABILITY_SCALAR_32 | CU_ATOMIC_CAPABILITY_SCALAR_64,
    };
    static const unsigned int of[CU_ATOMIC_OPERATION_MAX] = {
        [CU_ATOMIC_OPERATION_INTEGER_ADD] = RED,     [CU_ATOMIC_OPERATION_INTEGER_MIN] = RED,
        [CU_ATOMIC_OPERATION_INTEGER_MAX] = RED,     [CU_ATOMIC_OPERATION_INTEGER_INCREMENT] = INT,
        [CU_ATOMIC_OPERATION_INTEGER_DECREMENT] = INT, [CU_ATOMIC_OPERATION_AND] = RED,
        [CU_ATOMIC_OPERATION_OR] = RED,              [CU_ATOMIC_OPERATION_XOR] = RED,
        [CU_ATOMIC_OPERATION_EXCHANGE] = INT,        [CU_ATOMIC_OPERATION_CAS] = INT | CU_ATOMIC_CAPABILITY_SCALAR_128,
        [CU_ATOMIC_OPERATION_FLOAT_ADD] = FLT | CU_ATOMIC_CAPABILITY_REDUCTION | CU_ATOMIC_CAPABILITY_VECTOR_32x4,
        [CU_ATOMIC_OPERATION_FLOAT_MIN] = FLT,       [CU_ATOMIC_OPERATION_FLOAT_MAX] = FLT,
    };
    if (!caps || !ops || !count)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < count; i++)
        if ((unsigned int)ops[i] >= CU_ATOMIC_OPERATION_MAX)
            return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < count; i++)
        caps[i] = native ? of[ops[i]] : 0;
    return CUDA_SUCCESS;
}

#endif
