/* Internal interface of the simulated GPU (libcuda.so.1 and
 * libnvidia-ml.so.1 of simgpu/). Device state that other processes must see
 * (memory in use, busy time, per-process usage) lives in a shared state file;
 * everything else is per process. */
#ifndef FLEXGV_SIM_H
#define FLEXGV_SIM_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include "flexgv/cuda_api_gen.h"

#define SIM_EXPORT __attribute__((visibility("default")))
#define SIM_MAX_DEVICES 8
#define SIM_MAX_PROCS 128
#define SIM_BUCKETS 640 /* 64 s: queued work is credited ahead without wrapping */
#define SIM_BUCKET_NS 100000000ull
#define SIM_UTIL_BUCKETS 10 /* utilization is averaged over the last 1 s */
#define SIM_STATE_VERSION 1

struct sim_config {
    int devices;
    int sms;
    uint64_t mem_bytes;
    uint64_t ctx_mem_bytes;
    uint64_t kernel_ns;
    int driver_version;
};

struct sim_bucket {
    uint64_t epoch;
    uint64_t busy_ns;
};

struct sim_device_state {
    uint64_t used_bytes;     /* every process, contexts included */
    uint64_t busy_until_ns;  /* CLOCK_MONOTONIC end of the last queued kernel */
    uint64_t busy_total_ns;
    struct sim_bucket buckets[SIM_BUCKETS];
};

struct sim_proc_state {
    int32_t pid;
    uint32_t reserved;
    uint64_t used_bytes[SIM_MAX_DEVICES];
};

struct sim_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t reserved;
    struct sim_config cfg;
    struct sim_device_state dev[SIM_MAX_DEVICES];
    struct sim_proc_state procs[SIM_MAX_PROCS];
};

/* state.c */
extern struct sim_shared *sim;
int sim_attach(void); /* 0 on success; loads config and the shared file */
uint64_t sim_now_ns(void);
void sim_sleep_until(uint64_t t_ns);
int sim_mem_reserve(int dev, uint64_t bytes); /* 0 or -1 when the device is full */
void sim_mem_release(int dev, uint64_t bytes);
void sim_reap_dead(void);
void sim_busy(int dev, uint64_t start_ns, uint64_t end_ns);
unsigned sim_utilization(int dev);
uint64_t sim_enqueue(int dev, uint64_t not_before_ns, uint64_t duration_ns);
void sim_uuid(int dev, CUuuid *uuid);

/* cuGetProcAddress table (procs_gen.c). */
struct sim_proc {
    const char *base;
    const char *name;
    int version;
    int per_thread;
    void *fn;
};
extern const struct sim_proc sim_procs[];
extern const int sim_nprocs;

/* Per-process driver objects (core.c, exec.c, memory.c). */
struct sim_stream;
struct sim_ctx {
    uint32_t magic;
    int dev;
    int primary;
    unsigned flags;
    uint64_t charged_bytes;
    struct sim_stream *legacy;
    uint64_t last_tail_ns;
};

extern int sim_initialized;
struct sim_ctx *sim_current_ctx(void);
CUresult sim_check_ctx(struct sim_ctx **out);
struct sim_stream *sim_stream_of(struct sim_ctx *ctx, CUstream h, int per_thread);
CUresult sim_stream_wait(struct sim_stream *s);
void sim_ctx_sync(struct sim_ctx *ctx);
void sim_pools_trim_after_sync(int dev);
void sim_ctx_release_memory(struct sim_ctx *ctx);
const char *sim_result_name(CUresult r);

#endif
