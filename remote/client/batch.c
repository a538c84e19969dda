/* Copies made as others already carried: batched copies
 * (cuMemcpyBatchAsync) one each (a side in the program's own memory made
 * as the explicit copy, uva.c), batched 3D copies one cuMemcpy3DAsync each
 * and 3D copies between contexts as cuMemcpy3D (copy2d.c);
 * flexgv/memcpy_batch.h, memcpy3d_batch.h and memcpy3d_peer.h say how. */
#include "client.h"
#include "flexgv/memcpy3d_batch.h"
#include "flexgv/memcpy3d_peer.h"
#include "flexgv/memcpy_batch.h"

FG_MEMCPY_BATCH_ENTRIES(FGR_EXPORT, cuMemcpyAsync, cuMemcpyAsync_ptsz)
FG_MEMCPY3D_BATCH_ENTRIES(FGR_EXPORT, cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz)
FG_MEMCPY3D_PEER_ENTRIES(FGR_EXPORT, cuMemcpy3D_v2, cuMemcpy3D_v2_ptds, cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz)
