package tenant

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/flexgv/flexgv/internal/gpuinfo"
)

// DeviceQuota is one device entry of a tenant.
type DeviceQuota struct {
	UUID  string // the GPU's UUID; empty: the CUDA device of the entry's index
	Quota uint64 // bytes; 0 means no limit
}

// ParseMem reads a --mem value into one entry per device:
//
//	8GiB                every device
//	25%                 that share of every device
//	0=8GiB,GPU-…=50%    per device, by NVML index or UUID; others get no quota
//
// gpus are the node's devices from NVML, nil when NVML is not available:
// then entries carry no UUID (each stands for the CUDA device of its index,
// up to MaxDevices), UUID keys and percentages are refused, and sizes are
// not checked against the devices.
func ParseMem(spec string, gpus []gpuinfo.GPU) ([]DeviceQuota, error) {
	m := memParser{spec: spec, gpus: gpus}
	devs := make([]DeviceQuota, MaxDevices)
	if gpus != nil {
		if len(gpus) == 0 {
			return nil, m.errorf("NVML lists no GPU on this node")
		}
		devs = devs[:min(len(gpus), MaxDevices)]
		for i := range devs {
			devs[i].UUID = gpus[i].UUID
		}
	}
	if !strings.Contains(spec, "=") {
		if strings.Contains(spec, ",") {
			return nil, m.errorf("list quotas per device as DEVICE=SIZE,...")
		}
		if len(gpus) > MaxDevices {
			return nil, m.errorf("this node has %d GPUs and a tenant holds at most %d: give DEVICE=SIZE for each", len(gpus), MaxDevices)
		}
		for d := range devs {
			b, err := m.size(d, spec)
			if err != nil {
				return nil, err
			}
			devs[d].Quota = b
		}
		return devs, nil
	}
	named := map[int]string{}
	for _, part := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, m.errorf("%q is not DEVICE=SIZE", part)
		}
		k = strings.TrimSpace(k)
		d, err := m.device(k, len(devs))
		if err != nil {
			return nil, err
		}
		if prev, ok := named[d]; ok {
			if prev != k {
				return nil, m.errorf("device %d is given twice (%s and %s)", d, prev, k)
			}
			return nil, m.errorf("device %d is given twice", d)
		}
		named[d] = k
		if devs[d].Quota, err = m.size(d, v); err != nil {
			return nil, err
		}
	}
	return devs, nil
}

type memParser struct {
	spec string
	gpus []gpuinfo.GPU
}

func (m memParser) errorf(format string, args ...any) error {
	return fmt.Errorf("--mem %s: %s", m.spec, fmt.Sprintf(format, args...))
}

// device finds the entry a key names: an NVML index or a GPU UUID.
func (m memParser) device(key string, entries int) (int, error) {
	if len(key) > 4 && strings.EqualFold(key[:4], "GPU-") {
		if m.gpus == nil {
			return 0, m.errorf("naming a device by UUID needs NVML, which is not available; use its index")
		}
		for i, g := range m.gpus {
			if strings.EqualFold(g.UUID, key) {
				return m.entry(i, entries)
			}
		}
		return 0, m.errorf("no GPU has the UUID %s (flexgv node lists them)", key)
	}
	d, err := strconv.Atoi(key)
	if err != nil || d < 0 {
		return 0, m.errorf("%q is not a device index or a GPU UUID (DEVICE=SIZE)", key)
	}
	if m.gpus != nil && d >= len(m.gpus) {
		return 0, m.errorf("there is no device %d (%d devices)", d, len(m.gpus))
	}
	return m.entry(d, entries)
}

// entry checks that device d has an entry in the tenant.
func (m memParser) entry(d, entries int) (int, error) {
	if d >= entries {
		return 0, m.errorf("device %d: a tenant holds only devices 0 to %d", d, entries-1)
	}
	return d, nil
}

// size reads one device's quota: a size or a percentage of the device.
func (m memParser) size(d int, v string) (uint64, error) {
	var b uint64
	if p, ok := strings.CutSuffix(strings.TrimSpace(v), "%"); ok {
		pct, err := strconv.ParseFloat(p, 64)
		if err != nil || !(pct > 0 && pct <= 100) {
			return 0, fmt.Errorf("%q is not a percentage between 0 and 100", v)
		}
		if m.gpus == nil {
			return 0, m.errorf("percentages need the devices' sizes, and NVML is not available")
		}
		b = uint64(float64(m.gpus[d].Total) * pct / 100)
	} else {
		var err error
		if b, err = ParseSize(v); err != nil {
			return 0, err
		}
	}
	if b == 0 {
		return 0, m.errorf("a quota of zero bytes leaves nothing to run with")
	}
	if b < MinQuota {
		return 0, m.errorf("%s is below %s: too small for a CUDA program", FormatSize(b), FormatSize(MinQuota))
	}
	if m.gpus != nil && b > m.gpus[d].Total {
		return 0, m.errorf("%s is more than device %d has (%s)", FormatSize(b), d, FormatSize(m.gpus[d].Total))
	}
	return b, nil
}

// formatQuota prints a tenant's quotas by device index.
func formatQuota(devs []DeviceQuota) string {
	var parts []string
	for d, dev := range devs {
		if dev.Quota > 0 {
			parts = append(parts, fmt.Sprintf("%d=%s", d, FormatSize(dev.Quota)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}
