package tenant

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var units = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// ParseSize reads a byte count: a number with an optional unit (B, KiB, MiB,
// GiB, TiB, KB, MB, GB, TB).
func ParseSize(s string) (uint64, error) {
	num, mult := strings.TrimSpace(s), 1.0
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a size (use a number with B, KiB, MiB, GiB, KB, MB or GB)", s)
	}
	b := v * mult
	if b >= math.MaxUint64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return uint64(b), nil
}

// FormatSize prints bytes with a binary unit.
func FormatSize(b uint64) string {
	for _, u := range []struct {
		s string
		m uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b >= u.m {
			v := float64(b) / float64(u.m)
			if v == math.Trunc(v) {
				return fmt.Sprintf("%d%s", uint64(v), u.s)
			}
			return fmt.Sprintf("%.2f%s", v, u.s)
		}
	}
	return fmt.Sprintf("%dB", b)
}

// ParseMem reads a --mem value into a quota per device:
//
//	8GiB             every device
//	25%              that share of every device
//	0=8GiB,1=50%     per device; devices not named get no quota
//
// totals are the devices' memory sizes (nil when unknown: then percentages
// are refused and sizes are not checked against the device).
func ParseMem(spec string, totals []uint64, maxDevices int) ([]uint64, error) {
	n := len(totals)
	if totals == nil {
		n = maxDevices
	}
	if n > maxDevices {
		n = maxDevices
	}
	one := func(dev int, v string) (uint64, error) {
		var b uint64
		if p, ok := strings.CutSuffix(strings.TrimSpace(v), "%"); ok {
			pct, err := strconv.ParseFloat(p, 64)
			if err != nil || pct <= 0 || pct > 100 {
				return 0, fmt.Errorf("%q is not a percentage between 0 and 100", v)
			}
			if totals == nil {
				return 0, fmt.Errorf("--mem %s: percentages need the devices' sizes, and NVML is not available", spec)
			}
			b = uint64(float64(totals[dev]) * pct / 100)
		} else {
			var err error
			if b, err = ParseSize(v); err != nil {
				return 0, err
			}
		}
		if b == 0 {
			return 0, fmt.Errorf("--mem %s: a quota of zero bytes leaves nothing to run with", spec)
		}
		if totals != nil && b > totals[dev] {
			return 0, fmt.Errorf("--mem %s: %s is more than device %d has (%s)", spec, FormatSize(b), dev, FormatSize(totals[dev]))
		}
		return b, nil
	}
	quota := make([]uint64, n)
	if !strings.Contains(spec, "=") {
		if strings.Contains(spec, ",") {
			return nil, fmt.Errorf("--mem %s: list quotas per device as DEVICE=SIZE,...", spec)
		}
		for d := 0; d < n; d++ {
			b, err := one(d, spec)
			if err != nil {
				return nil, err
			}
			quota[d] = b
		}
		return quota, nil
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(part, "=")
		dev, err := strconv.Atoi(strings.TrimSpace(k))
		if !ok || err != nil || dev < 0 {
			return nil, fmt.Errorf("--mem %s: %q is not DEVICE=SIZE", spec, part)
		}
		if dev >= n {
			return nil, fmt.Errorf("--mem %s: there is no device %d (%d devices)", spec, dev, n)
		}
		if seen[dev] {
			return nil, fmt.Errorf("--mem %s: device %d is given twice", spec, dev)
		}
		seen[dev] = true
		if quota[dev], err = one(dev, v); err != nil {
			return nil, err
		}
	}
	return quota, nil
}
