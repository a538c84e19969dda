package e2e

import (
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
		{[]string{"frobnicate"}, 1, "unknown command"},
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
	for _, want := range []string{"flexgv trace: 1 processes (1 exited)", "cuMemAlloc_v2", "cuLaunchKernel", "2.0MiB", "direct", "exit code 0"} {
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
