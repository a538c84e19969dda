package e2e

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// make demo, the README's first command, runs to its end on the simulated
// GPU and shows each thing it sets out to: a traced program, a quota's
// refusal, shares, a share lent and a cap held when alone, and priority.
func TestDemoShowsEachFeature(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "demo.sh"))
	cmd.Env = append(e.environ(""), "FLEXGV_BUILD="+build)
	r := runCmd(t, cmd)
	if r.code != 0 {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	// Each of these lines must be there, with the share it reports; the
	// bounds are wide: the share tests hold the figures to theirs.
	for _, c := range []struct {
		line     string
		min, max float64
	}{
		{`--compute 30%:`, 15, 45},
		{`--compute 70%:`, 55, 85},
		{`alone, --compute 30%:`, 85, 100},
		{`alone, --compute-max 30%:`, 15, 45},
		{`next to it, --priority high over low:`, 60, 100}, // equal priorities: about 50
	} {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(c.line) + `\s+([0-9.]+)% of the device`).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Errorf("the demo prints no line %q:\n%s", c.line, r.stdout)
			continue
		}
		if v, _ := strconv.ParseFloat(m[1], 64); v < c.min || v > c.max {
			t.Errorf("the demo's %q shows %.1f%% of the device, want %.0f–%.0f", c.line, v, c.min, c.max)
		}
	}
	for _, want := range []string{
		`(?m)^cuLaunchKernel\S*\s+\d+`,                             // the trace summary
		`refused with CUDA_ERROR_OUT_OF_MEMORY as from a full GPU`, // the quota
		`(?m)^  TENANT\s+SHARE\s+ACHIEVED`,                         // flexgv top
		`(?m)^alone:\s+[0-9.]+% of the device, each 1 ms kernel done in p50 \d+ us`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stdout + r.stderr) {
			t.Errorf("the demo shows nothing matching %s:\n%s\n%s", want, r.stdout, r.stderr)
		}
	}
}
