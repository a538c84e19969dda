package census

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const procA = `flexgv-census 1
pid 10
ppid 1
comm app
cmd ./app --x
driver /usr/lib/libcuda.so.1
table 00000000-0000-0000-0000-00000000000a at libcuda.so.1+0x100 slots 4 requests 2
slot 0 size 32
slot 1 fn 5 libcuda.so.1+0x2000
slot 2 data ptr libcuda.so.1+0x300
slot 3 fn 0 cuGetProcAddress_v2
table 00000000-0000-0000-0000-00000000000c at libcuda.so.1+0x100 alias 00000000-0000-0000-0000-00000000000a requests 1
refused 00000000-0000-0000-0000-0000000000ff result 1 requests 3
end
`

const procB = `flexgv-census 1
pid 11
ppid 10
comm worker
cmd worker
table 00000000-0000-0000-0000-00000000000a at libcuda.so.1+0x100 slots 4 requests 0
error mprotect: Permission denied
slot 0 size 32
slot 1 fn 7 libcuda.so.1+0x2000
slot 2 fn 1 libcuda.so.1+0x2100
slot 3 uncounted cuGetProcAddress_v2
table 00000000-0000-0000-0000-00000000000b at libcuda.so.1+0x200 slots 2 requests 1
slot 0 fn 0 libcuda.so.1+0x3000
slot 1 skip libcuda.so.1+0x3100
end
`

func writeDir(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestMergeAddsUpProcesses(t *testing.T) {
	rep, err := ReadDir(writeDir(t, map[string]string{"p.10.census": procA, "p.11.census": procB, "other.txt": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Processes) != 2 || rep.Processes[0].Requests != 6 || rep.Processes[0].Calls != 5 ||
		rep.Processes[1].Requests != 1 || rep.Processes[1].Calls != 8 || rep.Processes[0].Cmd != "./app --x" {
		t.Errorf("processes: %+v", rep.Processes)
	}
	if len(rep.Tables) != 3 {
		t.Fatalf("tables: %+v", rep.Tables)
	}
	a, b, c := rep.Tables[0], rep.Tables[1], rep.Tables[2]
	if a.Requests != 2 || a.Calls != 13 || a.Slots[1].Calls != 12 || a.Slots[0].Value != "32" ||
		a.Slots[2].Value != "ptr libcuda.so.1+0x300" || a.Slots[3].Target != "cuGetProcAddress_v2" ||
		strings.Join(a.Programs, ",") != "app,worker" {
		t.Errorf("table a: %+v", a)
	}
	// What the processes disagree on, and why some calls are not counted.
	for _, want := range []string{"mprotect: Permission denied", "pid 11 (worker): slot 2 is fn", "pid 11 (worker): slot 3 is uncounted"} {
		if !strings.Contains(strings.Join(a.Errors, "\n"), want) {
			t.Errorf("table a notes %q lack %q", a.Errors, want)
		}
	}
	if b.Slots[1].Kind != "skip" || strings.Join(b.Programs, ",") != "worker" {
		t.Errorf("table b: %+v", b)
	}
	if c.AliasOf != a.UUID || c.Requests != 1 || len(c.Slots) != 0 || c.Shape() != "same table as "+a.UUID {
		t.Errorf("alias: %+v", c)
	}
	if len(rep.Refused) != 1 || rep.Refused[0].Requests != 3 || rep.Refused[0].Result != 1 {
		t.Errorf("refused: %+v", rep.Refused)
	}
	if a.Shape() != "4 slots, size word 32, 2 functions, 1 data" {
		t.Errorf("shape %q", a.Shape())
	}
}

// A file cut short (a process still writing, or killed while writing) or
// malformed is named, and counts nothing.
func TestBrokenFilesAreNamed(t *testing.T) {
	cut := procA[:strings.Index(procA, "end\n")]
	for name, text := range map[string]string{
		"cut":     cut,
		"version": strings.Replace(procA, "flexgv-census 1", "flexgv-census 2", 1),
		"order":   strings.Replace(procA, "slot 1 fn", "slot 2 fn", 1),
		"kind":    strings.Replace(procA, "slot 1 fn", "slot 1 blob", 1),
		"calls":   strings.Replace(procA, "slot 1 fn 5", "slot 1 fn x", 1),
		"orphan":  "flexgv-census 1\nslot 0 size 8\nend\n",
	} {
		rep, err := ReadDir(writeDir(t, map[string]string{"p.1.census": text}))
		if err != nil || len(rep.Incomplete) != 1 || len(rep.Tables) != 0 || len(rep.Processes) != 0 {
			t.Errorf("%s: %v %+v", name, err, rep)
		}
	}
}

func report(t *testing.T, files ...string) Report {
	m := map[string]string{}
	for i, f := range files {
		m[string(rune('a'+i))+".census"] = f
	}
	rep, err := ReadDir(writeDir(t, m))
	if err != nil || len(rep.Incomplete) > 0 {
		t.Fatal(err, rep.Incomplete)
	}
	return rep
}

func TestCompare(t *testing.T) {
	base := report(t, procA, procB)
	old := Set{Workloads: []Workload{{Name: "w", Report: base}}}
	if d := Compare(old, old); len(d) != 0 {
		t.Errorf("a census compared with itself: %q", d)
	}
	// Calls differ in number only: no difference.
	more := report(t, strings.Replace(procA, "slot 1 fn 5", "slot 1 fn 500", 1), procB)
	if d := Compare(old, Set{Workloads: []Workload{{Name: "w", Report: more}}}); len(d) != 0 {
		t.Errorf("only counts changed: %q", d)
	}
	changed := report(t,
		strings.NewReplacer("slot 1 fn 5", "slot 1 fn 0", "slot 2 data ptr libcuda.so.1+0x300", "slot 2 fn 3 libcuda.so.1+0x9",
			"slots 4 requests 2\nslot 0 size 32", "slots 4 requests 2\nslot 0 size 40", "0000000000ff", "0000000000fe").Replace(procA),
		strings.Replace(procB, "00000000000b", "00000000000d", -1))
	d := strings.Join(Compare(old, Set{Workloads: []Workload{{Name: "w", Report: changed}}}), "\n")
	for _, want := range []string{
		"table 00000000-0000-0000-0000-00000000000b (2 slots, no size word, 2 functions): no longer handed out",
		"table 00000000-0000-0000-0000-00000000000d (2 slots, no size word, 2 functions): new, handed out to [w]",
		"table 00000000-0000-0000-0000-00000000000a slot 0: size 40, was size 32",
		"table 00000000-0000-0000-0000-00000000000a slot 2: fn , was data ptr libcuda.so.1+0x300",
		"w: no longer handed table 00000000-0000-0000-0000-00000000000b",
		"refused 00000000-0000-0000-0000-0000000000fe (CUresult 1): new",
		"refused 00000000-0000-0000-0000-0000000000ff (CUresult 1): no longer asked for",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("differences lack %q:\n%s", want, d)
		}
	}
	// Table a's slot 1 is still called by the second process: no change.
	if strings.Contains(d, "slots [1]") {
		t.Errorf("slot 1 is still called:\n%s", d)
	}
	onlyA := report(t, strings.Replace(procA, "slot 1 fn 5", "slot 1 fn 0", 1))
	d = strings.Join(Compare(Set{Workloads: []Workload{{Name: "x", Report: report(t, procA)}}},
		Set{Workloads: []Workload{{Name: "y", Report: onlyA}}}), "\n")
	if !strings.Contains(d, "y: table 00000000-0000-0000-0000-00000000000a: slots [1] no longer called") {
		t.Errorf("two reports are one workload whatever their names:\n%s", d)
	}
}

func TestLoadReportOrSet(t *testing.T) {
	dir := t.TempDir()
	rep := report(t, procA)
	path := filepath.Join(dir, "vectoradd.json")
	f, _ := os.Create(path)
	rep.WriteJSON(f)
	f.Close()
	s, err := Load(path)
	if err != nil || len(s.Workloads) != 1 || s.Workloads[0].Name != "vectoradd" || len(s.Workloads[0].Report.Tables) != 2 {
		t.Fatalf("report as a set: %v %+v", err, s)
	}
	setPath := filepath.Join(dir, "set.json")
	f, _ = os.Create(setPath)
	s.WriteJSON(f)
	f.Close()
	if s2, err := Load(setPath); err != nil || len(s2.Workloads) != 1 || s2.Workloads[0].Name != "vectoradd" {
		t.Errorf("set: %v %+v", err, s2)
	}
	os.WriteFile(path, []byte(`{"x": 1}`), 0o644)
	if _, err := Load(path); err == nil {
		t.Error("loaded a JSON file that is neither")
	}
}
