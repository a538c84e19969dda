/* One rank of a data-parallel training job on the simulated GPU:
 *     ddprank RANK STEP_US ALLREDUCE_US STEPS
 * On device RANK, each step runs a kernel of STEP_US (forward and
 * backward), then a collective of ALLREDUCE_US that its peers' must meet
 * (FLEXGV_SIM_COLLECTIVE names the job and its ranks, as a communicator
 * does), then synchronizes, as reading the loss does. Prints "ready", then
 * starts at the first line of stdin (or its end), so that the ranks of
 * several jobs can start together, and reports
 *     steps N elapsed_s E rate R
 * with R the steps per second of device time (events around the steps:
 * what a loaded host delays is not the device's). Every rank runs the same
 * STEPS: a rank that stopped early would leave its peers' last collective
 * waiting. */
#include "common.h"

int main(int argc, char **argv)
{
    if (argc != 5 || atoi(argv[4]) < 1) {
        fprintf(stderr, "usage: ddprank RANK STEP_US ALLREDUCE_US STEPS\n");
        return 2;
    }
    int rank = atoi(argv[1]), steps = atoi(argv[4]);
    char module[160];
    snprintf(module, sizeof module, "FLEXGV-SIM-MODULE\nkernel step %s\nkernel allreduce %s collective\n", argv[2],
             argv[3]);
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction step, allreduce;
    CUstream s;
    CUevent t0, t1;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, rank));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, module));
    CHECK(cuModuleGetFunction(&step, mod, "step"));
    CHECK(cuModuleGetFunction(&allreduce, mod, "allreduce"));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&t0, 0));
    CHECK(cuEventCreate(&t1, 0));
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        line[0] = 0;
    CHECK(cuEventRecord(t0, s));
    for (int i = 0; i < steps; i++) {
        CHECK(cuLaunchKernel(step, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
        CHECK(cuLaunchKernel(allreduce, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
        CHECK(cuStreamSynchronize(s));
    }
    CHECK(cuEventRecord(t1, s));
    CHECK(cuEventSynchronize(t1));
    float ms;
    CHECK(cuEventElapsedTime(&ms, t0, t1));
    double e = ms / 1e3;
    printf("steps %d elapsed_s %.3f rate %.1f\n", steps, e, steps / e);
    return 0;
}
