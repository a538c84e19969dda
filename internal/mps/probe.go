package mps

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>

typedef int (*init_f)(unsigned);
typedef int (*count_f)(int *);
typedef int (*get_f)(int *, int);
typedef int (*retain_f)(void **, int);
typedef int (*release_f)(int);
typedef int (*name_f)(int, const char **);

// A CUDA program's start: cuInit, then each device's primary context,
// retained and released. NULL when all succeeded; else the call that
// failed, its result in *rc and that result's name in *name (NULL if
// unknown), or (*rc 0) why the driver cannot be used.
static const char *probe(int *rc, const char **name)
{
    *rc = 0;
    *name = NULL;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return dlerror();
    init_f init = (init_f)dlsym(h, "cuInit");
    count_f count = (count_f)dlsym(h, "cuDeviceGetCount");
    get_f get = (get_f)dlsym(h, "cuDeviceGet");
    retain_f retain = (retain_f)dlsym(h, "cuDevicePrimaryCtxRetain");
    release_f release = (release_f)dlsym(h, "cuDevicePrimaryCtxRelease_v2");
    name_f errname = (name_f)dlsym(h, "cuGetErrorName");
    if (!init || !count || !get || !retain || !release)
        return "libcuda.so.1 lacks the calls of a CUDA program's start";
    const char *call = "cuInit";
    int n = 0, r = init(0);
    if (!r) {
        call = "cuDeviceGetCount";
        r = count(&n);
    }
    for (int i = 0; !r && i < n; i++) {
        int dev;
        void *ctx;
        call = "cuDeviceGet";
        if ((r = get(&dev, i)))
            break;
        call = "cuDevicePrimaryCtxRetain";
        if ((r = retain(&ctx, dev)))
            break;
        call = "cuDevicePrimaryCtxRelease";
        r = release(dev);
    }
    if (!r)
        return NULL;
    *rc = r;
    if (errname)
        errname(r, name);
    return call;
}
*/
import "C"

import "fmt"

// ProbeCUDA starts CUDA in this process as a program does, through the
// CUDA driver the dynamic loader finds (libcuda.so.1): under MPS, as its
// client. It may hang where the MPS server never answers, so it is meant
// for a process of its own (Serves).
func ProbeCUDA() error {
	var rc C.int
	var name *C.char
	what := C.probe(&rc, &name)
	switch {
	case what == nil:
		return nil
	case rc == 0:
		return fmt.Errorf("cannot use the CUDA driver: %s", C.GoString(what))
	case name != nil:
		return fmt.Errorf("%s: %s (%d)", C.GoString(what), C.GoString(name), int(rc))
	default:
		return fmt.Errorf("%s: CUDA error %d", C.GoString(what), int(rc))
	}
}
