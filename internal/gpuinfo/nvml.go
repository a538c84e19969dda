//go:build cgo

package gpuinfo

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func nvmlErr(what string, r nvml.Return) error {
	return fmt.Errorf("%s: %s", what, nvml.ErrorString(r))
}

// each calls fn with every device in index order; every NVML call is made
// only after a successful Init.
func each(fn func(i int, d nvml.Device) error) error {
	if r := nvml.Init(); r != nvml.SUCCESS {
		return nvmlErr("cannot initialize NVML (is the NVIDIA driver, or the simulated GPU, on the library path?)", r)
	}
	defer nvml.Shutdown()
	n, r := nvml.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nvmlErr("device count", r)
	}
	for i := 0; i < n; i++ {
		d, r := nvml.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return nvmlErr(fmt.Sprintf("device %d", i), r)
		}
		if err := fn(i, d); err != nil {
			return err
		}
	}
	return nil
}

// Devices lists the GPUs with their current use.
func Devices() ([]Device, error) {
	var out []Device
	err := each(func(i int, d nvml.Device) error {
		mem, r := d.GetMemoryInfo()
		if r != nvml.SUCCESS {
			return nvmlErr(fmt.Sprintf("device %d memory", i), r)
		}
		dev := Device{Index: i, Minor: -1, Total: mem.Total, Used: mem.Used}
		if m, r := d.GetMinorNumber(); r == nvml.SUCCESS {
			dev.Minor = m
		}
		dev.Name, _ = d.GetName()
		dev.UUID, _ = d.GetUUID()
		if u, r := d.GetUtilizationRates(); r == nvml.SUCCESS {
			dev.Util = u.Gpu
		}
		if p, r := d.GetComputeRunningProcesses(); r == nvml.SUCCESS {
			dev.Processes = len(p)
		}
		// NOT_SUPPORTED on GPUs without MIG: off.
		if cur, _, r := d.GetMigMode(); r == nvml.SUCCESS {
			dev.MIG = cur == nvml.DEVICE_MIG_ENABLE
		}
		out = append(out, dev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GPUs lists the devices by index with their UUID and size; a device
// without a UUID is an error, since tenants key devices by it.
func GPUs() ([]GPU, error) {
	var out []GPU
	err := each(func(i int, d nvml.Device) error {
		uuid, r := d.GetUUID()
		if r != nvml.SUCCESS {
			return nvmlErr(fmt.Sprintf("device %d UUID", i), r)
		}
		if uuid == "" {
			return fmt.Errorf("device %d: NVML reports no UUID", i)
		}
		mem, r := d.GetMemoryInfo()
		if r != nvml.SUCCESS {
			return nvmlErr(fmt.Sprintf("device %d memory", i), r)
		}
		out = append(out, GPU{Index: i, UUID: uuid, Total: mem.Total})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
