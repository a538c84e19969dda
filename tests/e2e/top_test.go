package e2e

import (
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
	if r.code != 0 || !regexp.MustCompile(`(?m)^  g\s+30%\s+\[\.{5}\|\.{14}\]\s+0\.0%\s+-\s+high\s+0B/1GiB\s+0\s+0\.0s \(0\.0%\)\s+0$`).MatchString(r.stdout) {
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
