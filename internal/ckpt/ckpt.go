// Package ckpt drives the CUDA driver's process checkpoint API (CUDA 12.8,
// driver 570): as a controller, it locks, checkpoints, restores and
// unlocks other CUDA processes by pid. The driver is loaded at run time
// (libcuda.so.1, or $FLEXGV_DRIVER), so flexgv runs where there is none.
package ckpt

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// State is a process's CUprocessState.
type State int

const (
	Running      State = 0
	Locked       State = 1
	Checkpointed State = 2
	Failed       State = 3
)

func (s State) String() string {
	switch s {
	case Running:
		return "running"
	case Locked:
		return "locked"
	case Checkpointed:
		return "checkpointed"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("state %d", int(s))
}

// CUresult values the callers tell apart.
const (
	errInvalidValue   = 1
	errOutOfMemory    = 2
	errNotInitialized = 3
	errIllegalState   = 401
	errTimeout        = 909
)

// MinVersion is the first CUDA version (cuDriverGetVersion) with the API.
const MinVersion = 12080

// RemapVersion is the first CUDA version whose restore takes GPU pairs,
// restoring a process onto other GPUs than it left (CUDA 13.0, driver 580;
// before it the restore's arguments are all reserved).
const RemapVersion = 13000

// Pair sends a process's memory from the GPU it was checkpointed on (Old)
// to another (New) at restore, by the GPUs' 16-byte UUIDs.
type Pair struct {
	Old, New [16]byte
}

// ParseUUID reads a GPU UUID as NVML writes it (GPU-xxxxxxxx-xxxx-...).
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	h := strings.ReplaceAll(strings.TrimPrefix(s, "GPU-"), "-", "")
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 16 {
		return u, fmt.Errorf("%q is not a GPU UUID", s)
	}
	copy(u[:], b)
	return u, nil
}

// Error is a failed driver call.
type Error struct {
	Op   string // the entry point
	Pid  int
	Code int    // its CUresult
	Name string // as cuGetErrorName gives it
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s(pid %d): %s", e.Op, e.Pid, e.Name)
}

func code(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return -1
}

// NotCUDA says the driver knows no CUDA process by that pid.
func NotCUDA(err error) bool {
	c := code(err)
	return c == errInvalidValue || c == errNotInitialized
}

// OutOfMemory says the GPU lacked the room to restore into.
func OutOfMemory(err error) bool { return code(err) == errOutOfMemory }

// WrongState says the process was not in the state the call needs.
func WrongState(err error) bool { return code(err) == errIllegalState }

// TimedOut says a lock's timeout passed first (the process runs on).
func TimedOut(err error) bool { return code(err) == errTimeout }

// ErrNoAPI is returned by Open for a driver older than the API.
var ErrNoAPI = errors.New("the CUDA driver has no process checkpoint API")
