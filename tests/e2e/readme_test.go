package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readmeScript returns the README's shell blocks, in order, as one script:
// what a reader types into one shell on the simulated GPU. The quick
// start's make commands are left out (make demo has a test of its own).
func readmeScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.HasPrefix(m[1], "make ") {
			continue
		}
		blocks = append(blocks, m[1])
	}
	if len(blocks) < 5 {
		t.Fatalf("README.md has %d shell blocks to run, want one per capability", len(blocks))
	}
	return strings.Join(blocks, "")
}

// Every command the README shows runs as written, on the simulated GPU,
// and shows what its comment says. The only changes: this test's build
// folder, a temporary folder for /tmp, a free port for the metrics, and
// a wait for a server's socket before the next command (a reader typing
// is slower than a script).
func TestReadmeCommandsRunAsWritten(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"curl", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the README's commands use %s, which is not installed", tool)
		}
	}
	e := newEnv(t)
	e.gpuForAll() // the README's server runs its executors as nobody
	tmp := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()

	script := readmeScript(t)
	// /tmp/ first: the build folder itself may lie under /tmp.
	for _, r := range [][2]string{
		{"/tmp/", tmp + "/"},
		{"$PWD/build/", build + "/"},
		{" build/", " " + build + "/"},
		{"flexgv daemon &", "flexgv daemon --metrics-addr 127.0.0.1:" + port + " &"},
		{"127.0.0.1:9400", "127.0.0.1:" + port},
	} {
		script = strings.ReplaceAll(script, r[0], r[1])
	}
	waitFor := func(sock string) string {
		return "\nfor i in $(seq 300); do [ -S " + sock + " ] && break; sleep 0.1; done\n"
	}
	script = regexp.MustCompile(`(?m)^flexgv daemon .*&$`).ReplaceAllStringFunc(script, func(l string) string {
		return l + waitFor(`"$FLEXGV_STATE_DIR/daemon.sock"`)
	})
	script = regexp.MustCompile(`(?m)^flexgv serve --listen unix://(\S+) .*&$`).ReplaceAllStringFunc(script, func(l string) string {
		return l + waitFor(strings.Fields(strings.TrimPrefix(l, "flexgv serve --listen unix://"))[0])
	})
	if strings.Count(script, "for i in $(seq 300)") != 2 {
		t.Fatalf("the README's daemon and server lines are not where this test waits for them:\n%s", script)
	}
	// A command that fails ends the script; what it left running in the
	// background is stopped with it, so that its output ends too.
	cmd := exec.Command("bash", "-c", "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"+script)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = e.environ("")
	cmd.WaitDelay = 10 * time.Second
	res := runCmd(t, cmd)
	out := res.stdout + res.stderr
	if res.code != 0 {
		t.Fatalf("the README's commands exited %d\nscript:\n%s\noutput:\n%s", res.code, script, out)
	}
	for _, want := range []string{
		`FlexGV Simulated GPU`,                                               // flexgv node
		`free \d+ total 2147483648 device_total 2147483648`,                  // a 2 GiB device
		`one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS`, // memclient exact
		`total 4294967296 device_total 4294967296`,                           // 25 % of 16 GiB, then team-a's 4 GiB
		`(?m)^kernels \d+ elapsed_ms [0-9.]+ share [0-9.]+`,                  // the spinners
		`(?m)^team-a\s+0 GPU-\S+\s+4GiB\s+\S+\s+40%\s+-\s+high`,              // flexgv ps after the update
		`(?m)^flexgv_tenant_memory_quota_bytes\{.*tenant="team-a"\} 4\.294967296e\+09`,
		`(?m)^  TENANT\s+SHARE\s+ACHIEVED`, // flexgv top --once
		`removed team-a`,
		`rtlike: ok \(2 iterations\)`,               // through flexgv serve
		`(?m)^cuLaunchKernel\S*\s+\d+`,              // a trace summary
		`\[flexgv\] pid \d+ cuGetProcAddress_v2\(`,  // a trace --log line
		`(?m)^\d+\s+\d+\s+exportclient\s+\d+\s+\d+`, // the census's processes
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the README's commands show nothing matching %s\noutput:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(tmp, "calls.json")); err != nil {
		t.Errorf("flexgv trace --json -o wrote no summary: %v", err)
	}
	// The three spinners of the first pairs, by share: 30/70 under
	// contention, a cap alone, and high over low.
	var shares []float64
	for _, m := range regexp.MustCompile(`(?m)^kernels \d+ elapsed_ms [0-9.]+ share ([0-9.]+)`).FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		shares = append(shares, v)
	}
	if len(shares) != 5 {
		t.Fatalf("%d spinners reported, want 5:\n%s", len(shares), out)
	}
	// What the mechanism guarantees on a busy machine, where a starved host
	// leaves the device idle: the split of the time the pair got, a cap
	// as an upper bound. The pairs print in the order they finish.
	part := func(a, b float64) float64 { return max(a, b) / (a + b) }
	part70, partHigh := part(shares[0], shares[1]), part(shares[3], shares[4])
	for _, c := range []struct {
		what          string
		got, min, max float64
	}{
		{"--compute 70%'s part of what the 30/70 pair got", 100 * part70, 55, 85},
		{"--compute-max 30% alone", shares[2], 0, 45},
		{"--priority high's part of what the pair got", 100 * partHigh, 60, 100},
	} {
		if c.got < c.min || c.got > c.max {
			t.Errorf("%s: %.1f%%, want %.0f–%.0f\n%s", c.what, c.got, c.min, c.max, out)
		}
	}
}
