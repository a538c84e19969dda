/* cuGetExportTable: the private tables hold function pointers into the
 * calling process, so none can be forwarded; the client will emulate the
 * ones the census found called (docs/REMOTE-DESIGN.md). Until a table is
 * emulated it is refused, and said once per table. */
#include "client.h"

#include <stdio.h>

FGR_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    *ppExportTable = NULL;
    const unsigned char *b = (const unsigned char *)pExportTableId->bytes;
    char what[80];
    snprintf(what, sizeof what, "export table %02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return fgr_unsupported(-1, "cuGetExportTable", what);
}
