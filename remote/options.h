/* Module and library options, and launch attributes, over the wire
 * (cuModuleLoadDataEx, cuLibraryLoadData, cuLaunchKernelEx, ...). An option's value is a word: for most
 * it is the value itself (an int, a float, an enum), and those travel. For
 * the others it points into the caller's memory (log buffers and their
 * sizes, which the driver writes back, the wall time it writes back, symbol
 * and name tables), which the server's driver would read or write in the
 * executor's memory instead: the client keeps them back and the executor
 * refuses any that arrive. An option neither list knows is refused, so
 * that a new pointer-valued one is never sent.
 * A module load's logs are the exception: the client sends each log's
 * size (at most FGR_LOG_MAX) and its buffer as 0, the executor gives the
 * driver buffers of its own for the call and answers what it wrote, which
 * the client copies into the program's (fgr_opts_logs). A link state's
 * logs (FGR_OPTS_LINK, cuLinkCreate's) are written by later calls: the
 * executor keeps buffers of its own with the state, which the client reads
 * after each call that writes them (fgrLinkLogs); those of one input
 * (FGR_OPTS_LINKDATA) stay kept back and come back empty. */
#ifndef FGR_OPTIONS_H
#define FGR_OPTIONS_H

#include <stdint.h>

#define FGR_OPTS_JIT 0
#define FGR_OPTS_LIBRARY 1
#define FGR_OPTS_LINK 2
#define FGR_OPTS_LINKDATA 3
#define FGR_MAX_OPTS 64u
#define FGR_LOG_MAX (64u << 10)
/* The bytes one call of a move between servers carries (fgrState*). */
#define FGR_STATE_PIECE (1u << 20)
/* Why a move's or checkpoint's drain of the program's work gave up
 * (remote/executor/move.c): fgrStateMark's result CUDA_ERROR_NOT_READY or
 * CUDA_ERROR_TIMEOUT, fgrStateSave's why. */
#define FGR_DRAIN_HOSTFN                                                                                                \
    "a host function of the program's ran on for 250 ms while its work was drained (it may wait for the program, "   \
    "which the drain pauses)"
#define FGR_DRAIN_SLOW "the program's device work did not finish in 10 s (it may wait for the program, which the drain pauses)"

enum { FGR_OPT_SEND, FGR_OPT_KEEP, FGR_OPT_UNKNOWN, FGR_OPT_LOG };
/* The log buffers; each one's size is the next option number. */
enum { FGR_JIT_INFO_LOG_BUFFER = 3, FGR_JIT_ERROR_LOG_BUFFER = 5 };

static inline int fgr_is_log(uint64_t o) { return o == FGR_JIT_INFO_LOG_BUFFER || o == FGR_JIT_ERROR_LOG_BUFFER; }

/* What becomes of option o of a kind (CUjit_option values from the
 * driver API reference: 0-1, 7-16, 20-24 and 29-33 are values; 2-6, 17-19
 * and 25-28 point into the caller). A library's options both concern the
 * caller's memory: its host function table, and whether the image may be
 * kept in place (the executor's copy of it is not kept). */
static inline int fgr_option_fate(int kind, uint64_t o)
{
    if (kind == FGR_OPTS_LIBRARY)
        return o <= 1 ? FGR_OPT_KEEP : FGR_OPT_UNKNOWN;
    if ((kind == FGR_OPTS_JIT || kind == FGR_OPTS_LINK) && o >= 3 && o <= 6)
        return FGR_OPT_LOG;
    if (o <= 1 || (o >= 7 && o <= 16) || (o >= 20 && o <= 24) || (o >= 29 && o <= 33))
        return FGR_OPT_SEND;
    if ((o >= 2 && o <= 6) || (o >= 17 && o <= 19) || (o >= 25 && o <= 28))
        return FGR_OPT_KEEP;
    return FGR_OPT_UNKNOWN;
}

/* Launch attributes (CUlaunchAttributeID) travel when their value is plain
 * numbers: cooperative (2), synchronization policy (3), cluster dimension
 * (4) and scheduling (5), programmatic stream serialization (6), priority
 * (8), memory synchronization domains (9, 10); and ignore (0); and those
 * whose value starts with an event (programmatic 7, launch completion 12),
 * which the executor translates and checks like any event it is given.
 * The others name addresses. */
#define FGR_MAX_LAUNCH_ATTRS 32u

static inline int fgr_launch_attr_has_event(uint64_t id) { return id == 7 || id == 12; }

static inline int fgr_launch_attr_sendable(uint64_t id)
{
    return id == 0 || (id >= 2 && id <= 6) || (id >= 8 && id <= 10) || fgr_launch_attr_has_event(id);
}

#endif
