package daemon

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flexgv/flexgv/internal/schedtest"
)

// scrape reads /metrics from srv into value by series, as
// "name{label=value,...}" with labels in name order, and the type of each
// family.
func scrape(t *testing.T, srv *httptest.Server) (map[string]float64, map[string]string) {
	t.Helper()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %v %v", resp.Status, err)
	}
	values, types := map[string]float64{}, map[string]string{}
	for name, f := range families {
		types[name] = f.GetType().String()
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				values[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				values[key] = m.Gauge.GetValue()
			}
		}
	}
	return values, types
}

// The scheduler metrics are what the GPU's region holds: the policies the
// daemon joined with and the counters its shims keep.
func TestMetricsOfTheSchedulers(t *testing.T) {
	dir := t.TempDir()
	n := fakeNVML(twoGPUs, nil)
	a := newTestAPI(t, dir, n)
	if _, err := createCompute(a, "infer", "0=30%", "high"); err != nil {
		t.Fatal(err)
	}
	if _, err := createCompute(a, "train", "0=50%", ""); err != nil {
		t.Fatal(err)
	}
	infer, train := a.held.tenants["infer"].sched[uuid0].Index, a.held.tenants["train"].sched[uuid0].Index
	r := schedtest.Open(t, dir, uuid0)
	r.Run(infer, 3_000_000_000, 1_000_000_000, 2)
	r.Run(train, 7_000_000_000, 500_000_000, 0)
	r.Switch(40)
	r.Process(0, infer, 4242, true)
	r.Process(1, train, 4343, false)
	r.Process(2, train, 4344, false)

	srv := httptest.NewServer(metricsHandler(dir, a.held, n, false, log.New(io.Discard, "", 0)))
	defer srv.Close()
	values, types := scrape(t, srv)
	series := func(tenant string) string { return "{gpu_index=0,gpu_uuid=" + uuid0 + ",tenant=" + tenant + "}" }
	for k, want := range map[string]float64{
		"flexgv_tenant_compute_share_ratio" + series("infer"):                     0.3,
		"flexgv_tenant_compute_share_ratio" + series("train"):                     0.5,
		"flexgv_tenant_priority" + series("infer"):                                7,
		"flexgv_tenant_priority" + series("train"):                                4,
		"flexgv_tenant_gpu_time_seconds_total" + series("infer"):                  3,
		"flexgv_tenant_gpu_time_seconds_total" + series("train"):                  7,
		"flexgv_tenant_throttled_seconds_total" + series("infer"):                 1,
		"flexgv_tenant_throttled_seconds_total" + series("train"):                 0.5,
		"flexgv_tenant_preemptions_total" + series("infer"):                       2,
		"flexgv_tenant_scheduled_processes" + series("infer"):                     1,
		"flexgv_tenant_scheduled_processes" + series("train"):                     2,
		"flexgv_gpu_scheduler_switches_total{gpu_index=0,gpu_uuid=" + uuid0 + "}": 40,
	} {
		if got, ok := values[k]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if _, ok := values["flexgv_tenant_compute_max_ratio"+series("infer")]; ok {
		t.Errorf("a cap where the tenant has none")
	}
	for _, name := range []string{"flexgv_tenant_gpu_time_seconds_total", "flexgv_tenant_throttled_seconds_total",
		"flexgv_tenant_preemptions_total", "flexgv_gpu_scheduler_switches_total"} {
		if types[name] != "COUNTER" {
			t.Errorf("%s is a %v, want a counter", name, types[name])
		}
	}

	// A live update is what the next scrape shows; counters only grow.
	if _, err := update(a, "infer", "0=40%", "0=60%", "low"); err != nil {
		t.Fatal(err)
	}
	r.Run(infer, 500_000_000, 0, 0)
	values, _ = scrape(t, srv)
	for k, want := range map[string]float64{
		"flexgv_tenant_compute_share_ratio" + series("infer"):    0.4,
		"flexgv_tenant_compute_max_ratio" + series("infer"):      0.6,
		"flexgv_tenant_priority" + series("infer"):               1,
		"flexgv_tenant_gpu_time_seconds_total" + series("infer"): 3.5,
	} {
		if got := values[k]; got != want {
			t.Errorf("after the update, %s = %v, want %v", k, got, want)
		}
	}
}
