// Package metrics is the node's Prometheus view: tenants' quotas and usage
// per device from their files, what the GPUs' schedulers gave each tenant
// from their regions, and the GPUs from NVML, read when scraped.
package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
)

// Source is what a scrape reads.
type Source struct {
	Tenants func() ([]tenant.Info, []error, error) // tenant.List of the state folder
	Devices func() ([]gpuinfo.Device, error)       // NVML; an error leaves the GPU metrics out
	Held    func() int                             // tenants the daemon holds
	Sched   func() ([]*sched.GPU, error)           // sched.List of the state folder
	// Labels of the tenants the daemon holds, by name: namespace, pod and
	// container (daemon LabelKeys). Nil: none.
	Labels func() map[string]map[string]string
	// MPS says whether the MPS control daemon answers; nil where the
	// daemon does not run one (--mps).
	MPS func() bool
}

var (
	tenantLabels = []string{"tenant", "gpu_uuid", "gpu_index"}
	gpuLabels    = []string{"gpu_uuid", "gpu_index"}

	quotaDesc = prometheus.NewDesc("flexgv_tenant_memory_quota_bytes",
		"GPU memory quota of a tenant on a device; absent where it has no limit.", tenantLabels, nil)
	usedDesc = prometheus.NewDesc("flexgv_tenant_memory_used_bytes",
		"GPU memory the live processes of a tenant hold on a device, contexts included.", tenantLabels, nil)
	procsDesc = prometheus.NewDesc("flexgv_tenant_processes",
		"Live processes of a tenant that hold memory on a device.", tenantLabels, nil)
	ctxDesc = prometheus.NewDesc("flexgv_tenant_context_bytes",
		"Device memory one CUDA context of a tenant took on a device, as last measured; absent until measured.", tenantLabels, nil)
	refusedDesc = prometheus.NewDesc("flexgv_tenant_memory_refusals_total",
		"Allocations of a tenant on a device refused for its quota (out of memory to the program), since the tenant was created.", tenantLabels, nil)
	mpsDesc = prometheus.NewDesc("flexgv_mps_up",
		"Whether the MPS control daemon the node daemon runs answers (1) or not (0); absent without --mps.", nil, nil)
	smDesc = prometheus.NewDesc("flexgv_tenant_sm_ratio",
		"Part of each GPU's SMs a tenant's processes may use under MPS (--sm); absent where it has all of them.", []string{"tenant"}, nil)
	gpuTotalDesc = prometheus.NewDesc("flexgv_gpu_memory_total_bytes",
		"Memory of a GPU, from NVML.", gpuLabels, nil)
	gpuUsedDesc = prometheus.NewDesc("flexgv_gpu_memory_used_bytes",
		"Memory in use on a GPU, all processes, from NVML.", gpuLabels, nil)
	gpuUtilDesc = prometheus.NewDesc("flexgv_gpu_utilization_ratio",
		"Fraction of the last sample period in which a kernel ran on a GPU, from NVML.", gpuLabels, nil)
	shareDesc = prometheus.NewDesc("flexgv_tenant_compute_share_ratio",
		"Share of a GPU's time guaranteed to a tenant while tenants contend; 0: none.", tenantLabels, nil)
	capDesc = prometheus.NewDesc("flexgv_tenant_compute_max_ratio",
		"Cap on the share of a GPU's time a tenant takes, even when it is idle; absent where it has none.", tenantLabels, nil)
	prioDesc = prometheus.NewDesc("flexgv_tenant_priority",
		"A tenant's priority on a GPU, 0 to 9, higher first (low 1, normal 4, high 7).", tenantLabels, nil)
	gpuTimeDesc = prometheus.NewDesc("flexgv_tenant_gpu_time_seconds_total",
		"GPU time a tenant's processes held on a GPU, or ran beside its holder (under MPS, or in the gaps of a holder of its priority bound by its host); its rate is the share achieved.", tenantLabels, nil)
	throttledDesc = prometheus.NewDesc("flexgv_tenant_throttled_seconds_total",
		"Time a tenant's processes waited to launch on a GPU: for their turn, under their cap or behind a higher priority.", tenantLabels, nil)
	preemptDesc = prometheus.NewDesc("flexgv_tenant_preemptions_total",
		"Turns of a tenant on a GPU cut short for a tenant of higher priority.", tenantLabels, nil)
	schedProcsDesc = prometheus.NewDesc("flexgv_tenant_scheduled_processes",
		"Live processes of a tenant that take turns on a GPU.", tenantLabels, nil)
	mpsProcsDesc = prometheus.NewDesc("flexgv_tenant_mps_processes",
		"Those of a tenant's scheduled processes on a GPU that are MPS clients (their kernels run beside other clients').", tenantLabels, nil)
	hostBoundDesc = prometheus.NewDesc("flexgv_tenant_host_bound_ratio",
		"Of a tenant's requests' time on a GPU, the part not spent waiting for it, as its processes measure it while others share the GPU; under MPS lower priorities run beside a holder at 0.75 or more, and equals fill its gaps at its share (0.60 at least). Absent until measured.", tenantLabels, nil)
	besideOffDesc = prometheus.NewDesc("flexgv_tenant_beside_off_seconds",
		"How much longer lower priorities take turns with a tenant's processes on a GPU rather than run beside them under MPS: its requests found that running beside cost them. Absent when they run beside, or no lower priority is there.", tenantLabels, nil)
	switchesDesc = prometheus.NewDesc("flexgv_gpu_scheduler_switches_total",
		"Hand-overs of a GPU from one tenant to another by its scheduler.", gpuLabels, nil)
	infoDesc = prometheus.NewDesc("flexgv_tenant_info",
		"Whom a tenant the daemon holds is for (a Kubernetes pod's container): 1, labelled; join on tenant.",
		[]string{"tenant", "namespace", "pod", "container"}, nil)
	heldDesc = prometheus.NewDesc("flexgv_daemon_tenants",
		"Tenants the daemon holds (created through it).", nil, nil)
)

// Collector reads its Source at every scrape.
type Collector struct{ src Source }

// New returns a collector of src.
func New(src Source) *Collector { return &Collector{src} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{quotaDesc, usedDesc, procsDesc, ctxDesc, refusedDesc, smDesc, mpsDesc, gpuTotalDesc, gpuUsedDesc, gpuUtilDesc, heldDesc, infoDesc,
		shareDesc, capDesc, prioDesc, gpuTimeDesc, throttledDesc, preemptDesc, schedProcsDesc, mpsProcsDesc, hostBoundDesc, besideOffDesc, switchesDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	devs, _ := c.src.Devices()
	index := map[string]string{} // NVML index by UUID
	for _, d := range devs {
		i := strconv.Itoa(d.Index)
		index[d.UUID] = i
		gauge(gpuTotalDesc, float64(d.Total), d.UUID, i)
		gauge(gpuUsedDesc, float64(d.Used), d.UUID, i)
		gauge(gpuUtilDesc, float64(d.Util)/100, d.UUID, i)
	}
	gauge(heldDesc, float64(c.src.Held()))
	if c.src.MPS != nil {
		up := 0.0
		if c.src.MPS() {
			up = 1
		}
		gauge(mpsDesc, up)
	}
	if c.src.Labels != nil {
		for name, l := range c.src.Labels() {
			gauge(infoDesc, 1, name, l["namespace"], l["pod"], l["container"])
		}
	}
	c.collectSched(ch, index)
	infos, _, err := c.src.Tenants()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(usedDesc, err)
		return
	}
	for _, t := range infos {
		if t.SM > 0 {
			gauge(smDesc, float64(t.SM)/100, t.Name)
		}
		for _, d := range t.Devices {
			// Rows as flexgv ps shows them: devices the tenant limits or uses.
			if d.Quota == 0 && d.Used == 0 {
				continue
			}
			// An entry without a UUID is the CUDA device of its index.
			i := strconv.Itoa(d.Index)
			if d.UUID != "" {
				i = index[d.UUID]
			}
			labels := []string{t.Name, d.UUID, i}
			if d.Quota > 0 {
				gauge(quotaDesc, float64(d.Quota), labels...)
				ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(d.Refused), labels...)
			}
			gauge(usedDesc, float64(d.Used), labels...)
			procs := 0
			for _, p := range t.Procs {
				if p.Used[d.Index] > 0 {
					procs++
				}
			}
			gauge(procsDesc, float64(procs), labels...)
			if d.CtxMeasured > 0 {
				gauge(ctxDesc, float64(d.CtxMeasured), labels...)
			}
		}
	}
}

// collectSched reports what each GPU's scheduler did: per tenant its
// policy and counters, per GPU its hand-overs. index is NVML's index by
// UUID.
func (c *Collector) collectSched(ch chan<- prometheus.Metric, index map[string]string) {
	gpus, err := c.src.Sched()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(gpuTimeDesc, err)
		return
	}
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	for _, g := range gpus {
		i := index[g.UUID]
		metric(switchesDesc, prometheus.CounterValue, float64(g.Switches), g.UUID, i)
		for _, t := range g.Tenants {
			labels := []string{t.Name, g.UUID, i}
			metric(shareDesc, prometheus.GaugeValue, float64(t.Policy.Share)/10000, labels...)
			if t.Policy.Cap > 0 {
				metric(capDesc, prometheus.GaugeValue, float64(t.Policy.Cap)/10000, labels...)
			}
			metric(prioDesc, prometheus.GaugeValue, float64(t.Policy.Priority), labels...)
			metric(gpuTimeDesc, prometheus.CounterValue, float64(t.HeldNs)/1e9, labels...)
			metric(throttledDesc, prometheus.CounterValue, float64(t.WaitedNs)/1e9, labels...)
			metric(preemptDesc, prometheus.CounterValue, float64(t.Preemptions), labels...)
			metric(schedProcsDesc, prometheus.GaugeValue, float64(len(t.Pids)), labels...)
			metric(mpsProcsDesc, prometheus.GaugeValue, float64(t.MPSProcs), labels...)
			if t.HostBound > 0 {
				metric(hostBoundDesc, prometheus.GaugeValue, t.HostBound, labels...)
			}
			if t.BesideOffNs > 0 {
				metric(besideOffDesc, prometheus.GaugeValue, float64(t.BesideOffNs)/1e9, labels...)
			}
		}
	}
}
