// Package metrics is the node's Prometheus view: tenants' quotas and usage
// per device from their files, and the GPUs from NVML, read when scraped.
package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/tenant"
)

// Source is what a scrape reads.
type Source struct {
	Tenants func() ([]tenant.Info, []error, error) // tenant.List of the state folder
	Devices func() ([]gpuinfo.Device, error)       // NVML; an error leaves the GPU metrics out
	Held    func() int                             // tenants the daemon holds
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
	gpuTotalDesc = prometheus.NewDesc("flexgv_gpu_memory_total_bytes",
		"Memory of a GPU, from NVML.", gpuLabels, nil)
	gpuUsedDesc = prometheus.NewDesc("flexgv_gpu_memory_used_bytes",
		"Memory in use on a GPU, all processes, from NVML.", gpuLabels, nil)
	gpuUtilDesc = prometheus.NewDesc("flexgv_gpu_utilization_ratio",
		"Fraction of the last sample period in which a kernel ran on a GPU, from NVML.", gpuLabels, nil)
	heldDesc = prometheus.NewDesc("flexgv_daemon_tenants",
		"Tenants the daemon holds (created through it).", nil, nil)
)

// Collector reads its Source at every scrape.
type Collector struct{ src Source }

// New returns a collector of src.
func New(src Source) *Collector { return &Collector{src} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{quotaDesc, usedDesc, procsDesc, ctxDesc, gpuTotalDesc, gpuUsedDesc, gpuUtilDesc, heldDesc} {
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
	infos, _, err := c.src.Tenants()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(usedDesc, err)
		return
	}
	for _, t := range infos {
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
