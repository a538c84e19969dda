//go:build !cgo

package gpuinfo

import "errors"

// Devices needs NVML, which needs cgo.
func Devices() ([]Device, error) {
	return nil, errors.New("this flexgv was built without cgo, so it cannot use NVML")
}
