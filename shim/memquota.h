/* Memory quotas inside the shim: what the policy files (quota_*.c) share.
 *
 * Every allocation path charges the tenant (tenant.c) before the driver is
 * asked and records what it charged per handle (records.c); every release
 * gives the record's bytes back. No driver call is ever made with the record
 * table locked, and no call the shim makes on its own may break a stream
 * capture the program has open (see fg_relaxed_begin). */
#ifndef FLEXGV_MEMQUOTA_H
#define FLEXGV_MEMQUOTA_H

#include "shim.h"
#include "flexgv/drvmem.h"

#define REAL(name) ((fg_real_##name)fg_resolve_quiet(FG_API_##name))

/* ---- per-process records of what was charged (records.c) ---- */

enum rec_kind { R_MEM, R_ARRAY, R_VMM, R_MAP, R_POOL, R_CTX, R_EXEC, R_HEAP, R_STACK, R_PENDING, R_MODULE, R_NKINDS };

struct rec {
    uintptr_t key; /* 0: empty */
    uint8_t kind;
    uint8_t released; /* R_VMM: cuMemRelease seen */
    int16_t dev;      /* CUDA ordinal charged */
    int32_t maps;     /* R_VMM: live mappings */
    uint64_t bytes;
    uintptr_t owner; /* R_MEM/R_ARRAY/R_MODULE: context; R_MAP: VMM handle; R_EXEC: its sizes per device;
                        R_HEAP, R_STACK, R_PENDING (keyed by context): none */
    uint64_t span;   /* R_MAP: bytes mapped; R_HEAP, R_STACK, R_PENDING: the limit as set (R_STACK: the
                        per-thread local memory level, which launches may raise) */
};

/* Room for one more record, taken before the driver is asked, so that a
 * successful allocation can always be recorded: when the table is full the
 * allocation is refused instead of losing track of its charge. */
int fg_rec_reserve(void);
void fg_rec_unreserve(void);
/* With the table locked (never across a driver call). */
void fg_rec_lock(void);
void fg_rec_unlock(void);
struct rec *fg_rec_find(uintptr_t key, enum rec_kind kind);
/* Records key using a reservation; an old record of the same key (its
 * memory must be gone, since the driver handed the key out again) is
 * uncharged and replaced. */
struct rec *fg_rec_put(uintptr_t key, enum rec_kind kind, int dev, uint64_t bytes, uintptr_t owner);
/* Uncharges and removes r; also gives back its reservation. */
void fg_rec_drop(struct rec *r);
/* Calls fn on every record of kind until it returns nonzero; fn may drop
 * the record it is given. */
void fg_rec_each(enum rec_kind kind, int (*fn)(struct rec *, void *), void *arg);
int fg_rec_count(enum rec_kind kind);
void fg_rec_after_fork(void);

/* ---- driver queries the policies share (quota_ctx.c) ---- */

int fg_current_device(void);
/* How the driver in use rounds and reserves memory (flexgv/drvmem.h). */
const struct fg_drvmem *fg_drv(void);
uintptr_t fg_current_ctx(void);

/* Calls that may synchronize ("potentially unsafe" during stream capture)
 * made by the shim on its own run in relaxed capture mode, so they never
 * invalidate a capture the program has open in another mode. */
CUstreamCaptureMode fg_relaxed_begin(void);
void fg_relaxed_end(CUstreamCaptureMode saved);

/* Whether work enqueued on s now would be captured into a graph rather than
 * run: 1 capturing, 0 not, -1 the driver refuses to say (a stream it will
 * refuse work on, too: callers then charge as if not capturing). Legal
 * during capture. */
int fg_stream_capturing(CUstream s, int per_thread);

/* Threads a device holds at once (SMs x threads per SM), 0 unknown. */
uint64_t fg_resident_threads(int dev);

/* ---- the policies' hooks into each other ---- */
void fg_pools_settle(void);
void fg_graph_settle_all(void);
void fg_ctx_after_fork(void);
void fg_code_ctx_gone(void);

#endif
