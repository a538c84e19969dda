/* Batches of stream memory operations (cuStreamBatchMemOp): each
 * operation's address lies in the parameters, beyond what the generated
 * checks see, so each is checked here against the connection's memory
 * (at the program's address, translated where a move placed it
 * elsewhere) before the driver is given the batch. */
#include "executor.h"

#include <dlfcn.h>

typedef CUresult (*batch_fn)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int);
static batch_fn batch_v1, batch_v2;

/* 0 when every operation is one of the driver's, on the connection's
 * memory; the addresses translated in place. */
static CUresult check(unsigned int count, CUstreamBatchMemOpParams *ops)
{
    if (!ops)
        return count ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    for (unsigned int i = 0; i < count; i++) {
        CUstreamBatchMemOpType t = ops[i].operation;
        uint64_t width = t == CU_STREAM_MEM_OP_WAIT_VALUE_32 || t == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4
                       : t == CU_STREAM_MEM_OP_WAIT_VALUE_64 || t == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? 8
                                                                                                     : 0;
        if (!width) {
            if (t != CU_STREAM_MEM_OP_BARRIER && t != CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES)
                return CUDA_ERROR_INVALID_VALUE;
            continue;
        }
        /* the wait's and the write's address lie at the same place */
        uint64_t a = fgr_moved(ops[i].waitValue.address);
        if (!fgr_mem_in(a, width))
            return CUDA_ERROR_INVALID_VALUE;
        ops[i].waitValue.address = a;
    }
    return CUDA_SUCCESS;
}

static CUresult checked_v1(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    CUresult r = check(count, ops);
    return r ? r : batch_v1(s, count, ops, flags);
}

static CUresult checked_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    CUresult r = check(count, ops);
    return r ? r : batch_v2(s, count, ops, flags);
}

void fgr_memops_init(void *driver)
{
    *(void **)&batch_v1 = dlsym(driver, "cuStreamBatchMemOp");
    *(void **)&batch_v2 = dlsym(driver, "cuStreamBatchMemOp_v2");
    fgr_real[FGR_OP_cuStreamBatchMemOp] = batch_v1 ? (void *)checked_v1 : NULL;
    fgr_real[FGR_OP_cuStreamBatchMemOp_v2] = batch_v2 ? (void *)checked_v2 : NULL;
}
