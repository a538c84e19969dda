package metrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// exported is every metric name the collector can give, read from its
// descriptions.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc, 64)
	New(Source{}).Describe(ch)
	close(ch)
	names := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names[m[1]] = true
	}
	if len(names) < 10 {
		t.Fatalf("only %d metrics described: %v", len(names), names)
	}
	return names
}

var (
	promString  = regexp.MustCompile(`"(\\.|[^"\\])*"|'(\\.|[^'\\])*'`)
	promBraces  = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGroup   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promVar     = regexp.MustCompile(`\$(\{[^}]*\}|\w+)`)
	promIdent   = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\(?)`)
	promKeyword = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan"}
)

// metricNames are the metrics a PromQL expression reads: its identifiers
// less functions, keywords, label matchers, ranges, groupings, strings and
// Grafana's variables.
func metricNames(expr string) []string {
	e := promString.ReplaceAllString(expr, `""`)
	e = promBraces.ReplaceAllString(e, " ")
	e = promGroup.ReplaceAllString(e, " ")
	e = promVar.ReplaceAllString(e, " ")
	var names []string
	for _, m := range promIdent.FindAllStringSubmatch(e, -1) {
		if m[2] == "(" || slices.Contains(promKeyword, strings.ToLower(m[1])) {
			continue
		}
		names = append(names, m[1])
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`rate(a_total{x=~"$g",y="b{c}"}[$__rate_interval])`:                {"a_total"},
		`60 * sum by (tenant) (increase(b[5m])) / on (tenant) c offset 1h`: {"b", "c"},
		`q - u > bool 0 or vector(0) * $scale`:                             {"q", "u"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

// Every query of the chart's Grafana dashboard reads only metrics the
// daemon exports: a renamed or misspelt metric is an empty panel.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "flexgv", "dashboards", "flexgv.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	known := exported(t)
	queries := map[string]string{} // expression: where
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries[q.Expr] = "panel " + p.Title
		}
	}
	// A variable's label_values(METRIC{...}, LABEL): the metric part.
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_]+\)$`)
	for _, v := range dash.Templating.List {
		q, ok := v.Query.(map[string]any)
		if !ok {
			continue
		}
		s, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(METRIC, LABEL)", v.Name, s)
			continue
		}
		queries[m[1]] = "variable " + v.Name
	}
	used := map[string]bool{}
	for expr, where := range queries {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if !known[n] {
				t.Errorf("%s: %q reads %s, which the daemon does not export", where, expr, n)
			}
		}
	}
	// What the dashboard is for: memory against quota, share asked and
	// achieved, throttling, preemptions.
	for _, n := range []string{"flexgv_tenant_memory_used_bytes", "flexgv_tenant_memory_quota_bytes", "flexgv_tenant_compute_share_ratio",
		"flexgv_tenant_gpu_time_seconds_total", "flexgv_tenant_throttled_seconds_total", "flexgv_tenant_preemptions_total"} {
		if !used[n] {
			t.Errorf("no panel shows %s", n)
		}
	}
}
