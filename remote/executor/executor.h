/* The executor: one process per client connection, calling the real driver
 * for that client alone. When the connection ends, so does the process, and
 * the driver frees everything the client held. */
#ifndef FLEXGV_REMOTE_EXECUTOR_H
#define FLEXGV_REMOTE_EXECUTOR_H

#define _GNU_SOURCE
#include <stdint.h>

#include "../proto_gen.h"
#include "../wire.h"

/* An operation's answer when its frame is malformed: the connection closes. */
#define FGR_BAD_FRAME ((CUresult)-1)

/* One request being served: memory it needs until the reply is sent, and
 * the reply being written. */
struct fgr_req {
    struct fgr_buf *reply;
    void **owned;
    int nowned, capowned;
    int oom; /* an allocation failed: the answer is CUDA_ERROR_OUT_OF_MEMORY */
    int bad; /* a length in the frame did not add up */
};

struct fgr_op_desc {
    const char *name;
    CUresult (*fn)(struct fgr_rd *rd, struct fgr_req *q);
    int syncpoint; /* queued calls' errors surface here */
};
extern const struct fgr_op_desc fgr_ops[FGR_NUM_OPS];

/* An export table the client answers: its fetch, and which operation calls
 * which of the driver's words (a {0, 0} entry ends the list). */
struct fgr_xtable {
    CUuuid uuid;
    int fetch_op;
    struct {
        int op, slot;
    } fns[32];
};
extern const struct fgr_xtable fgr_xtables[];
extern const int fgr_nxtables;
extern void *fgr_real[FGR_NUM_OPS];

/* A buffer of exactly `bytes` (u8 present, u64 n, bytes): into the frame, or
 * copied to aligned memory when aligned is set. NULL when absent. */
void *fgr_get_buf(struct fgr_rd *rd, struct fgr_req *q, uint64_t bytes, int aligned);
char *fgr_get_str(struct fgr_rd *rd);
void *fgr_get_image(struct fgr_rd *rd, struct fgr_req *q);
void **fgr_get_kparams(struct fgr_rd *rd, struct fgr_req *q);
CUlaunchConfig *fgr_get_launchcfg(struct fgr_rd *rd, struct fgr_req *q);
/* Zeroed memory for an out result, NULL on failure (see fgr_out_failed). */
void *fgr_out(struct fgr_req *q, uint64_t bytes);
CUresult fgr_out_failed(struct fgr_req *q);
void fgr_reply_out(struct fgr_req *q, const void *p, uint64_t bytes, int inout, CUresult r);
/* Waits for a stream, unless it is being captured. */
CUresult fgr_drain(CUstream s, int per_thread);

/* The driver's functions the executor needs besides the operations. */
struct fgr_drv {
    CUresult (*sync)(CUstream);
    CUresult (*sync_pt)(CUstream);
    CUresult (*capturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*capturing_pt)(CUstream, CUstreamCaptureStatus *);
};
extern struct fgr_drv fgr_drv;

/* Serves one request (its header read, rd at its arguments) into w, a whole
 * reply frame. before: an error that answers the call without running it
 * (the arguments are then not read). NULL, or why the frame is malformed. */
const char *fgr_serve(unsigned op, struct fgr_rd *rd, struct fgr_buf *w, CUresult before);

#endif
