/* Benchmark harness: the executor's decoding of queued requests
 * (cuMemsetD8Async, cuMemcpyDtoDAsync_v2, cuEventRecord) over a driver
 * that does nothing, with a connection holding HANDLES streams and events
 * and RANGES allocations, so that the cost of checking each handle and
 * device address can be counted under callgrind (bench/executor-checks.sh).
 *     executor_checks ITERATIONS [HANDLES [RANGES]] */
#include "executor.h"

#include <stdio.h>
#include <stdlib.h>

static CUresult nothing(void) { return CUDA_SUCCESS; }

static void put(struct fgr_buf *b, const uint64_t *v, int n)
{
    b->len = 0;
    for (int i = 0; i < n; i++)
        fgr_put_u64(b, v[i]);
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    long handles = argc > 2 ? atol(argv[2]) : 1000, ranges = argc > 3 ? atol(argv[3]) : 1000;
    for (int op = 1; op < FGR_NUM_OPS; op++)
        fgr_real[op] = (void *)nothing;
    for (long i = 0; i < ranges; i++)
        fgr_mem_add(0x100000000ull + (uint64_t)i * 0x200000, 0x100000, 0, 0);
    for (long i = 1; i <= handles; i++) {
        fgr_add(FGR_H_CUstream, 0x7f0000000000ull + (uint64_t)i * 64, 0, 0);
        fgr_add(FGR_H_CUevent, 0x7e0000000000ull + (uint64_t)i * 64, 0, 0);
    }
    uint64_t mid = 0x100000000ull + (uint64_t)(ranges / 2) * 0x200000, stream = 0x7f0000000000ull + (uint64_t)(handles / 2) * 64,
             event = 0x7e0000000000ull + (uint64_t)(handles / 3 + 1) * 64;
    /* Requests name them as a client does: by the names it was given. */
    fgr_out_n(FGR_H_CUstream, &stream, 1);
    fgr_out_n(FGR_H_CUevent, &event, 1);
    struct fgr_buf memset_args = {0}, copy_args = {0}, record_args = {0}, w = {0};
    put(&memset_args, (uint64_t[]){mid, 7, 4096, stream}, 4);
    put(&copy_args, (uint64_t[]){mid, mid + 0x10000, 4096, stream}, 4);
    put(&record_args, (uint64_t[]){event, stream}, 2);
    struct {
        unsigned op;
        struct fgr_buf *args;
    } reqs[] = {{FGR_OP_cuMemsetD8Async, &memset_args}, {FGR_OP_cuMemcpyDtoDAsync_v2, &copy_args}, {FGR_OP_cuEventRecord, &record_args}};
    long refused = 0;
    for (long i = 0; i < iters; i++)
        for (int k = 0; k < 3; k++) {
            struct fgr_rd rd = {reqs[k].args->p, reqs[k].args->len, 0};
            w.len = 0;
            fgr_put_u32(&w, 0);
            if (fgr_serve(reqs[k].op, &rd, &w, CUDA_SUCCESS) || w.p[4] != 0)
                refused++;
        }
    if (refused)
        fprintf(stderr, "executor_checks: %ld requests refused\n", refused);
    return refused != 0;
}
