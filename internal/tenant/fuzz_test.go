package tenant

import (
	"testing"

	"github.com/flexgv/flexgv/internal/gpuinfo"
)

// Whatever --mem, --compute-max and --compute say, with or without NVML,
// the parse never panics and what it accepts is within the bounds the
// shim and the daemon assume: a quota 0 or from MinQuota to the device's
// size, percentages 0 or in (0, 100 %], a share not above its cap.
func FuzzLimits(f *testing.F) {
	f.Add("8GiB", "40%", "30%", true)
	f.Add("0=8GiB,GPU-aaaaaaaa-0000-0000-0000-000000000000=50%", "1=0.01", "0=100%", true)
	f.Add("1.5KiB", "", "", false)
	f.Add("0=1GiB,0=2GiB", "101%", "-5%", false)
	f.Add("18446744073709551616B", "NaN", "1e-9%", true)
	f.Add("99.999%", "0=99.996%", "0=99.996", true)
	f.Fuzz(func(t *testing.T, mem, capPct, share string, nvml bool) {
		var gpus []gpuinfo.GPU
		if nvml {
			gpus = twoGPUs
		}
		devs, err := ParseLimits(Limits{Mem: mem, ComputeMax: capPct, Compute: share}, gpus)
		if err != nil {
			return
		}
		if len(devs) > MaxDevices || (nvml && len(devs) > len(gpus)) {
			t.Fatalf("%d entries", len(devs))
		}
		for d, dev := range devs {
			if dev.Quota != 0 && (dev.Quota < MinQuota || (nvml && dev.Quota > gpus[d].Total)) {
				t.Fatalf("device %d: quota %d accepted", d, dev.Quota)
			}
			if dev.ComputeMax > 10000 || dev.ComputeShare > 10000 || (dev.ComputeMax > 0 && dev.ComputeShare > dev.ComputeMax) {
				t.Fatalf("device %d: cap %d, share %d accepted", d, dev.ComputeMax, dev.ComputeShare)
			}
			if nvml && dev.UUID != gpus[d].UUID {
				t.Fatalf("device %d: UUID %q", d, dev.UUID)
			}
		}
	})
}

// A size is read exactly or refused, and what FormatSize prints of a
// whole number of units reads back as the same size.
func FuzzSize(f *testing.F) {
	for _, s := range []string{"8GiB", "1.5KiB", ".5MiB", "18446744073709551615", "18446744073709551616B", "1e3", "  7 TB "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseSize(s)
		if err != nil {
			return
		}
		if !wholeUnits(b) {
			return // printed rounded down, by design
		}
		p := FormatSize(b)
		if back, err := ParseSize(p); err != nil || back != b {
			t.Fatalf("ParseSize(%q) = %d, printed %q, read back %d, %v", s, b, p, back, err)
		}
	})
}

// wholeUnits: FormatSize prints b exactly (a whole number of its unit).
func wholeUnits(b uint64) bool {
	for _, m := range []uint64{1 << 40, 1 << 30, 1 << 20, 1 << 10} {
		if b >= m {
			return b%m == 0
		}
	}
	return true
}
