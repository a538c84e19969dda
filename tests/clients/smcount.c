/* Prints what device 0 reports of its SMs, and whether this process is an
 * MPS client there:
 *     sms N mps 0|1 */
#include "common.h"

int main(void)
{
    CUdevice d;
    int sms = 0, mps = 0;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&d, 0));
    CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
    CHECK(cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, d));
    printf("sms %d mps %d\n", sms, mps);
    return 0;
}
