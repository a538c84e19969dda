package metrics

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
)

const (
	uuidA = "GPU-00000000-0000-4000-8000-00000000000a"
	uuidB = "GPU-00000000-0000-4000-8000-00000000000b"
)

var (
	gpus = []gpuinfo.Device{
		{Index: 0, UUID: uuidB, Total: 16 << 30, Used: 3 << 30, Util: 40},
		{Index: 1, UUID: uuidA, Total: 8 << 30, Used: 0, Util: 0},
	}
	tenants = []tenant.Info{
		{
			Name: "a",
			// Device 1 is neither limited nor used: no row, as in flexgv ps.
			Devices: []tenant.DeviceUse{
				{Index: 0, UUID: uuidA, Quota: 1 << 30, Used: 600 << 20, CtxMeasured: 64 << 20, Refused: 3},
				{Index: 1, UUID: uuidB},
			},
			Procs: []tenant.Proc{{Pid: 10, Used: []uint64{400 << 20, 0}}, {Pid: 11, Used: []uint64{200 << 20, 0}}},
		},
		{
			Name: "b", // made without NVML: entries stand for CUDA devices by index
			SM:   25,
			Devices: []tenant.DeviceUse{
				{Index: 0, Quota: 2 << 30},
				{Index: 1, Used: 1 << 20},
			},
			Procs: []tenant.Proc{{Pid: 12, Used: []uint64{0, 1 << 20}}},
		},
	}
)

// A GPU's scheduler with a tenant holding it and one with no process left.
var schedGPUs = []*sched.GPU{
	{UUID: uuidA, Switches: 12, Tenants: []sched.TenantStat{
		{Name: "a", Policy: sched.Policy{Share: 3000, Cap: 5000, Priority: sched.PriorityHigh}, HeldNs: 1_500_000_000, WaitedNs: 250_000_000, Preemptions: 3, Pids: []int32{10, 11}, MPSProcs: 1, HostBound: 0.875, Holder: true, BesideOffNs: 7_500_000_000},
		{Name: "c", Policy: sched.Policy{Priority: sched.PriorityLow}, HeldNs: 2_000_000_000, WaitedNs: 4_000_000_000},
	}},
}

func source(devErr, tenErr error) Source {
	return Source{
		Tenants: func() ([]tenant.Info, []error, error) { return tenants, nil, tenErr },
		Devices: func() ([]gpuinfo.Device, error) {
			if devErr != nil {
				return nil, devErr
			}
			return gpus, nil
		},
		Held:  func() int { return 1 },
		Sched: func() ([]*sched.GPU, error) { return schedGPUs, nil },
		Labels: func() map[string]map[string]string {
			return map[string]map[string]string{"a": {"namespace": "ml", "pod": "train-0", "container": "main"}}
		},
	}
}

const tenantText = `
# HELP flexgv_tenant_memory_quota_bytes GPU memory quota of a tenant on a device; absent where it has no limit.
# TYPE flexgv_tenant_memory_quota_bytes gauge
flexgv_tenant_memory_quota_bytes{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 1.073741824e+09
flexgv_tenant_memory_quota_bytes{gpu_index="0",gpu_uuid="",tenant="b"} 2.147483648e+09
# HELP flexgv_tenant_memory_used_bytes GPU memory the live processes of a tenant hold on a device, contexts included.
# TYPE flexgv_tenant_memory_used_bytes gauge
flexgv_tenant_memory_used_bytes{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 6.291456e+08
flexgv_tenant_memory_used_bytes{gpu_index="0",gpu_uuid="",tenant="b"} 0
flexgv_tenant_memory_used_bytes{gpu_index="1",gpu_uuid="",tenant="b"} 1.048576e+06
# HELP flexgv_tenant_processes Live processes of a tenant that hold memory on a device.
# TYPE flexgv_tenant_processes gauge
flexgv_tenant_processes{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 2
flexgv_tenant_processes{gpu_index="0",gpu_uuid="",tenant="b"} 0
flexgv_tenant_processes{gpu_index="1",gpu_uuid="",tenant="b"} 1
# HELP flexgv_tenant_context_bytes Device memory one CUDA context of a tenant took on a device, as last measured; absent until measured.
# TYPE flexgv_tenant_context_bytes gauge
flexgv_tenant_context_bytes{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 6.7108864e+07
# HELP flexgv_tenant_memory_refusals_total Allocations of a tenant on a device refused for its quota (out of memory to the program), since the tenant was created.
# TYPE flexgv_tenant_memory_refusals_total counter
flexgv_tenant_memory_refusals_total{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 3
flexgv_tenant_memory_refusals_total{gpu_index="0",gpu_uuid="",tenant="b"} 0
# HELP flexgv_tenant_sm_ratio Part of each GPU's SMs a tenant's processes may use under MPS (--sm); absent where it has all of them.
# TYPE flexgv_tenant_sm_ratio gauge
flexgv_tenant_sm_ratio{tenant="b"} 0.25
# HELP flexgv_daemon_tenants Tenants the daemon holds (created through it).
# TYPE flexgv_daemon_tenants gauge
flexgv_daemon_tenants 1
# HELP flexgv_tenant_info Whom a tenant the daemon holds is for (a Kubernetes pod's container): 1, labelled; join on tenant.
# TYPE flexgv_tenant_info gauge
flexgv_tenant_info{container="main",namespace="ml",pod="train-0",tenant="a"} 1
`

const schedText = `
# HELP flexgv_gpu_scheduler_switches_total Hand-overs of a GPU from one tenant to another by its scheduler.
# TYPE flexgv_gpu_scheduler_switches_total counter
flexgv_gpu_scheduler_switches_total{gpu_index="1",gpu_uuid="` + uuidA + `"} 12
# HELP flexgv_tenant_compute_share_ratio Share of a GPU's time guaranteed to a tenant while tenants contend; 0: none.
# TYPE flexgv_tenant_compute_share_ratio gauge
flexgv_tenant_compute_share_ratio{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 0.3
flexgv_tenant_compute_share_ratio{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="c"} 0
# HELP flexgv_tenant_compute_max_ratio Cap on the share of a GPU's time a tenant takes, even when it is idle; absent where it has none.
# TYPE flexgv_tenant_compute_max_ratio gauge
flexgv_tenant_compute_max_ratio{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 0.5
# HELP flexgv_tenant_priority A tenant's priority on a GPU, 0 to 9, higher first (low 1, normal 4, high 7).
# TYPE flexgv_tenant_priority gauge
flexgv_tenant_priority{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 7
flexgv_tenant_priority{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="c"} 1
# HELP flexgv_tenant_gpu_time_seconds_total GPU time a tenant's processes held on a GPU, or ran beside its holder (under MPS, or in the gaps of a holder of its priority bound by its host); its rate is the share achieved.
# TYPE flexgv_tenant_gpu_time_seconds_total counter
flexgv_tenant_gpu_time_seconds_total{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 1.5
flexgv_tenant_gpu_time_seconds_total{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="c"} 2
# HELP flexgv_tenant_throttled_seconds_total Time a tenant's processes waited to launch on a GPU: for their turn, under their cap or behind a higher priority.
# TYPE flexgv_tenant_throttled_seconds_total counter
flexgv_tenant_throttled_seconds_total{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 0.25
flexgv_tenant_throttled_seconds_total{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="c"} 4
# HELP flexgv_tenant_preemptions_total Turns of a tenant on a GPU cut short for a tenant of higher priority.
# TYPE flexgv_tenant_preemptions_total counter
flexgv_tenant_preemptions_total{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 3
flexgv_tenant_preemptions_total{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="c"} 0
# HELP flexgv_tenant_scheduled_processes Live processes of a tenant that take turns on a GPU.
# TYPE flexgv_tenant_scheduled_processes gauge
flexgv_tenant_scheduled_processes{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 2
flexgv_tenant_scheduled_processes{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="c"} 0
# HELP flexgv_tenant_mps_processes Those of a tenant's scheduled processes on a GPU that are MPS clients (their kernels run beside other clients').
# TYPE flexgv_tenant_mps_processes gauge
flexgv_tenant_mps_processes{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 1
flexgv_tenant_mps_processes{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="c"} 0
# HELP flexgv_tenant_host_bound_ratio Of a tenant's requests' time on a GPU, the part not spent waiting for it, as its processes measure it while others share the GPU; under MPS lower priorities run beside a holder at 0.75 or more, and equals fill its gaps at its share (0.60 at least). Absent until measured.
# TYPE flexgv_tenant_host_bound_ratio gauge
flexgv_tenant_host_bound_ratio{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 0.875
# HELP flexgv_tenant_beside_off_seconds How much longer lower priorities take turns with a tenant's processes on a GPU rather than run beside them under MPS: its requests found that running beside cost them. Absent when they run beside, or no lower priority is there.
# TYPE flexgv_tenant_beside_off_seconds gauge
flexgv_tenant_beside_off_seconds{gpu_index="1",gpu_uuid="` + uuidA + `",tenant="a"} 7.5
`

const gpuText = `
# HELP flexgv_gpu_memory_total_bytes Memory of a GPU, from NVML.
# TYPE flexgv_gpu_memory_total_bytes gauge
flexgv_gpu_memory_total_bytes{gpu_index="0",gpu_uuid="` + uuidB + `"} 1.7179869184e+10
flexgv_gpu_memory_total_bytes{gpu_index="1",gpu_uuid="` + uuidA + `"} 8.589934592e+09
# HELP flexgv_gpu_memory_used_bytes Memory in use on a GPU, all processes, from NVML.
# TYPE flexgv_gpu_memory_used_bytes gauge
flexgv_gpu_memory_used_bytes{gpu_index="0",gpu_uuid="` + uuidB + `"} 3.221225472e+09
flexgv_gpu_memory_used_bytes{gpu_index="1",gpu_uuid="` + uuidA + `"} 0
# HELP flexgv_gpu_utilization_ratio Fraction of the last sample period in which a kernel ran on a GPU, from NVML.
# TYPE flexgv_gpu_utilization_ratio gauge
flexgv_gpu_utilization_ratio{gpu_index="0",gpu_uuid="` + uuidB + `"} 0.4
flexgv_gpu_utilization_ratio{gpu_index="1",gpu_uuid="` + uuidA + `"} 0
`

// Tenants' devices are labelled with the NVML index of their UUID, which
// need not be the entry's position.
func TestTenantsAndGPUs(t *testing.T) {
	if err := testutil.CollectAndCompare(New(source(nil, nil)), strings.NewReader(tenantText+schedText+gpuText)); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.CollectAndLint(New(source(nil, nil))); err != nil || len(n) != 0 {
		t.Fatalf("lint: %v %v", n, err)
	}
}

// Without NVML the GPU metrics are left out and a tenant's UUID has no
// index to show.
func TestWithoutNVML(t *testing.T) {
	want := strings.ReplaceAll(tenantText+schedText, `gpu_index="1",gpu_uuid="`+uuidA, `gpu_index="",gpu_uuid="`+uuidA)
	if err := testutil.CollectAndCompare(New(source(errors.New("no NVML"), nil)), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// A state folder that cannot be read fails the tenant metrics, not the GPUs'.
func TestTenantsUnreadable(t *testing.T) {
	err := testutil.CollectAndCompare(New(source(nil, errors.New("state folder: permission denied"))), strings.NewReader(gpuText),
		"flexgv_gpu_memory_total_bytes", "flexgv_gpu_memory_used_bytes", "flexgv_gpu_utilization_ratio")
	if err == nil || !strings.Contains(err.Error(), "state folder: permission denied") {
		t.Fatalf("collect: %v", err)
	}
}

// A scheduler region that cannot be read fails the scheduler metrics, not
// the tenants' memory.
func TestSchedulersUnreadable(t *testing.T) {
	src := source(nil, nil)
	src.Sched = func() ([]*sched.GPU, error) { return nil, errors.New("gpu-X: not a scheduler region of this flexgv") }
	err := testutil.CollectAndCompare(New(src), strings.NewReader(tenantText), "flexgv_tenant_memory_quota_bytes",
		"flexgv_tenant_memory_used_bytes", "flexgv_tenant_processes", "flexgv_tenant_context_bytes", "flexgv_daemon_tenants")
	if err == nil || !strings.Contains(err.Error(), "gpu-X: not a scheduler region of this flexgv") {
		t.Fatalf("collect: %v", err)
	}
}
