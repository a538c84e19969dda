/* What the driver prints for the program: device printf to stdout and
 * device assertions to stderr, through the process's stdio, at the
 * synchronizations that collect them (the driver flushes stdout then). In
 * the executor those are captured, each stream a memory file, and sent to
 * the client ahead of each answer (FGR_OUTPUT frames), which prints them
 * through its own stdio, among the program's own lines, as the driver
 * would have. What reaches stderr is copied into the server's log too, as
 * the executor's own lines go there (the shim's refusals in a tenant's
 * executor among them). A memory file never blocks its writer, whatever
 * it prints between two answers. */

#include "executor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int captured[3]; /* captured[1], captured[2]: stdout, stderr are memory files */

/* At exit, what was printed to stderr and not sent (before the handshake
 * was answered, say: the shim's refusal) still reaches the log. */
static void stderr_to_log(void)
{
    char buf[4096];
    ssize_t n;
    fflush(stderr);
    if (!captured[2])
        return;
    for (off_t at = 0; (n = pread(2, buf, sizeof buf, at)) > 0; at += n)
        fwrite(buf, 1, (size_t)n, fgr_log);
    fflush(fgr_log);
}

void fgr_output_capture(void)
{
    int log = dup(2);
    if (log >= 0 && (fgr_log = fdopen(log, "w")))
        setvbuf(fgr_log, NULL, _IOLBF, 0);
    else
        return; /* nowhere else to log: the streams stay the server's */
    for (int s = 1; s <= 2; s++) {
        int m = memfd_create(s == 1 ? "stdout" : "stderr", MFD_CLOEXEC);
        if (m < 0)
            continue;
        if (fcntl(m, F_SETFL, O_APPEND) == 0 && dup2(m, s) == s)
            captured[s] = 1;
        close(m);
    }
    if (!captured[1] || !captured[2])
        fgr_logf("the program's device output stays in this log: %s", strerror(errno));
    atexit(stderr_to_log);
}

void fgr_output_send(int (*write)(const void *, size_t))
{
    static uint8_t *chunk;
    enum { MAX = 1u << 20 };
    fflush(stdout);
    fflush(stderr);
    for (int s = 1; s <= 2; s++) {
        struct stat st;
        if (!captured[s] || fstat(s, &st) != 0 || st.st_size <= 0)
            continue;
        if (!chunk && !(chunk = malloc(9 + MAX)))
            return;
        for (off_t at = 0; at < st.st_size;) {
            size_t n = st.st_size - at < MAX ? (size_t)(st.st_size - at) : MAX;
            ssize_t got = pread(s, chunk + 9, n, at);
            if (got <= 0)
                break;
            uint32_t len = 5 + (uint32_t)got, magic = FGR_OUTPUT;
            for (int i = 0; i < 4; i++)
                chunk[i] = (uint8_t)(len >> (8 * i)), chunk[4 + i] = (uint8_t)(magic >> (8 * i));
            chunk[8] = (uint8_t)s;
            if (s == 2)
                fwrite(chunk + 9, 1, (size_t)got, fgr_log);
            if (write(chunk, 9 + (size_t)got))
                return; /* the answer's write fails the same way, and says so */
            at += got;
        }
        if (ftruncate(s, 0) != 0)
            fgr_logf("cannot empty the captured %s: %s", s == 1 ? "stdout" : "stderr", strerror(errno));
    }
}
