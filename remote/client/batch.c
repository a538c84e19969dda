/* Batched copies (cuMemcpyBatchAsync): one copy each, through the copies
 * already carried (a side in the program's own memory made as the
 * explicit copy, uva.c); flexgv/memcpy_batch.h says how. */
#include "client.h"
#include "flexgv/memcpy_batch.h"

FG_MEMCPY_BATCH_ENTRIES(FGR_EXPORT, cuMemcpyAsync, cuMemcpyAsync_ptsz)
