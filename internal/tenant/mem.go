package tenant

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/flexgv/flexgv/internal/gpuinfo"
)

// DeviceQuota is one device entry of a tenant.
type DeviceQuota struct {
	UUID       string // the GPU's UUID; empty: the CUDA device of the entry's index
	Quota      uint64 // bytes; 0 means no limit
	ComputeMax uint32 // hundredths of a percent of the device's time; 0 means no cap

	ComputeShare uint32 // hundredths of a percent guaranteed under contention; 0 means none
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
	m := memParser{flag: "--mem", spec: spec, gpus: gpus}
	devs, err := m.entries()
	if err != nil {
		return nil, err
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

// Limits are a tenant's per-device limits as the flags give them (each may
// be empty).
type Limits struct {
	Mem        string // --mem
	ComputeMax string // --compute-max: hard caps
	Compute    string // --compute: guaranteed shares
}

// ParseLimits reads a tenant's limits into one entry per device. Shares of
// one device above its cap are refused.
func ParseLimits(l Limits, gpus []gpuinfo.GPU) ([]DeviceQuota, error) {
	var devs []DeviceQuota
	var err error
	if l.Mem != "" {
		if devs, err = ParseMem(l.Mem, gpus); err != nil {
			return nil, err
		}
	}
	for _, c := range []struct {
		flag, spec string
		set        func(*DeviceQuota, uint32)
	}{
		{"--compute-max", l.ComputeMax, func(d *DeviceQuota, v uint32) { d.ComputeMax = v }},
		{"--compute", l.Compute, func(d *DeviceQuota, v uint32) { d.ComputeShare = v }},
	} {
		if c.spec == "" {
			continue
		}
		pcts, err := ParseCompute(c.flag, c.spec, gpus)
		if err != nil {
			return nil, err
		}
		if devs == nil { // all are laid out by the same GPU list
			devs = make([]DeviceQuota, len(pcts))
			for i := range devs {
				if gpus != nil {
					devs[i].UUID = gpus[i].UUID
				}
			}
		}
		for i := range devs {
			c.set(&devs[i], pcts[i])
		}
	}
	for d, dev := range devs {
		if dev.ComputeMax > 0 && dev.ComputeShare > dev.ComputeMax {
			return nil, fmt.Errorf("device %d: --compute %g%% is above its --compute-max %g%%",
				d, float64(dev.ComputeShare)/100, float64(dev.ComputeMax)/100)
		}
	}
	return devs, nil
}

// Entries are a tenant's device entries without limits, one per GPU (as
// many as a tenant holds): for a tenant that has only a priority.
func Entries(gpus []gpuinfo.GPU) []DeviceQuota {
	devs := make([]DeviceQuota, min(len(gpus), MaxDevices))
	for i := range devs {
		devs[i].UUID = gpus[i].UUID
	}
	return devs
}

// ParseCompute reads a --compute or --compute-max value into one
// percentage per device entry (hundredths of a percent, 0 for none), laid
// out as ParseMem's entries:
//
//	30%                 every device
//	0=30%,GPU-…=50%     per device, by NVML index or UUID; others get none
//
// A percentage is in (0, 100], its sign optional, kept to 0.01 %.
func ParseCompute(flag, spec string, gpus []gpuinfo.GPU) ([]uint32, error) {
	m := memParser{flag: flag, spec: spec, gpus: gpus}
	if strings.TrimSpace(spec) == "" {
		return nil, m.errorf("empty; give a percentage (30%%) or DEVICE=PCT,...")
	}
	devs, err := m.entries()
	if err != nil {
		return nil, err
	}
	pcts := make([]uint32, len(devs))
	if !strings.Contains(spec, "=") {
		if strings.Contains(spec, ",") {
			return nil, m.errorf("list percentages per device as DEVICE=PCT,...")
		}
		if len(gpus) > MaxDevices {
			return nil, m.errorf("this node has %d GPUs and a tenant holds at most %d: give DEVICE=PCT for each", len(gpus), MaxDevices)
		}
		c, err := m.percent(spec)
		if err != nil {
			return nil, err
		}
		for d := range pcts {
			pcts[d] = c
		}
		return pcts, nil
	}
	named := map[int]bool{}
	for _, part := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, m.errorf("%q is not DEVICE=PCT", part)
		}
		d, err := m.device(strings.TrimSpace(k), len(devs))
		if err != nil {
			return nil, err
		}
		if named[d] {
			return nil, m.errorf("device %d is given twice", d)
		}
		named[d] = true
		if pcts[d], err = m.percent(v); err != nil {
			return nil, err
		}
	}
	return pcts, nil
}

type memParser struct {
	flag, spec string
	gpus       []gpuinfo.GPU
}

func (m memParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%s %s: %s", m.flag, m.spec, fmt.Sprintf(format, args...))
}

// entries are a tenant's device entries, without limits: one per GPU NVML
// lists, or MaxDevices standing for CUDA ordinals when NVML is not available.
func (m memParser) entries() ([]DeviceQuota, error) {
	devs := make([]DeviceQuota, MaxDevices)
	if m.gpus != nil {
		if len(m.gpus) == 0 {
			return nil, m.errorf("NVML lists no GPU on this node")
		}
		devs = devs[:min(len(m.gpus), MaxDevices)]
		for i := range devs {
			devs[i].UUID = m.gpus[i].UUID
		}
	}
	return devs, nil
}

// percent reads one device's compute cap, in hundredths of a percent.
func (m memParser) percent(v string) (uint32, error) {
	p := strings.TrimSuffix(strings.TrimSpace(v), "%")
	pct, err := strconv.ParseFloat(p, 64)
	if err != nil || !(pct > 0 && pct <= 100) {
		return 0, m.errorf("%q is not a percentage above 0 and at most 100", v)
	}
	if pct < 0.01 {
		return 0, m.errorf("%q is below 0.01%%", v)
	}
	return uint32(pct*100 + 0.5), nil
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
	var mem, compute, share []string
	for d, dev := range devs {
		if dev.Quota > 0 {
			mem = append(mem, fmt.Sprintf("%d=%s", d, FormatSize(dev.Quota)))
		}
		if dev.ComputeMax > 0 {
			compute = append(compute, fmt.Sprintf("%d=%g%%", d, float64(dev.ComputeMax)/100))
		}
		if dev.ComputeShare > 0 {
			share = append(share, fmt.Sprintf("%d=%g%%", d, float64(dev.ComputeShare)/100))
		}
	}
	s := "none"
	if len(mem) > 0 {
		s = strings.Join(mem, ",")
	}
	if len(compute) > 0 {
		s += " and compute cap " + strings.Join(compute, ",")
	}
	if len(share) > 0 {
		s += " and compute share " + strings.Join(share, ",")
	}
	return s
}

// ParseSM reads a --sm value: a whole percentage from 1 to 100 of a GPU's
// SMs, with or without "%". MPS takes whole percentages.
func ParseSM(spec string) (uint32, error) {
	if strings.Contains(spec, "=") {
		// MPS's percentage holds a client to the same part of every GPU
		return 0, fmt.Errorf("--sm %q: give one percentage for all of the tenant's GPUs (50%%); MPS cannot give each its own", spec)
	}
	v, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(spec), "%"), 10, 32)
	if err != nil || v < 1 || v > 100 {
		return 0, fmt.Errorf("--sm %q: give a whole percentage of a GPU's SMs from 1 to 100 (50%%)", spec)
	}
	return uint32(v), nil
}

// FormatSM prints a tenant's SM percentage as flexgv ps shows it.
func FormatSM(sm uint32) string {
	if sm == 0 {
		return "all SMs"
	}
	return fmt.Sprintf("%d%% of the SMs", sm)
}
