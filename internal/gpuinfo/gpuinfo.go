// Package gpuinfo reads the node's GPUs through NVML (go-nvml, which loads
// libnvidia-ml.so.1 at run time). Builds without cgo have no NVML.
package gpuinfo

// Device is one GPU as NVML reports it.
type Device struct {
	Index     int
	Name      string
	UUID      string
	Total     uint64
	Used      uint64
	Util      uint32
	Processes int
}

// Totals returns each device's memory size.
func Totals() ([]uint64, error) {
	devs, err := Devices()
	if err != nil {
		return nil, err
	}
	t := make([]uint64, len(devs))
	for i, d := range devs {
		t[i] = d.Total
	}
	return t, nil
}
