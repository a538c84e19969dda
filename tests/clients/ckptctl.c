/* A checkpoint controller, as NVIDIA's cuda-checkpoint is, for tests of
 * the driver's process checkpoint API:
 *     ckptctl PID OP...
 * OP: state, lock, lock:MS (a timeout), checkpoint, restore, unlock, or
 * restore:OLD>NEW[,OLD>NEW...] (a restore with GPU pairs, by device index;
 * an index past the devices stands for a UUID no device has).
 * Prints one line per OP: "OP RESULT", and for state the state's number;
 * with -t first, each line also gives the OP's milliseconds, and a first
 * line cuInit's (what the driver's own operations take, apart). */
#include "common.h"

#include <time.h>

/* A result's name, or its number where it has none of ours: what a
 * driver answers that the simulated GPU does not model yet. */
static int timed;

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1e3 + (t.tv_nsec - t0->tv_nsec) / 1e6;
}

static const char *named(CUresult r)
{
    static char buf[32];
    const char *n = result_name(r);
    if (strcmp(n, "CUresult(?)"))
        return n;
    snprintf(buf, sizeof buf, "CUresult(%d)", (int)r);
    return buf;
}

/* Device i's UUID, or one no device has where there is no device i. */
static void device_uuid(int i, CUuuid *u)
{
    CUdevice d;
    memset(u, 0xee, sizeof *u);
    if (cuDeviceGet(&d, i) == CUDA_SUCCESS)
        CHECK(cuDeviceGetUuid(u, d));
}

int main(int argc, char **argv)
{
    timed = argc > 1 && !strcmp(argv[1], "-t");
    argc -= timed, argv += timed;
    if (argc < 3) {
        fprintf(stderr, "usage: ckptctl [-t] PID OP...\n");
        return 2;
    }
    int pid = atoi(argv[1]);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(cuInit(0));
    if (timed)
        printf("cuInit %.1f ms\n", ms_since(&t0));
    for (int i = 2; i < argc; i++) {
        const char *op = argv[i];
        CUresult r;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (!strcmp(op, "state")) {
            CUprocessState st = CU_PROCESS_STATE_FAILED;
            r = cuCheckpointProcessGetState(pid, &st);
            printf("state %s %d\n", named(r), r == CUDA_SUCCESS ? (int)st : -1);
            continue;
        }
        if (!strncmp(op, "lock", 4)) {
            CUcheckpointLockArgs a = {0};
            a.timeoutMs = op[4] == ':' ? (unsigned)atoi(op + 5) : 0;
            r = cuCheckpointProcessLock(pid, op[4] == ':' ? &a : NULL);
        } else if (!strcmp(op, "checkpoint")) {
            r = cuCheckpointProcessCheckpoint(pid, NULL);
        } else if (!strcmp(op, "restore")) {
            r = cuCheckpointProcessRestore(pid, NULL);
        } else if (!strncmp(op, "restore:", 8)) {
            CUcheckpointGpuPair pairs[8];
            CUcheckpointRestoreArgs a;
            memset(&a, 0, sizeof a);
            for (const char *q = op + 8; *q && a.gpuPairsCount < 8; a.gpuPairsCount++) {
                char *end;
                int from = (int)strtol(q, &end, 10), to = end[0] == '>' ? (int)strtol(end + 1, &end, 10) : -1;
                if (to < 0 || (*end && *end != ',')) {
                    fprintf(stderr, "ckptctl: bad pairs %s\n", op);
                    return 2;
                }
                device_uuid(from, &pairs[a.gpuPairsCount].oldUuid);
                device_uuid(to, &pairs[a.gpuPairsCount].newUuid);
                q = *end ? end + 1 : end;
            }
            a.gpuPairs = pairs;
            r = cuCheckpointProcessRestore(pid, &a);
        } else if (!strcmp(op, "unlock")) {
            r = cuCheckpointProcessUnlock(pid, NULL);
        } else {
            fprintf(stderr, "ckptctl: unknown operation %s\n", op);
            return 2;
        }
        if (timed)
            printf("%s %s %.1f ms\n", op, named(r), ms_since(&t0));
        else
            printf("%s %s\n", op, named(r));
    }
    return 0;
}
