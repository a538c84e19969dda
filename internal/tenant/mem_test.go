package tenant

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/flexgv/flexgv/internal/gpuinfo"
)

const (
	uuidA = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
	uuidB = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
)

var twoGPUs = []gpuinfo.GPU{{Index: 0, UUID: uuidA, Total: 16 << 30}, {Index: 1, UUID: uuidB, Total: 8 << 30}}

func quotas(devs []DeviceQuota) []uint64 {
	var q []uint64
	for _, d := range devs {
		q = append(q, d.Quota)
	}
	return q
}

func TestParseMemKeysDevicesByIndexOrUUID(t *testing.T) {
	for _, c := range []struct {
		spec string
		want []uint64
	}{
		{"8GiB", []uint64{8 << 30, 8 << 30}},
		{"25%", []uint64{4 << 30, 2 << 30}},
		{"0=8GiB,1=50%", []uint64{8 << 30, 4 << 30}},
		{"1=1GiB", []uint64{0, 1 << 30}},
		{uuidB + "=1GiB", []uint64{0, 1 << 30}},
		{strings.ToUpper(uuidB) + "=1GiB", []uint64{0, 1 << 30}},
		{uuidA + "=25%, 1=2GiB", []uint64{4 << 30, 2 << 30}},
	} {
		got, err := ParseMem(c.spec, twoGPUs)
		if err != nil || !reflect.DeepEqual(quotas(got), c.want) {
			t.Errorf("ParseMem(%q) = %v, %v; want quotas %v", c.spec, got, err, c.want)
			continue
		}
		// Every device has an entry, in NVML's order, keyed by its UUID.
		if got[0].UUID != uuidA || got[1].UUID != uuidB {
			t.Errorf("ParseMem(%q) entries %+v are not keyed by the GPUs' UUIDs", c.spec, got)
		}
	}
}

func TestParseMemRefuses(t *testing.T) {
	for _, c := range []struct{ spec, msg string }{
		{"0", "zero bytes"},
		{"0B", "zero bytes"},
		{"lots", "not a size"},
		{"10GiB", "more than device 1 has (8GiB)"},
		{"2=1GiB", "there is no device 2 (2 devices)"},
		{"0=1GiB,0=2GiB", "device 0 is given twice"},
		{"0=1GiB," + uuidA + "=2GiB", "device 0 is given twice (0 and " + uuidA + ")"},
		{"GPU-cccccccc=1GiB", "no GPU has the UUID GPU-cccccccc"},
		{"150%", "not a percentage"},
		{"0%", "not a percentage"},
		{"x=1GiB", `"x" is not a device index or a GPU UUID`},
		{"-1=1GiB", `"-1" is not a device index`},
		{"0=1GiB,2GiB", `"2GiB" is not DEVICE=SIZE`},
		{"1GiB,2GiB", "DEVICE=SIZE"},
	} {
		if _, err := ParseMem(c.spec, twoGPUs); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseMem(%q) = %v; want an error with %q", c.spec, err, c.msg)
		}
	}
	if _, err := ParseMem("1GiB", []gpuinfo.GPU{}); err == nil || !strings.Contains(err.Error(), "NVML lists no GPU") {
		t.Errorf("ParseMem with no GPU = %v", err)
	}
}

// Without NVML, entries stand for CUDA devices by index: sizes apply,
// percentages and UUIDs cannot.
func TestParseMemWithoutNVML(t *testing.T) {
	q, err := ParseMem("1GiB", nil)
	if err != nil || len(q) != MaxDevices {
		t.Fatalf("ParseMem(1GiB) without NVML = %v, %v; want %d entries", q, err, MaxDevices)
	}
	for _, d := range q {
		if d != (DeviceQuota{Quota: 1 << 30}) {
			t.Fatalf("entry %+v: want 1GiB and no UUID", d)
		}
	}
	if q, err := ParseMem("2=1GiB", nil); err != nil || q[2].Quota != 1<<30 || q[0].Quota != 0 {
		t.Errorf("ParseMem(2=1GiB) without NVML = %v, %v", q, err)
	}
	for _, c := range []struct{ spec, msg string }{
		{"50%", "percentages need the devices' sizes, and NVML is not available"},
		{uuidA + "=1GiB", "naming a device by UUID needs NVML"},
		{"16=1GiB", "a tenant holds only devices 0 to 15"},
	} {
		if _, err := ParseMem(c.spec, nil); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseMem(%q) without NVML = %v; want %q", c.spec, err, c.msg)
		}
	}
}

// A tenant holds MaxDevices entries: on a bigger node only those devices
// can be limited, and a quota for every device is refused.
func TestParseMemMoreGPUsThanATenantHolds(t *testing.T) {
	var gpus []gpuinfo.GPU
	for i := 0; i <= MaxDevices; i++ {
		gpus = append(gpus, gpuinfo.GPU{Index: i, UUID: fmt.Sprintf("GPU-%08x", i), Total: 1 << 30})
	}
	if q, err := ParseMem("15=1GiB", gpus); err != nil || len(q) != MaxDevices || q[15].Quota != 1<<30 {
		t.Errorf("ParseMem(15=1GiB) = %v, %v", q, err)
	}
	for spec, msg := range map[string]string{
		"1GiB":                     "this node has 17 GPUs and a tenant holds at most 16",
		"16=1GiB":                  "a tenant holds only devices 0 to 15",
		gpus[16].UUID + "=1GiB":    "a tenant holds only devices 0 to 15",
		gpus[3].UUID + "=1GiB,3=1": "device 3 is given twice",
	} {
		if _, err := ParseMem(spec, gpus); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseMem(%q) = %v; want %q", spec, err, msg)
		}
	}
}

// Percentages are kept in hundredths, one per entry ParseMem makes, so that
// the flags merge entry by entry.
func TestParseCompute(t *testing.T) {
	for _, c := range []struct {
		spec string
		want []uint32
	}{
		{"30%", []uint32{3000, 3000}},
		{"30", []uint32{3000, 3000}},
		{"100%", []uint32{10000, 10000}},
		{"12.345%", []uint32{1235, 1235}},
		{"1=50%", []uint32{0, 5000}},
		{uuidA + "=25%, 1=0.5%", []uint32{2500, 50}},
	} {
		got, err := ParseCompute("--compute-max", c.spec, twoGPUs)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseCompute(%q) = %+v, %v; want %v", c.spec, got, err, c.want)
		}
	}
	for _, c := range []struct{ spec, msg string }{
		{"", "--compute-max : empty"},
		{" ", "empty"},
		{"0", `"0" is not a percentage above 0 and at most 100`},
		{"0%", "is not a percentage above 0"},
		{"150%", `"150%" is not a percentage above 0 and at most 100`},
		{"-5%", "is not a percentage"},
		{"abc", `"abc" is not a percentage`},
		{"0.001%", "below 0.01%"},
		{"30%,40%", "list percentages per device as DEVICE=PCT"},
		{"5=30%", "there is no device 5 (2 devices)"},
		{"GPU-ffffffff=30%", "no GPU has the UUID"},
		{"0=30%,0=40%", "device 0 is given twice"},
		{"0=30%,1", `"1" is not DEVICE=PCT`},
	} {
		if _, err := ParseCompute("--compute-max", c.spec, twoGPUs); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseCompute(%q) = %v; want an error with %q", c.spec, err, c.msg)
		}
	}
	if q, err := ParseCompute("--compute", "2=30%", nil); err != nil || len(q) != MaxDevices || q[2] != 3000 || q[0] != 0 {
		t.Errorf("ParseCompute(2=30%%) without NVML = %v, %v", q, err)
	}
}

// The three flags merge into one entry per device, keyed by UUID; a share
// above the same device's cap is refused.
func TestParseLimits(t *testing.T) {
	devs, err := ParseLimits(Limits{Mem: "1=1GiB", ComputeMax: "0=60%", Compute: "30%"}, twoGPUs)
	want := []DeviceQuota{{UUID: uuidA, ComputeMax: 6000, ComputeShare: 3000}, {UUID: uuidB, Quota: 1 << 30, ComputeShare: 3000}}
	if err != nil || !reflect.DeepEqual(devs, want) {
		t.Errorf("ParseLimits = %+v, %v; want %+v", devs, err, want)
	}
	devs, err = ParseLimits(Limits{Compute: "1=20%"}, twoGPUs)
	want = []DeviceQuota{{UUID: uuidA}, {UUID: uuidB, ComputeShare: 2000}}
	if err != nil || !reflect.DeepEqual(devs, want) {
		t.Errorf("ParseLimits(--compute 1=20%%) = %+v, %v; want %+v", devs, err, want)
	}
	if _, err := ParseLimits(Limits{ComputeMax: "30%", Compute: "0=40%"}, twoGPUs); err == nil ||
		!strings.Contains(err.Error(), "device 0: --compute 40% is above its --compute-max 30%") {
		t.Errorf("a share above its cap: %v", err)
	}
}
