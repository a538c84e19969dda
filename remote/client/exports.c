/* cuGetExportTable: the private tables hold function pointers into the
 * calling process, so none can be forwarded as such. The client answers
 * the tables api/remote.api describes with words of its own (functions
 * that forward or answer locally, copies of data), asking the driver for
 * each table once per process; any other table is refused, and said. */
#include "client.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static pthread_mutex_t fetch_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char fetched[64];

FGR_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < fgr_ntables && i < 64; i++) {
        if (memcmp(&fgr_tables[i].uuid, pExportTableId, sizeof(CUuuid)) != 0)
            continue;
        CUresult r = CUDA_SUCCESS;
        if (!__atomic_load_n(&fetched[i], __ATOMIC_ACQUIRE)) {
            pthread_mutex_lock(&fetch_lock);
            if (!fetched[i] && (r = fgr_tables[i].fetch()) == CUDA_SUCCESS) {
                /* Read-only from now on, as the driver's tables are. */
                mprotect(fgr_tables[i].words, fgr_tables[i].bytes, PROT_READ);
                __atomic_store_n(&fetched[i], 1, __ATOMIC_RELEASE);
            }
            pthread_mutex_unlock(&fetch_lock);
        }
        if (r == CUDA_SUCCESS)
            *ppExportTable = fgr_tables[i].words;
        return r;
    }
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) {
        const unsigned char *b = (const unsigned char *)pExportTableId->bytes;
        fprintf(stderr,
                "flexgv remote: cuGetExportTable: table %02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x is "
                "not emulated by the remoting client (CUDA_ERROR_NOT_SUPPORTED; later ones are not said)\n",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}
