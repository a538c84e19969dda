//go:build !cgo

package gpuinfo

import "errors"

var errNoCgo = errors.New("this flexgv was built without cgo, so it cannot use NVML")

// Devices needs NVML, which needs cgo.
func Devices() ([]Device, error) { return nil, errNoCgo }

// GPUs needs NVML, which needs cgo.
func GPUs() ([]GPU, error) { return nil, errNoCgo }
