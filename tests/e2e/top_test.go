package e2e

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// flexgv top --once: the simulated GPU from NVML and a group's share and
// memory, read from the state folder with or without a daemon.
func TestTopOnce(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "top", "--once", "--interval", "100ms")
	if r.code != 0 || !regexp.MustCompile(`(?m)^GPU 0  `+simUUID0+`  .*memory 0B/16GiB  utilization 0%`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "  no tenant\n") {
		t.Fatalf("flexgv top --once with no tenant: %+v", r)
	}
	e.startDaemon(t)
	if r := e.run("flexgv", "run", "--group", "g", "--mem", "1GiB", "--compute", "30%", "--priority", "high", "--", "true"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	r = e.run("flexgv", "top", "--once", "--interval", "100ms")
	if r.code != 0 || !regexp.MustCompile(`(?m)^  g\s+30%\s+\[\.{5}\|\.{14}\]\s+0\.0%\s+-\s+high\s+-\s+0B/1GiB\s+0\s+0\.0s \(0\.0%\)\s+0$`).MatchString(r.stdout) {
		t.Errorf("flexgv top --once with a group: %+v", r)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--once", "--interval", "1ms"}, "flexgv top: --interval 1ms: give a duration from 100ms to 1h0m0s"},
		{[]string{"--interval", "soon"}, `flexgv top: invalid argument "soon" for "--interval"`},
		{nil, "flexgv top: the live view needs a terminal; use --once"},
	} {
		if r := e.run("flexgv", append([]string{"top"}, c.args...)...); r.code != 2 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("flexgv top %v: %+v, want exit 2 and %q", c.args, r, c.msg)
		}
	}
}

// flexgv bench share records a GPU's scheduler into a plot and a CSV, and
// plots the CSV again alike.
func TestBenchShare(t *testing.T) {
	e := quotaEnv(t)
	svg, csv := filepath.Join(e.dir, "share.svg"), filepath.Join(e.dir, "share.csv")
	e.startDaemon(t)
	if r := e.run("flexgv", "bench", "share", "--svg", svg); r.code != 2 || !strings.Contains(r.stderr, "no GPU has a scheduler in "+e.stateDir()+" yet") {
		t.Errorf("before any tenant with a policy: %+v", r)
	}
	for _, g := range []string{"a", "b"} {
		if r := e.run("flexgv", "run", "--group", g, "--compute", "40%", "--", "true"); r.code != 0 {
			t.Fatalf("run: %+v", r)
		}
	}
	r := e.run("flexgv", "bench", "share", "--gpu", "0", "--duration", "300ms", "--interval", "100ms", "--svg", svg, "--csv", csv)
	row := regexp.MustCompile(`(?m)^a\s+\d+\s+40\.0%\s+0\.0%\s+40\.00 pp\s+40\.00 pp$`)
	if r.code != 0 || !row.MatchString(r.stdout) {
		t.Fatalf("flexgv bench share: %+v", r)
	}
	plot, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(plot, new(struct{})); err != nil || strings.Count(string(plot), "<polyline") != 2 {
		t.Errorf("plot: %v\n%s", err, plot)
	}
	if r := e.run("flexgv", "bench", "share", "--from", csv, "--svg", svg); r.code != 0 || !row.MatchString(r.stdout) {
		t.Errorf("flexgv bench share --from: %+v", r)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{nil, "flexgv bench share: --svg is missing or empty"},
		{[]string{"--svg", svg, "--from", csv, "--gpu", "0"}, "--from plots recorded samples: --gpu, --duration, --interval and --csv do not go with it"},
		{[]string{"--svg", svg, "--gpu", "7"}, "--gpu 7: there is no GPU 7 (1 GPUs)"},
		{[]string{"--svg", svg, "--gpu", "x"}, `--gpu "x": give an NVML index or a GPU UUID`},
		{[]string{"--svg", svg, "--interval", "1ms"}, "--interval 1ms: at least 10ms"},
		{[]string{"--svg", svg, "--duration", "1s", "--interval", "1s"}, "--duration 1s: at least two intervals (2s)"},
	} {
		if r := e.run("flexgv", append([]string{"bench", "share"}, c.args...)...); r.code != 2 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("flexgv bench share %v: %+v, want exit 2 and %q", c.args, r, c.msg)
		}
	}
	if err := os.WriteFile(csv, []byte("time,who\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := e.run("flexgv", "bench", "share", "--from", csv, "--svg", svg); r.code != 1 || !strings.Contains(r.stderr, "the first line is") {
		t.Errorf("a CSV of something else: %+v", r)
	}
}
