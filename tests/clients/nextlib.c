/* A second interposer, preloaded after the shim. Its dlsym(RTLD_NEXT) must
 * resolve relative to itself: relative to the shim it would find its own
 * definition and recurse. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

time_t time(time_t *t)
{
    static time_t (*real)(time_t *);
    if (!real)
        real = (time_t(*)(time_t *))dlsym(RTLD_NEXT, "time");
    if (!real || real == time)
        abort();
    return real(t);
}
