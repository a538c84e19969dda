package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/flexgv/flexgv/internal/census"
)

// The simulated driver's tables (simgpu/exports.c).
const (
	simA = "666c6578-6776-2d73-696d-2d7461622d41"
	simB = "666c6578-6776-2d73-696d-2d7461622d42"
)

// census runs argv under flexgv census --json and returns the report.
func (e *env) census(flags []string, argv ...string) (census.Report, result) {
	e.t.Helper()
	out := filepath.Join(e.dir, "census.json")
	args := append(append([]string{"census", "--json", "-o", out}, flags...), "--")
	r := e.run("flexgv", append(args, argv...)...)
	data, err := os.ReadFile(out)
	if err != nil {
		e.t.Fatalf("no census report: %v\nstderr: %s", err, r.stderr)
	}
	var rep census.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		e.t.Fatalf("bad census JSON: %v\n%s", err, data)
	}
	return rep, r
}

func findTable(t *testing.T, rep census.Report, uuid string) census.Table {
	t.Helper()
	for _, tb := range rep.Tables {
		if tb.UUID == uuid {
			return tb
		}
	}
	t.Fatalf("table %s not in the census: %+v", uuid, rep.Tables)
	return census.Table{}
}

// clientLines returns the values of the client's "KEY NAME VALUE" lines.
func clientLines(stdout, key string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(stdout, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == key {
			m[f[1]] = f[2]
		}
	}
	return m
}

// checkCensusCounts compares every count the client says it made with the
// report: calls per function slot, requests per table, refusals.
func checkCensusCounts(t *testing.T, rep census.Report, stdout string) {
	t.Helper()
	for name, n := range expects(t, stdout) {
		switch kind, uuid, _ := strings.Cut(name, ":"); kind {
		case "requests":
			if got := findTable(t, rep, uuid).Requests; got != n {
				t.Errorf("table %s handed out %d times, the census says %d", uuid, n, got)
			}
		case "refused":
			var got uint64
			for _, f := range rep.Refused {
				if f.UUID == uuid && f.Result == 1 {
					got += f.Requests
				}
			}
			if got != n {
				t.Errorf("table %s refused %d times (CUDA_ERROR_INVALID_VALUE), the census says %d: %+v", uuid, n, got, rep.Refused)
			}
		default:
			uuid, slot, _ := strings.Cut(name, "/")
			tb := findTable(t, rep, uuid)
			i := 0
			for _, c := range slot {
				i = 10*i + int(c-'0')
			}
			if i >= len(tb.Slots) || tb.Slots[i].Kind != "fn" || tb.Slots[i].Calls != n {
				t.Errorf("%s: the program made %d calls, the census says %+v", name, n, tb.Slots)
			}
		}
	}
}

// Every call into every function slot is counted exactly, over racing
// threads, a forked child and an exec'd one; the tables stay where the driver
// put them, read-only, with their data slots untouched and every argument and
// result passed through (the client checks those and exits 1 otherwise).
func TestCensusCountsEverySlotExactly(t *testing.T) {
	e := newEnv(t)
	rep, r := e.census(nil, bin("exportclient"))
	if r.code != 0 || rep.ExitCode != 0 {
		t.Fatalf("exportclient under census: exit %d (report %d)\n%s", r.code, rep.ExitCode, r.stderr)
	}
	checkCensusCounts(t, rep, r.stdout)

	a, b := findTable(t, rep, simA), findTable(t, rep, simB)
	kinds := func(tb census.Table) string {
		var k []string
		for _, s := range tb.Slots {
			k = append(k, s.Kind)
		}
		return strings.Join(k, " ")
	}
	if got := kinds(a); got != "size fn fn data fn data fn fn" || a.Slots[0].Value != "64" || a.Slots[3].Value != "0" ||
		!regexp.MustCompile(`^ptr libcuda\.so\.1\+0x[0-9a-f]+$`).MatchString(a.Slots[5].Value) {
		t.Errorf("table A (size word, a NULL and a data pointer among functions) read as %q: %+v", got, a.Slots)
	}
	if got := kinds(b); got != "fn fn fn" {
		t.Errorf("table B (three functions, then a NULL, no size word) read as %q", got)
	}
	for _, tb := range []census.Table{a, b} {
		if !regexp.MustCompile(`^libcuda\.so\.1\+0x[0-9a-f]+$`).MatchString(tb.Location) || len(tb.Errors) > 0 ||
			strings.Join(tb.Programs, ",") != "exportclient" {
			t.Errorf("table %s: at %q, errors %q, programs %q", tb.UUID, tb.Location, tb.Errors, tb.Programs)
		}
	}

	owners := clientLines(r.stdout, "owner")
	for name, lib := range owners {
		want := "libflexgv.so"
		if name == simA+"/5" {
			want = "libcuda.so.1" // the data slot
		}
		if lib != want {
			t.Errorf("slot %s points into %s, want %s", name, lib, want)
		}
	}
	prot := clientLines(r.stdout, "prot")
	for _, id := range []string{simA, simB} {
		if p := prot[id]; len(p) != 4 || p[0] != 'r' || p[1] != '-' {
			t.Errorf("table %s's page is %q after patching, want it read-only again", id, p)
		}
	}

	cmds := map[string]bool{}
	for _, p := range rep.Processes {
		if p.Comm != "exportclient" || p.Calls == 0 {
			t.Errorf("process %+v", p)
		}
		cmds[strings.TrimPrefix(p.Cmd, bin("exportclient"))] = true
	}
	if len(rep.Processes) != 3 || !cmds[""] || !cmds[" exec-child"] {
		t.Errorf("want the program, its forked child and its exec'd child, got %+v", rep.Processes)
	}
}

// The threads race for the first fetch of each table: every run counts the
// same.
func TestCensusRacingFetchesCountTheSame(t *testing.T) {
	long(t)
	e := newEnv(t)
	for i := 0; i < 10; i++ {
		rep, r := e.census(nil, bin("exportclient"))
		if r.code != 0 {
			t.Fatalf("run %d: exit %d\n%s", i, r.code, r.stderr)
		}
		checkCensusCounts(t, rep, r.stdout)
	}
}

// Without FLEXGV_CENSUS nothing is patched, even where the hook leaves the
// pass-through path (tracing, a memory quota), and the program sees exactly
// what it sees without the shim.
func TestNoCensusChangesNothing(t *testing.T) {
	e := newEnv(t)
	native := e.run("exportclient")
	if native.code != 0 || strings.Contains(native.stdout, "libflexgv") {
		t.Fatalf("exportclient natively: %+v", native)
	}
	cwd := t.TempDir()
	for _, args := range [][]string{
		{"run"},
		{"trace", "-o", filepath.Join(e.dir, "s.txt")},
		{"run", "--mem", "4GiB"},
	} {
		argv := append(append(args, "--"), bin("exportclient"))
		cmd := exec.Command(bin("flexgv"), argv...)
		cmd.Env, cmd.Dir = e.environ(filepath.Join(build, "sim")), cwd
		r := runCmd(t, cmd)
		if r.code != 0 || r.stdout != native.stdout {
			t.Errorf("flexgv %s: exit %d\n%s\nstdout differs from native:\n%s", strings.Join(args, " "), r.code, r.stderr, r.stdout)
		}
	}
	if left, _ := os.ReadDir(cwd); len(left) > 0 {
		t.Errorf("files left without a census: %v", left)
	}
}

// A program that is never handed a table has nothing to report, and leaves
// no process in the report.
func TestCensusOfProgramWithoutExportTables(t *testing.T) {
	e := newEnv(t)
	rep, r := e.census(nil, bin("direct"), "2")
	if r.code != 0 || len(rep.Tables) != 0 || len(rep.Processes) != 0 || len(rep.Refused) != 0 || len(rep.Incomplete) != 0 {
		t.Errorf("direct under census: exit %d, report %+v", r.code, rep)
	}
	if !strings.Contains(r.stdout, "direct: ok") {
		t.Errorf("direct did not run through: %s", r.stdout)
	}
	r = e.run("flexgv", "census", "--", bin("nocuda"))
	if r.code != 4 || !strings.Contains(r.stderr, "flexgv census: 0 export tables handed out to 0 processes, 0 refused, exit code 4") {
		t.Errorf("nocuda under census: exit %d, stderr %q", r.code, r.stderr)
	}
}

// --skip leaves the named slots as the driver set them, uncounted.
func TestCensusSkipLeavesSlotsAlone(t *testing.T) {
	e := newEnv(t)
	rep, r := e.census([]string{"--skip", simA + "/1," + simB + "/2"}, bin("exportclient"))
	if r.code != 0 {
		t.Fatalf("exportclient: exit %d\n%s", r.code, r.stderr)
	}
	owners := clientLines(r.stdout, "owner")
	a, b := findTable(t, rep, simA), findTable(t, rep, simB)
	for _, c := range []struct {
		tb   census.Table
		slot int
	}{{a, 1}, {b, 2}} {
		s := c.tb.Slots[c.slot]
		name := c.tb.UUID + "/" + string(rune('0'+c.slot))
		if s.Kind != "skip" || s.Calls != 0 || !strings.HasPrefix(s.Target, "libcuda.so.1+0x") || owners[name] != "libcuda.so.1" {
			t.Errorf("skipped slot %s: %+v, points into %s", name, s, owners[name])
		}
	}
	if a.Slots[2].Kind != "fn" || a.Slots[2].Calls != 12 || b.Slots[1].Calls != 15 {
		t.Errorf("the other slots are not counted as before: %+v %+v", a.Slots, b.Slots)
	}
	for _, bad := range []string{"", "x/1", simA + "/256", simA, simA + "/1,"} {
		r := e.run("flexgv", "census", "--skip", bad, "--", "true")
		if r.code != 2 {
			t.Errorf("--skip %q: exit %d, stderr %q", bad, r.code, r.stderr)
		}
	}
}

// Reports combine into a set, a set renders as markdown, and two censuses
// compare: the same one shows no difference, a changed one does (exit 1).
func TestCensusCombineMarkdownCompare(t *testing.T) {
	e := newEnv(t)
	rep, r := e.census(nil, bin("exportclient"))
	if r.code != 0 {
		t.Fatalf("exportclient: %s", r.stderr)
	}
	one := filepath.Join(e.dir, "one.json")
	data, _ := json.Marshal(rep)
	os.WriteFile(one, data, 0o644)
	set := filepath.Join(e.dir, "set.json")
	if r := e.run("flexgv", "census", "--combine", "-o", set, "first="+one, "second="+one); r.code != 0 {
		t.Fatalf("--combine: exit %d, %s", r.code, r.stderr)
	}
	md := e.run("flexgv", "census", "--markdown", set)
	for _, want := range []string{
		"| first | 3 | 2 | ",
		"| `" + simA + "` | 0 | size | 64 | | |",
		"|  | 1 | fn | libcuda.so.1+0x",
		" | 12 | 12 |",
		"|  | 3 | data | 0 | | |",
		"`666c6578-6776-2d6e-6f2d-7461626c6521` (CUresult 1): first, second",
	} {
		if !strings.Contains(md.stdout, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.stdout)
		}
	}
	if r := e.run("flexgv", "census", "--compare", set, set); r.code != 0 || !strings.Contains(r.stdout, "same tables") {
		t.Errorf("a set compared with itself: exit %d\n%s", r.code, r.stdout)
	}
	rep.Tables = rep.Tables[:1] // table B gone
	rep.Tables[0].Slots[2].Calls = 0
	data, _ = json.Marshal(rep)
	changed := filepath.Join(e.dir, "changed.json")
	os.WriteFile(changed, data, 0o644)
	cmp := e.run("flexgv", "census", "--compare", one, changed)
	for _, want := range []string{"table " + simB + " (3 slots, no size word, 3 functions): no longer handed out", "table " + simA + ": slots [2] no longer called"} {
		if cmp.code != 1 || !strings.Contains(cmp.stdout, want) {
			t.Errorf("compare with a changed census: exit %d, output lacks %q:\n%s", cmp.code, want, cmp.stdout)
		}
	}
}

func TestCensusBadCommandLines(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"census"}, "no command given"},
		{[]string{"census", "--combine", "--markdown", "x"}, "at most one of"},
		{[]string{"census", "--markdown", "--json", "x"}, "--json and --skip are for running a program"},
		{[]string{"census", "--markdown", "a", "b"}, "--markdown takes one report or set"},
		{[]string{"census", "--compare", "a"}, "--compare takes OLD and NEW"},
		{[]string{"census", "--combine", "x.json"}, `"x.json" is not NAME=REPORT`},
		{[]string{"census", "-o", "", "--", "true"}, "--output is empty"},
	} {
		r := e.run("flexgv", c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("flexgv %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), r.code, r.stderr, c.msg)
		}
	}
	if r := e.run("flexgv", "census", "--markdown", filepath.Join(e.dir, "none.json")); r.code != 1 || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("--markdown of a missing file: exit %d, %q", r.code, r.stderr)
	}
}
