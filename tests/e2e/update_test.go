package e2e

import (
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/flexgv/flexgv/internal/sched"
)

// schedPolicy is tenant name's policy in the simulated GPU's scheduler, as
// share/cap/priority; "" if it is not there.
func schedPolicy(t *testing.T, e *env, name string) string {
	t.Helper()
	g, err := sched.Read(e.stateDir(), simUUID0)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range g.Tenants {
		if x.Name == name {
			return sched.Percent(x.Policy.Share) + "/" + sched.Percent(x.Policy.Cap) + "/" + sched.PriorityName(x.Policy.Priority)
		}
	}
	return ""
}

// flexgv update changes a group's share and priority through the daemon:
// the GPU's scheduler (what its running processes follow), its file (what
// flexgv ps shows), and what a restarted daemon keeps enforcing.
func TestUpdateChangesSharesLive(t *testing.T) {
	e := quotaEnv(t)
	if r := e.run("flexgv", "update", "g", "--compute", "40%"); r.code != 1 || !strings.Contains(r.stderr, "flexgv update: no node daemon answers on "+e.stateDir()) {
		t.Errorf("without a daemon: %+v", r)
	}
	d := e.startDaemon(t)
	stop := e.start(t, "flexgv", "run", "--group", "g", "--compute", "0=30%", "--", "sh", "-c", "echo ready; read x")
	defer stop()
	if got := schedPolicy(t, e, "g"); got != "30%/0%/normal" {
		t.Fatalf("g in the scheduler: %q", got)
	}
	r := e.run("flexgv", "update", "g", "--compute", "0=40%", "--compute-max", "60%", "--priority", "high")
	if r.code != 0 || !regexp.MustCompile(`(?m)^g\s+0 GPU-f1e96000\s+-\s+0B\s+40%\s+60%\s+high\s+-\s*$`).MatchString(r.stdout) {
		t.Fatalf("flexgv update: %+v", r)
	}
	if got := schedPolicy(t, e, "g"); got != "40%/60%/high" {
		t.Errorf("g in the scheduler after the update: %q", got)
	}
	series := `{gpu_index=0,gpu_uuid=` + simUUID0 + `,tenant=g}`
	m := d.scrape(t)
	for name, want := range map[string]float64{
		"flexgv_tenant_compute_share_ratio" + series: 0.4,
		"flexgv_tenant_compute_max_ratio" + series:   0.6,
		"flexgv_tenant_priority" + series:            7,
		"flexgv_tenant_scheduled_processes" + series: 0,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if ps := e.run("flexgv", "ps"); !strings.Contains(ps.stdout, r.stdout[strings.Index(r.stdout, "\n")+1:]) {
		t.Errorf("flexgv ps:\n%s\nflexgv update:\n%s", ps.stdout, r.stdout)
	}
	// Shares past 100 % are refused; memory quotas do not change.
	if r := e.run("flexgv", "run", "--group", "h", "--compute", "50%", "--", "true"); r.code != 0 {
		t.Fatalf("a second group: %+v", r)
	}
	if r := e.run("flexgv", "run", "--group", "k", "--compute", "20%", "--", "true"); r.code != 2 ||
		!strings.Contains(r.stderr, "shares would add up to 110% (g 40%, h 50%, and k asks 20%); the most is 100%") {
		t.Errorf("a group asking more than is left: %+v", r)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"g", "--mem", "1GiB"}, 2, "flexgv update: --mem: memory quotas cannot change while a tenant lives"},
		{[]string{"g"}, 2, "flexgv update: nothing to change; give --compute, --compute-max, --priority or --sm"},
		{[]string{"g", "--priority", "urgent"}, 2, `flexgv update: --priority "urgent": use low, normal, high or a number from 0 to 9`},
		{[]string{"g", "--compute", ""}, 2, "flexgv update: --compute is empty"},
		{[]string{"g", "--compute", "0=55%"}, 1, "flexgv update: device 0 (" + simUUID0 + "): shares would add up to 105% (h 50%, and g asks 55%); the most is 100%"},
		{[]string{"g", "--compute", "0=70%"}, 1, "a share of 70% is above its cap of 60%"},
		{[]string{"nope", "--compute", "10%"}, 1, "flexgv update: no tenant nope"},
	} {
		if r := e.run("flexgv", append([]string{"update"}, c.args...)...); r.code != c.code || r.stdout != "" || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("flexgv update %v: %+v, want exit %d and %q", c.args, r, c.code, c.msg)
		}
	}

	// The daemon killed, its run gone: the restarted daemon keeps g scheduled
	// with what it was given last.
	d.stop(t, syscall.SIGKILL)
	stop()
	d = e.startDaemon(t)
	if got := schedPolicy(t, e, "g"); got != "40%/60%/high" {
		t.Errorf("g in the scheduler after the daemon's restart: %q (%s)", got, d.logText())
	}
}
