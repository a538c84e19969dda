//go:build cgo

package gpuinfo

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func nvmlErr(what string, r nvml.Return) error {
	return fmt.Errorf("%s: %s", what, nvml.ErrorString(r))
}

// Devices lists the GPUs; every NVML call is made only after a successful Init.
func Devices() ([]Device, error) {
	if r := nvml.Init(); r != nvml.SUCCESS {
		return nil, nvmlErr("cannot initialize NVML (is the NVIDIA driver, or the simulated GPU, on the library path?)", r)
	}
	defer nvml.Shutdown()
	n, r := nvml.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nil, nvmlErr("device count", r)
	}
	out := make([]Device, 0, n)
	for i := 0; i < n; i++ {
		d, r := nvml.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return nil, nvmlErr(fmt.Sprintf("device %d", i), r)
		}
		mem, r := d.GetMemoryInfo()
		if r != nvml.SUCCESS {
			return nil, nvmlErr(fmt.Sprintf("device %d memory", i), r)
		}
		dev := Device{Index: i, Total: mem.Total, Used: mem.Used}
		dev.Name, _ = d.GetName()
		dev.UUID, _ = d.GetUUID()
		if u, r := d.GetUtilizationRates(); r == nvml.SUCCESS {
			dev.Util = u.Gpu
		}
		if p, r := d.GetComputeRunningProcesses(); r == nvml.SUCCESS {
			dev.Processes = len(p)
		}
		out = append(out, dev)
	}
	return out, nil
}
