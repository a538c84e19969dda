// Package liveness is the Go side of the one liveness scheme of all shared
// regions (include/flexgv/liveness.h): a process holds an OFD write lock on
// one byte per slot it owns, which the kernel drops when it dies, in any PID
// namespace. A slot whose byte nobody locks belongs to nobody alive.
package liveness

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Held reports whether any process holds a lock on the n bytes of f at
// start (n 0: the whole file from start on). f itself must hold none: a
// probe never conflicts with its own open file description's locks.
func Held(f *os.File, start, n int64) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: start, Len: n}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return false, fmt.Errorf("%s: testing locks: %w", f.Name(), err)
	}
	return lk.Type != unix.F_UNLCK, nil
}

// Share takes a read lock on byte off of f: many holders may share it, and
// it counts as held for Held until f is closed or its process dies.
func Share(f *os.File, off int64) error {
	lk := unix.Flock_t{Type: unix.F_RDLCK, Start: off, Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		return fmt.Errorf("%s: taking a lock: %w", f.Name(), err)
	}
	return nil
}
