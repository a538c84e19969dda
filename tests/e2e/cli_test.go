package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestBadCommandLines(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"run"}, 2, "no command given"},
		{[]string{"trace", "--json"}, 2, "no command given"},
		{[]string{"run", "--bogus", "--", "true"}, 2, "unknown flag: --bogus"},
		{[]string{"trace", "--slots", "1", "--", "true"}, 2, "--slots must be at least 2"},
		{[]string{"trace", "-o", "/nonexistent/dir/out.json", "--", "true"}, 2, "--output"},
		{[]string{"run", "--driver", "/nonexistent/libcuda.so.1", "--", "true"}, 2, "--driver /nonexistent/libcuda.so.1: no such file"},
		{[]string{"run", "--shim", "/nonexistent/libflexgv.so", "--", "true"}, 2, "shim library /nonexistent/libflexgv.so"},
		{[]string{"run", "--", "/nonexistent/program"}, 127, "cannot run /nonexistent/program"},
		{[]string{"frobnicate"}, 2, `flexgv: unknown command "frobnicate"`},
	} {
		r := e.run("flexgv", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("flexgv %s: exit %d, stderr %q; want exit %d and %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.msg)
		}
	}
}

func TestExitStatusPassesThrough(t *testing.T) {
	e := newEnv(t)
	if r := e.run("flexgv", "run", "--", "sh", "-c", "exit 7"); r.code != 7 {
		t.Errorf("run: exit %d, want 7", r.code)
	}
	if r := e.run("flexgv", "run", "--", "sh", "-c", "kill -9 $$"); r.code != 128+9 {
		t.Errorf("run of a SIGKILLed program: exit %d, want 137", r.code)
	}
	s, r := e.trace(nil, "nocuda")
	if r.code != 4 || s.ExitCode != 4 {
		t.Errorf("trace: exit %d, summary says %d, want 4", r.code, s.ExitCode)
	}
}

// --log prints one line per call, as it happens, in a fixed format.
func TestLogLines(t *testing.T) {
	e := newEnv(t)
	r := e.run("flexgv", "trace", "--log", "-o", e.dir+"/s.txt", "--", bin("direct"), "3")
	if r.code != 0 {
		t.Fatalf("direct failed: %s", r.stderr)
	}
	line := regexp.MustCompile(`^\[flexgv\] pid \d+ (\w+)\((.*)\) = (\w+) \d+\.\dus$`)
	calls := map[string]uint64{}
	allocated := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("unexpected log line %q", l)
		}
		calls[m[1]]++
		// An allocation shows the address it gave back, and its free names it.
		for _, a := range regexp.MustCompile(`^dptr=0x[0-9a-f]+->(0x[0-9a-f]+),`).FindAllStringSubmatch(m[2], -1) {
			allocated[a[1]] = true
		}
		if m[1] == "cuMemAlloc_v2" && m[3] == "CUDA_SUCCESS" {
			a := regexp.MustCompile(`^dptr=0x[0-9a-f]+->(0x[0-9a-f]+), bytesize=1048576$`).FindStringSubmatch(m[2])
			if a == nil || a[1] == "0x0" {
				t.Errorf("cuMemAlloc_v2 arguments logged as %q", m[2])
			}
		}
		if f := regexp.MustCompile(`^dptr=(0x[0-9a-f]+)$`).FindStringSubmatch(m[2]); m[1] == "cuMemFree_v2" && (f == nil || !allocated[f[1]]) {
			t.Errorf("cuMemFree_v2 of an address no allocation logged: %q", m[2])
		}
	}
	if len(allocated) == 0 {
		t.Error("no allocation logged")
	}
	want := expects(t, r.stdout)
	for name, n := range want {
		if calls[name] != n {
			t.Errorf("%s: %d log lines, %d calls made", name, calls[name], n)
		}
	}
	if !strings.Contains(r.stderr, "= CUDA_ERROR_INVALID_CONTEXT") {
		t.Error("the failing call is not logged with its error")
	}
}

// The text summary names every API the program called, and its processes.
func TestTextSummary(t *testing.T) {
	e := newEnv(t)
	r := e.run("flexgv", "trace", "--", bin("direct"), "2")
	if r.code != 0 {
		t.Fatalf("direct failed: %s", r.stderr)
	}
	for _, want := range []string{"flexgv trace: 1 process (1 exited)", "cuMemAlloc_v2", "cuLaunchKernel", "2.0MiB", "direct", "exit code 0"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stderr)
		}
	}
}

// --driver alone is enough: with no driver on the library path, the
// program's own dlopen("libcuda.so.1") and its -lcuda find the one named,
// whatever its file is called.
func TestDriverFlagFromCleanEnvironment(t *testing.T) {
	e := newEnv(t)
	if r := e.runIn("", "flexgv", "run", "--", bin("rtlike"), "1"); r.code != 35 || !strings.Contains(r.stderr, "Pass --driver") {
		t.Fatalf("without a driver: exit %d, stderr %q; want 35 and the advice to pass --driver", r.code, r.stderr)
	}
	renamed := filepath.Join(e.dir, "libcuda.so.999.1")
	data, err := os.ReadFile(filepath.Join(build, "sim", "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(renamed, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, driver := range []string{filepath.Join(build, "sim", "libcuda.so.1"), renamed} {
		for _, client := range []string{"rtlike", "direct"} {
			r := e.runIn("", "flexgv", "run", "--driver", driver, "--", bin(client), "1")
			if r.code != 0 || strings.Contains(r.stderr, "warning") {
				t.Errorf("run --driver %s -- %s: exit %d, stderr %q", driver, client, r.code, r.stderr)
			}
		}
	}
}

// flexgv version names a commit of this repository and the build date.
func TestVersionNamesCommitAndDate(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := e.run("flexgv", args...)
		m := regexp.MustCompile(`^flexgv \S+ \(commit ([0-9a-f]{7,})(-dirty)?, built (\d{4}-\d\d-\d\d\S*)\)\n$`).FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil {
			t.Fatalf("flexgv %s: exit %d, %q; want the commit and build date", args[0], r.code, r.stdout)
		}
		if exec.Command("git", "rev-parse", "--git-dir").Run() != nil {
			continue // not run from a clone
		}
		if err := exec.Command("git", "cat-file", "-e", m[1]+"^{commit}").Run(); err != nil {
			t.Errorf("flexgv %s names %s, not a commit of this repository", args[0], m[1])
		}
	}
}

// Every usage error exits 2 with one line naming the command and its help.
func TestUsageErrorsExitTwo(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"ps", "extra-arg"}, `flexgv ps: unexpected argument "extra-arg" (see flexgv ps --help)`},
		{[]string{"node", "x"}, `flexgv node: unexpected argument "x"`},
		{[]string{"top", "--once", "x"}, `flexgv top: unexpected argument "x"`},
		{[]string{"version", "x"}, `flexgv version: unexpected argument "x"`},
		{[]string{"update"}, "flexgv update: give one TENANT, got 0 arguments"},
		{[]string{"rm", "a", "b"}, "flexgv rm: give one GROUP, got 2 arguments"},
		{[]string{"bench", "frob"}, `flexgv bench: unknown command "frob"`},
		{[]string{"tarce"}, `flexgv: unknown command "tarce"; did you mean "trace"?`},
		{[]string{"help", "tarce"}, `flexgv help: unknown command "tarce"; did you mean "trace"?`},
		{[]string{"serve"}, "--listen is required (unix:///PATH, tcp://HOST:PORT or tls://HOST:PORT)"},
		{[]string{"top", "--json"}, "flexgv top: --json prints a snapshot; give --once too"},
		// --driver and --shim only where a program starts under the shim.
		{[]string{"node", "--driver", "x"}, "flexgv node: unknown flag: --driver"},
		{[]string{"ps", "--shim", "x"}, "flexgv ps: unknown flag: --shim"},
		{[]string{"rm", "--driver", "x", "g"}, "flexgv rm: unknown flag: --driver"},
		{[]string{"update", "--shim", "x", "g"}, "flexgv update: unknown flag: --shim"},
		{[]string{"top", "--driver", "x"}, "flexgv top: unknown flag: --driver"},
	} {
		r := e.run("flexgv", c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.msg) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("flexgv %s: exit %d, stderr %q; want exit 2 and one line with %q", strings.Join(c.args, " "), r.code, r.stderr, c.msg)
		}
	}
}

// Every command's help works, and says what a user needs: --shim and
// --driver on the commands that start programs under the shim alone.
func TestHelpOfEveryCommand(t *testing.T) {
	e := newEnv(t)
	r := e.run("flexgv", "--help")
	if r.code != 0 {
		t.Fatalf("flexgv --help: %+v", r)
	}
	_, list, _ := strings.Cut(r.stdout, "Available Commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	starts := map[string]bool{"run": true, "trace": true, "census": true, "serve": true}
	seen := 0
	for _, line := range strings.Split(list, "\n") {
		name := strings.Fields(line)[0]
		h := e.run("flexgv", name, "--help")
		if h.code != 0 || h.stderr != "" || !strings.Contains(h.stdout, "Usage:") {
			t.Errorf("flexgv %s --help: %+v", name, h)
			continue
		}
		seen++
		for _, f := range []string{"--driver", "--shim"} {
			if name == "daemon" && f == "--shim" {
				continue // the device plugin's, in a build with Kubernetes
			}
			if strings.Contains(h.stdout, f+" ") != starts[name] {
				t.Errorf("flexgv %s --help: has %s: %v, want %v", name, f, !starts[name], starts[name])
			}
		}
	}
	if seen < 10 {
		t.Errorf("only %d commands listed:\n%s", seen, r.stdout)
	}
	if h := e.run("flexgv", "run", "--help"); !strings.Contains(h.stdout, "shm:///PATH") {
		t.Errorf("flexgv run --help leaves shm:// out of --remote:\n%s", h.stdout)
	}
}

// node and top show sizes alike, and both have JSON.
func TestNodeAndTopJSON(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "node")
	if r.code != 0 || !regexp.MustCompile(`(?m)^0\s+.*`+simUUID0+`\s+0B\s+16GiB\s+0%\s+0$`).MatchString(r.stdout) {
		t.Errorf("flexgv node: %+v", r)
	}
	r = e.run("flexgv", "node", "--json")
	var gpus []struct {
		Index    int    `json:"index"`
		UUID     string `json:"uuid"`
		MemTotal uint64 `json:"memory_total"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &gpus); r.code != 0 || err != nil || len(gpus) == 0 ||
		gpus[0].UUID != simUUID0 || gpus[0].MemTotal != 16<<30 {
		t.Errorf("flexgv node --json: %v, %+v", err, r)
	}
	e.startDaemon(t)
	if r := e.run("flexgv", "run", "--group", "g", "--mem", "1GiB", "--compute", "30%", "--", "true"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	r = e.run("flexgv", "top", "--once", "--json", "--interval", "100ms")
	var v struct {
		Interval float64 `json:"interval_s"`
		GPUs     []struct {
			UUID     string `json:"uuid"`
			MemTotal uint64 `json:"memory_total"`
			Tenants  []struct {
				Name     string   `json:"name"`
				Share    uint32   `json:"compute_share"`
				Quota    uint64   `json:"quota"`
				Achieved *float64 `json:"achieved"`
			} `json:"tenants"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); r.code != 0 || err != nil || v.Interval <= 0 || len(v.GPUs) == 0 ||
		v.GPUs[0].UUID != simUUID0 || v.GPUs[0].MemTotal != 16<<30 || len(v.GPUs[0].Tenants) != 1 {
		t.Fatalf("flexgv top --once --json: %v, %+v", err, r)
	}
	if g := v.GPUs[0].Tenants[0]; g.Name != "g" || g.Share != 3000 || g.Quota != 1<<30 || g.Achieved == nil || *g.Achieved != 0 {
		t.Errorf("tenant g in top --json: %+v", g)
	}
}
