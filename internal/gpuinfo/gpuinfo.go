// Package gpuinfo reads the node's GPUs through NVML (go-nvml, which loads
// libnvidia-ml.so.1 at run time). Builds without cgo have no NVML.
package gpuinfo

// Device is one GPU as NVML reports it.
type Device struct {
	Index     int
	Minor     int // its device node is /dev/nvidiaMinor; -1: NVML does not say
	Name      string
	UUID      string
	Total     uint64
	Used      uint64
	Util      uint32
	Processes int
	MIG       bool // MIG mode on: its memory is split into MIG devices
}

// GPU is what a tenant needs to know of a device.
type GPU struct {
	Index int    // NVML's index, as flexgv node and nvidia-smi number devices
	UUID  string // GPU-..., which names the device whatever order CUDA sees it in
	Total uint64 // memory size in bytes
}
