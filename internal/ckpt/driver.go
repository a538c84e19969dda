//go:build cgo

package ckpt

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include "flexgv/cuda_types.h"

typedef CUresult (*fg_init_fn)(unsigned int);
typedef CUresult (*fg_version_fn)(int *);
typedef CUresult (*fg_name_fn)(CUresult, const char **);
typedef CUresult (*fg_state_fn)(int, CUprocessState *);
typedef CUresult (*fg_op_fn)(int, void *);

static CUresult fg_init(void *f) { return ((fg_init_fn)f)(0); }
static CUresult fg_version(void *f, int *v) { return ((fg_version_fn)f)(v); }
static const char *fg_name(void *f, CUresult r)
{
	const char *s = NULL;
	if (!f || ((fg_name_fn)f)(r, &s) != CUDA_SUCCESS || !s)
		return NULL;
	return s;
}
static CUresult fg_state(void *f, int pid, int *out)
{
	CUprocessState s;
	CUresult r = ((fg_state_fn)f)(pid, &s);
	*out = (int)s;
	return r;
}
static CUresult fg_lock(void *f, int pid, unsigned timeout_ms)
{
	CUcheckpointLockArgs a = {.timeoutMs = timeout_ms};
	return ((fg_op_fn)f)(pid, &a);
}
static CUresult fg_op(void *f, int pid) { return ((fg_op_fn)f)(pid, NULL); }
static CUresult fg_restore_onto(void *f, int pid, CUcheckpointGpuPair *pairs, unsigned n)
{
	CUcheckpointRestoreArgs a;
	memset(&a, 0, sizeof a);
	a.gpuPairs = pairs;
	a.gpuPairsCount = n;
	return ((fg_op_fn)f)(pid, &a);
}
*/
import "C"

import (
	"fmt"
	"os"
	"time"
	"unsafe"
)

// Driver is the loaded CUDA driver, initialized.
type Driver struct {
	Path    string
	Version int // as cuDriverGetVersion answers: 12080 is CUDA 12.8
	name    unsafe.Pointer
	state   unsafe.Pointer
	lock    unsafe.Pointer
	ckpt    unsafe.Pointer
	restore unsafe.Pointer
	unlock  unsafe.Pointer
}

// Open loads and initializes the driver and finds the checkpoint API;
// ErrNoAPI (wrapped, with the driver's version) where it is too old.
func Open() (*Driver, error) {
	path := os.Getenv("FLEXGV_DRIVER")
	if path == "" {
		path = "libcuda.so.1"
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	h := C.dlopen(cpath, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		return nil, fmt.Errorf("cannot load the CUDA driver %s: %s", path, C.GoString(C.dlerror()))
	}
	sym := func(name string) unsafe.Pointer {
		c := C.CString(name)
		defer C.free(unsafe.Pointer(c))
		return C.dlsym(h, c)
	}
	d := &Driver{Path: path, name: sym("cuGetErrorName")}
	init, version := sym("cuInit"), sym("cuDriverGetVersion")
	if init == nil || version == nil {
		return nil, fmt.Errorf("%s is not a CUDA driver (no cuInit)", path)
	}
	if r := C.fg_init(init); r != C.CUDA_SUCCESS {
		return nil, fmt.Errorf("cuInit: %s", d.errName(r))
	}
	var v C.int
	if r := C.fg_version(version, &v); r != C.CUDA_SUCCESS {
		return nil, fmt.Errorf("cuDriverGetVersion: %s", d.errName(r))
	}
	d.Version = int(v)
	d.state, d.lock = sym("cuCheckpointProcessGetState"), sym("cuCheckpointProcessLock")
	d.ckpt, d.restore, d.unlock = sym("cuCheckpointProcessCheckpoint"), sym("cuCheckpointProcessRestore"), sym("cuCheckpointProcessUnlock")
	if d.Version < MinVersion || d.state == nil || d.lock == nil || d.ckpt == nil || d.restore == nil || d.unlock == nil {
		return nil, fmt.Errorf("%w: it supports CUDA %s, the API needs CUDA %s (driver 570) or later",
			ErrNoAPI, FormatVersion(d.Version), FormatVersion(MinVersion))
	}
	return d, nil
}

func (d *Driver) errName(r C.CUresult) string {
	if s := C.fg_name(d.name, r); s != nil {
		return C.GoString(s)
	}
	return fmt.Sprintf("CUresult %d", int(r))
}

func (d *Driver) check(op string, pid int, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &Error{Op: op, Pid: pid, Code: int(r), Name: d.errName(r)}
}

// State is the process's checkpoint state.
func (d *Driver) State(pid int) (State, error) {
	var s C.int
	err := d.check("cuCheckpointProcessGetState", pid, C.fg_state(d.state, C.int(pid), &s))
	return State(s), err
}

// Lock blocks the process's further CUDA calls and waits, up to timeout
// (0: no limit), for the work it submitted.
func (d *Driver) Lock(pid int, timeout time.Duration) error {
	ms := timeout.Milliseconds()
	if timeout > 0 && ms == 0 {
		ms = 1
	}
	return d.check("cuCheckpointProcessLock", pid, C.fg_lock(d.lock, C.int(pid), C.uint(ms)))
}

// Checkpoint moves a locked process's device memory into host memory and
// releases its GPU.
func (d *Driver) Checkpoint(pid int) error {
	return d.check("cuCheckpointProcessCheckpoint", pid, C.fg_op(d.ckpt, C.int(pid)))
}

// Restore brings a checkpointed process back onto its GPU (locked).
func (d *Driver) Restore(pid int) error {
	return d.check("cuCheckpointProcessRestore", pid, C.fg_op(d.restore, C.int(pid)))
}

// RestoreOnto restores a checkpointed process with its GPUs remapped:
// each pair's Old GPU (one it was checkpointed on) onto its New one. The
// pairs must name every GPU it was checkpointed on (CUDA 13.0, driver
// 580: RemapVersion).
func (d *Driver) RestoreOnto(pid int, pairs []Pair) error {
	if len(pairs) == 0 {
		return d.Restore(pid)
	}
	c := (*C.CUcheckpointGpuPair)(C.malloc(C.size_t(len(pairs)) * C.sizeof_CUcheckpointGpuPair))
	defer C.free(unsafe.Pointer(c))
	cs := unsafe.Slice(c, len(pairs))
	for i, p := range pairs {
		for j := 0; j < 16; j++ {
			cs[i].oldUuid.bytes[j] = C.char(p.Old[j])
			cs[i].newUuid.bytes[j] = C.char(p.New[j])
		}
	}
	return d.check("cuCheckpointProcessRestore", pid, C.fg_restore_onto(d.restore, C.int(pid), c, C.uint(len(pairs))))
}

// Unlock lets a locked process's CUDA calls go on.
func (d *Driver) Unlock(pid int) error {
	return d.check("cuCheckpointProcessUnlock", pid, C.fg_op(d.unlock, C.int(pid)))
}
