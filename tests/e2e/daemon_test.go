package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexgv/flexgv/internal/daemon"
	"github.com/flexgv/flexgv/internal/tenant"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

// The node daemon: groups created through it outlive their runs and its
// own death, flexgv ps through it shows what the files show, and its
// metrics are what the tenants hold.

const simUUID0 = "GPU-f1e96000-5e1d-4000-8000-000000000000"

// daemonProc is a flexgv daemon of a test, killed when the test ends.
type daemonProc struct {
	cmd     *exec.Cmd
	metrics string // HOST:PORT of /metrics
	mu      sync.Mutex
	log     string
	exited  chan struct{}
}

var metricsRE = regexp.MustCompile(`metrics on http://(\S+)/metrics`)

// startDaemon starts flexgv daemon (metrics on a free port of 127.0.0.1)
// and waits until it serves.
func (e *env) startDaemon(t *testing.T, args ...string) *daemonProc {
	t.Helper()
	cmd := exec.Command(bin("flexgv"), append([]string{"daemon", "--metrics-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = e.environ(filepath.Join(build, "sim"))
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cmd: cmd, exited: make(chan struct{})}
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			d.mu.Lock()
			d.log += sc.Text() + "\n"
			d.mu.Unlock()
			if m := metricsRE.FindStringSubmatch(sc.Text()); m != nil {
				serving <- m[1]
			}
		}
		cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-d.exited })
	select {
	case d.metrics = <-serving:
	case <-d.exited:
		t.Fatalf("flexgv daemon exited: %s", d.logText())
	case <-time.After(10 * time.Second):
		t.Fatalf("flexgv daemon never served: %s", d.logText())
	}
	return d
}

func (d *daemonProc) logText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log
}

// stop signals the daemon and returns its exit status.
func (d *daemonProc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	d.cmd.Process.Signal(sig)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("flexgv daemon still running 10s after %v: %s", sig, d.logText())
	}
	return d.cmd.ProcessState.ExitCode()
}

// scrape reads /metrics into value by series, as "name{label=value,...}"
// with labels in name order.
func (d *daemonProc) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + d.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %v %v", resp.Status, err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			}
		}
	}
	return out
}

func (e *env) client(t *testing.T) *daemon.Client {
	t.Helper()
	c, err := daemon.Connect(daemon.Socket(e.stateDir()))
	if err != nil || c == nil {
		t.Fatalf("no daemon to connect to: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func deleteTenant(t *testing.T, c *daemon.Client, name string) (*flexgvv1.DeleteTenantResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), daemon.CallTimeout)
	defer cancel()
	return c.DeleteTenant(ctx, &flexgvv1.DeleteTenantRequest{Name: name})
}

func TestDaemonHoldsGroupsAcrossItsDeath(t *testing.T) {
	e := quotaEnv(t)
	d := e.startDaemon(t)
	holder := e.startProc(t, "flexgv", "run", "--group", "g", "--mem", "2GiB", "--", bin("holder"), "300")

	// The metrics show what the tenant holds: 300 MiB and its context.
	m := d.scrape(t)
	gpu := `{gpu_index=0,gpu_uuid=` + simUUID0 + `}`
	series := `{gpu_index=0,gpu_uuid=` + simUUID0 + `,tenant=g}`
	for name, want := range map[string]float64{
		"flexgv_tenant_memory_quota_bytes" + series: 2048 * mib,
		"flexgv_tenant_memory_used_bytes" + series:  (300 + 64) * mib,
		"flexgv_tenant_processes" + series:          1,
		"flexgv_tenant_context_bytes" + series:      64 * mib,
		"flexgv_daemon_tenants":                     1,
		"flexgv_gpu_memory_total_bytes" + gpu:       16384 * mib,
		"flexgv_gpu_memory_used_bytes" + gpu:        (300 + 64) * mib,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}

	c := e.client(t)
	_, err := deleteTenant(t, c, "g")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "tenant g has 1 process using it") {
		t.Errorf("DeleteTenant while the holder runs: %v", err)
	}

	// flexgv ps through the daemon, then, the daemon killed, from the files.
	viaJSON, viaText := e.run("flexgv", "ps", "--json"), e.run("flexgv", "ps")
	if viaJSON.code != 0 || !strings.Contains(viaText.stdout, "g ") {
		t.Fatalf("flexgv ps through the daemon: %+v %+v", viaJSON, viaText)
	}
	d.stop(t, syscall.SIGKILL)
	if _, err := os.Lstat(daemon.Socket(e.stateDir())); err != nil {
		t.Fatalf("the killed daemon's socket: %v", err)
	}
	directJSON, directText := e.run("flexgv", "ps", "--json"), e.run("flexgv", "ps")
	if viaJSON != directJSON || viaText != directText {
		t.Errorf("flexgv ps through the daemon:\n%+v\n%+v\nfrom the files:\n%+v\n%+v", viaJSON, viaText, directJSON, directText)
	}

	// The next daemon re-adopts the group: it outlives its last run.
	d = e.startDaemon(t)
	if !strings.Contains(d.logText(), "re-adopted tenants g\n") {
		t.Errorf("restarted daemon: %s", d.logText())
	}
	holder.stdin.Close()
	holder.cmd.Wait()
	r := e.run("flexgv", "run", "--group", "g", "--", bin("memclient"), "info")
	want := fmt.Sprintf("free %d total %d device_total %d\n", (2048-64)*mib, 2048*mib, 2048*mib)
	if r.code != 0 || r.stdout != want {
		t.Fatalf("joining the re-adopted group: %+v, want %q", r, want)
	}
	if m := d.scrape(t); m["flexgv_daemon_tenants"] != 1 || m["flexgv_tenant_memory_used_bytes"+series] != 0 {
		t.Errorf("metrics once the group is idle: %v", m)
	}
	if got, err := deleteTenant(t, e.client(t), "g"); err != nil || !got.Removed {
		t.Fatalf("DeleteTenant of the idle group: %+v %v", got, err)
	}
	if left := leftovers(t, e.stateDir()); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// Every allocation the quota refuses is counted on its device, in the
// tenant's file, so that processes that exited still count: the tenant's
// read and the daemon's counter show exactly the refusals its programs met.
func TestDaemonMetricsCountRefusedAllocations(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_SIM_DEVICES=2")
	d := e.startDaemon(t)
	// Each run is refused one byte past its room on device 0, once.
	for _, args := range [][]string{{"--group", "g", "--mem", "1GiB"}, {"--group", "g"}} {
		r := e.run("flexgv", append(append([]string{"run"}, args...), "--", bin("memclient"), "exact")...)
		if r.code != 0 || !strings.Contains(r.stdout, "one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS") {
			t.Fatalf("flexgv run %v memclient exact: %+v", args, r)
		}
	}
	infos, _, err := tenant.List(e.stateDir())
	if err != nil || len(infos) != 1 || len(infos[0].Devices) != 2 {
		t.Fatalf("tenants: %+v %v", infos, err)
	}
	m := d.scrape(t)
	for i, want := range []uint64{2, 0} { // device 1 was never asked for memory
		dev := infos[0].Devices[i]
		if dev.Refused != want {
			t.Errorf("device %d: tenant read %d refusals, want %d", i, dev.Refused, want)
		}
		series := fmt.Sprintf("flexgv_tenant_memory_refusals_total{gpu_index=%d,gpu_uuid=%s,tenant=g}", i, dev.UUID)
		if got, ok := m[series]; !ok || got != float64(want) {
			t.Errorf("%s = %v (present %v), want %d", series, got, ok, want)
		}
	}
	if r := e.run("flexgv", "ps", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"refused": 2`) {
		t.Errorf("flexgv ps --json: %+v", r)
	}
}

// SIGTERM releases what the daemon holds: a group no run is in goes, one a
// run is in stays with it. Runs then go on without a daemon.
func TestDaemonStopsCleanly(t *testing.T) {
	e := quotaEnv(t)
	d := e.startDaemon(t)
	if r := e.run("flexgv", "run", "--group", "idle", "--mem", "1GiB", "--", "true"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	stop := e.start(t, "flexgv", "run", "--group", "busy", "--mem", "1GiB", "--", "sh", "-c", "echo ready; read x")
	defer stop()
	if left := leftovers(t, e.stateDir()); strings.Join(left, " ") != "tenant-busy tenant-idle" {
		t.Fatalf("tenants while the daemon runs: %v", left)
	}
	if code := d.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM: %s", code, d.logText())
	}
	if !strings.Contains(d.logText(), "releasing tenants busy, idle\n") {
		t.Errorf("daemon log: %s", d.logText())
	}
	if left := leftovers(t, e.stateDir()); strings.Join(left, " ") != "tenant-busy" {
		t.Errorf("tenants after the daemon stopped: %v", left)
	}
	if _, err := os.Lstat(daemon.Socket(e.stateDir())); !os.IsNotExist(err) {
		t.Errorf("socket after SIGTERM: %v", err)
	}
	r := e.run("flexgv", "run", "--group", "other", "--mem", "1GiB", "--", "true")
	if r.code != 0 || r.stderr != "" {
		t.Errorf("run without the daemon: %+v", r)
	}
	stop()
	if left := leftovers(t, e.stateDir()); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestDaemonRefusals(t *testing.T) {
	e := quotaEnv(t)
	d := e.startDaemon(t)
	for _, c := range []struct {
		code int
		args []string
		msg  string
	}{
		{1, nil, "flexgv daemon: another flexgv daemon answers on " + daemon.Socket(e.stateDir())},
		{1, []string{"--socket", filepath.Join(e.dir, "other.sock")}, "flexgv daemon: another flexgv daemon keeps the tenants of " + e.stateDir()},
		{2, []string{"--metrics-addr", "nonsense"}, "flexgv daemon: --metrics-addr nonsense: not HOST:PORT"},
		{2, []string{"--metrics-addr", "127.0.0.1:99999"}, "flexgv daemon: --metrics-addr 127.0.0.1:99999: the port must be a number from 0 to 65535"},
		{2, []string{"--socket", "/nonexistent/flexgv/d.sock"}, "flexgv daemon: --socket /nonexistent/flexgv/d.sock: the folder /nonexistent/flexgv does not exist"},
		{2, []string{"--socket", ""}, "flexgv daemon: --socket is empty"},
	} {
		r := e.run("flexgv", append([]string{"daemon"}, c.args...)...)
		if r.code != c.code || !strings.HasPrefix(r.stderr, c.msg) {
			t.Errorf("flexgv daemon %v: exit %d, %q; want exit %d and %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
	}
	// Its metrics port taken, in another state folder.
	other := quotaEnv(t)
	r := other.run("flexgv", "daemon", "--metrics-addr", d.metrics)
	if r.code != 1 || !strings.Contains(r.stderr, "flexgv daemon: metrics: listen tcp "+d.metrics+": bind: address already in use") {
		t.Errorf("metrics port in use: %+v", r)
	}
	if _, err := os.Lstat(daemon.Socket(other.stateDir())); !os.IsNotExist(err) {
		t.Errorf("a daemon that did not start left its socket: %v", err)
	}
}

// A socket in the state folder that belongs to a daemon of another folder
// is an error, not silently another node's view.
func TestDaemonOfAnotherStateFolder(t *testing.T) {
	e := quotaEnv(t)
	e.startDaemon(t)
	other := quotaEnv(t)
	if err := os.MkdirAll(other.stateDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(daemon.Socket(e.stateDir()), daemon.Socket(other.stateDir())); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("the daemon on %s keeps its tenants in %s, not in %s", daemon.Socket(other.stateDir()), e.stateDir(), other.stateDir())
	if r := other.run("flexgv", "ps"); r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("flexgv ps: %+v, want %q", r, want)
	}
	other.refuse(2, want, "flexgv", "run", "--group", "g", "--mem", "1GiB")
}

// A socket nobody listens on (a daemon killed with SIGKILL) is no daemon:
// runs and ps go on from the files, and the next daemon replaces it.
func TestDaemonStaleSocket(t *testing.T) {
	e := quotaEnv(t)
	if err := os.MkdirAll(e.stateDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", daemon.Socket(e.stateDir()))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	r := e.run("flexgv", "run", "--group", "g", "--mem", "1GiB", "--", "sh", "-c", "echo ok")
	if r.code != 0 || r.stdout != "ok\n" || r.stderr != "" {
		t.Fatalf("run with a stale socket: %+v", r)
	}
	if r := e.run("flexgv", "ps"); r.code != 0 || r.stderr != "" {
		t.Fatalf("ps with a stale socket: %+v", r)
	}
	e.startDaemon(t)
	e.client(t)
}

// flexgv rm: the way to remove a group the daemon holds.
func TestRmRemovesAGroupTheDaemonHolds(t *testing.T) {
	e := quotaEnv(t)
	if r := e.run("flexgv", "rm", "g"); r.code != 1 || !strings.Contains(r.stderr, "flexgv rm: no node daemon on ") {
		t.Errorf("without a daemon: %+v", r)
	}
	e.startDaemon(t)
	holder := e.startProc(t, "flexgv", "run", "--group", "g", "--mem", "2GiB", "--", bin("holder"), "10")
	if r := e.run("flexgv", "rm", "g"); r.code != 1 || !strings.Contains(r.stderr, "tenant g has 1 process using it") {
		t.Errorf("while its process runs: %+v", r)
	}
	holder.stdin.Close()
	holder.cmd.Wait()
	if r := e.run("flexgv", "rm", "g"); r.code != 0 || r.stdout != "removed g\n" {
		t.Errorf("the idle group: %+v", r)
	}
	if infos := e.ps(t); len(infos) != 0 {
		t.Errorf("after rm: %+v", infos)
	}
	if r := e.run("flexgv", "rm", "g"); r.code != 1 || !strings.Contains(r.stderr, "flexgv rm: ") {
		t.Errorf("a group that is gone: %+v", r)
	}
}

// A group the daemon holds outlives a restart of the daemon even when no
// run was in it meanwhile: the next daemon makes it again, same quota.
func TestIdleGroupOutlivesADaemonRestart(t *testing.T) {
	e := quotaEnv(t)
	d := e.startDaemon(t)
	if r := e.run("flexgv", "run", "--group", "idle", "--mem", "1GiB", "--", "true"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	if code := d.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM: %s", code, d.logText())
	}
	if left := leftovers(t, e.stateDir()); len(left) != 0 {
		t.Fatalf("while no daemon runs, a group no run is in is gone: %v", left)
	}
	d = e.startDaemon(t)
	if !strings.Contains(d.logText(), "re-adopted tenants idle\n") {
		t.Errorf("restarted daemon: %s", d.logText())
	}
	r := e.run("flexgv", "run", "--group", "idle", "--", bin("memclient"), "info")
	if want := fmt.Sprintf("free %d total %d device_total %d\n", (1024-64)*mib, 1024*mib, 1024*mib); r.code != 0 || r.stdout != want {
		t.Fatalf("joining the group after the restart: %+v, want %q", r, want)
	}
	if r := e.run("flexgv", "rm", "idle"); r.code != 0 || r.stdout != "removed idle\n" {
		t.Errorf("rm: %+v", r)
	}
}

// A group with a compute cap is held by the daemon like one with a memory
// quota, and a run that joins it by name gets the cap.
func TestDaemonHoldsComputeCaps(t *testing.T) {
	e := quotaEnv(t)
	e.startDaemon(t)
	if r := e.run("flexgv", "run", "--group", "c", "--compute-max", "30%", "--", "true"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	infos := e.ps(t)
	if len(infos) != 1 || infos[0].Name != "c" || infos[0].Devices[0].ComputeMax != 3000 || infos[0].Devices[0].Quota != 0 {
		t.Fatalf("the group after its run, through the daemon: %+v", infos)
	}
	capBand(t, "joining the capped group by name", func() spin {
		r := e.run("flexgv", "run", "--group", "c", "--", bin("spinner"), "1000", "1", "16")
		var s spin
		if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 2 || !parseSpin(t, lines[1], &s) {
			t.Fatalf("a run joining the capped group by name: %+v", r)
		}
		return s
	}, 30)
	if r := e.run("flexgv", "rm", "c"); r.code != 0 {
		t.Errorf("rm: %+v", r)
	}
}
