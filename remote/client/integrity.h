/* The answer of the driver's integrity check (export table d4082055…,
 * word 1), which the CUDA runtime computes itself from what the driver's
 * public calls told it and compares: an HMAC-MD2 under a fixed key over the
 * caller's identity, the tables' addresses and every device's identity
 * (docs/REMOTE-DESIGN.md). Standalone, so that a program linked against
 * the real driver can check it against the real answer. */
#ifndef FLEXGV_REMOTE_INTEGRITY_H
#define FLEXGV_REMOTE_INTEGRITY_H

#include <stddef.h>
#include <stdint.h>

struct fgr_integrity_in {
    uint32_t driver_version; /* as cuDriverGetVersion answers */
    uint32_t version;        /* the caller's first argument */
    uint32_t pid;            /* getpid() */
    uint32_t thread;         /* pthread_self(), its low 32 bits */
    uint64_t cudart_table;   /* address of table 6bd5fb6c… */
    uint64_t integrity_table;
    uint64_t fn;             /* the integrity table's word 1 */
    uint64_t unix_seconds;   /* the caller's second argument */
};

/* One device, as cuDeviceGetUuid and cuDeviceGetAttribute answer. */
struct fgr_integrity_dev {
    unsigned char uuid[16];
    int32_t pci_domain, pci_bus, pci_device;
};

void fgr_integrity(const struct fgr_integrity_in *in, const struct fgr_integrity_dev *devs, int ndev,
                   uint64_t out[2]);

/* MD2 (RFC 1319) of n bytes, for known-answer tests. */
void fgr_md2(const void *p, size_t n, unsigned char digest[16]);

#endif
