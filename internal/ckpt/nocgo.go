//go:build !cgo

package ckpt

import (
	"errors"
	"time"
)

var errNoCgo = errors.New("this flexgv was built without cgo, so it cannot call the CUDA driver's checkpoint API")

// Driver cannot be loaded without cgo.
type Driver struct {
	Path    string
	Version int
}

// Open needs cgo to load the driver.
func Open() (*Driver, error) { return nil, errNoCgo }

func (d *Driver) State(int) (State, error)      { return Failed, errNoCgo }
func (d *Driver) Lock(int, time.Duration) error { return errNoCgo }
func (d *Driver) Checkpoint(int) error          { return errNoCgo }
func (d *Driver) Restore(int) error             { return errNoCgo }
func (d *Driver) RestoreOnto(int, []Pair) error { return errNoCgo }
func (d *Driver) Unlock(int) error              { return errNoCgo }
