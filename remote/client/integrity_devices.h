/* Every device's identity as the CUDA runtime reads it for the integrity
 * check: through public calls. For programs that recompute the answer
 * (tests, the GPU check); the includer declares the driver API first. */
#ifndef FLEXGV_REMOTE_INTEGRITY_DEVICES_H
#define FLEXGV_REMOTE_INTEGRITY_DEVICES_H

#include <string.h>

#include "integrity.h"

/* Devices 0 .. n-1 into devs; the first failing call's error. */
static inline CUresult fgr_integrity_devices(struct fgr_integrity_dev *devs, int n)
{
    CUresult r = CUDA_SUCCESS;
    memset(devs, 0, (size_t)n * sizeof *devs);
    for (int i = 0; i < n && r == CUDA_SUCCESS; i++) {
        CUuuid u;
        if ((r = cuDeviceGetUuid(&u, i)) == CUDA_SUCCESS)
            memcpy(devs[i].uuid, u.bytes, 16);
        if (r == CUDA_SUCCESS)
            r = cuDeviceGetAttribute(&devs[i].pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, i);
        if (r == CUDA_SUCCESS)
            r = cuDeviceGetAttribute(&devs[i].pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, i);
        if (r == CUDA_SUCCESS)
            r = cuDeviceGetAttribute(&devs[i].pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, i);
    }
    return r;
}

#endif
