package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flexgv/flexgv/internal/sched"
)

// The committed generated files must be what the tables generate.
func TestGeneratedFilesUpToDate(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Errorf("%s: %v (run go run ./tools/gen)", p, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date: run go run ./tools/gen", p)
		}
	}
}

func TestParseRejectsBadLines(t *testing.T) {
	for _, line := range []string{
		"cuFoo(int x)",              // no version
		"1000 cuFoo(int)",           // parameter without a name
		"1000 cuFoo(int x) weird=1", // unknown attribute
	} {
		p := filepath.Join(t.TempDir(), "x.api")
		os.WriteFile(p, []byte(line+"\n"), 0o644)
		if _, err := parseAPI(p, LibCUDA); err == nil {
			t.Errorf("%q: parsed without error", line)
		}
	}
}

func TestVariantNaming(t *testing.T) {
	cases := []struct{ name, base, pfn string }{
		{"cuMemAlloc_v2", "cuMemAlloc", "PFN_cuMemAlloc_v3020"},
		{"cuLaunchKernel_ptsz", "cuLaunchKernel", "PFN_cuLaunchKernel_v7000_ptsz"},
		{"cuMemcpyHtoD_v2_ptds", "cuMemcpyHtoD", "PFN_cuMemcpyHtoD_v7000_ptds"},
		{"cuStreamBeginCapture_v2_ptsz", "cuStreamBeginCapture", "PFN_cuStreamBeginCapture_v10010_ptsz"},
	}
	entries, err := parseAPI(filepath.Join("..", "..", "api", "cuda.api"), LibCUDA)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Entry{}
	for _, e := range entries {
		byName[e.Name] = e
	}
	for _, c := range cases {
		e, ok := byName[c.name]
		if !ok {
			t.Fatalf("%s not in cuda.api", c.name)
		}
		if e.Base() != c.base || e.PFN() != c.pfn {
			t.Errorf("%s: base %s pfn %s, want %s %s", c.name, e.Base(), e.PFN(), c.base, c.pfn)
		}
	}
	// Every per-thread variant has a legacy sibling of the same base.
	for _, e := range entries {
		if e.PerThread() == "" {
			continue
		}
		found := false
		for _, o := range entries {
			found = found || (o.Base() == e.Base() && o.PerThread() == "" && len(o.Params) == len(e.Params))
		}
		if !found && !strings.HasPrefix(e.Name, "cuStreamBeginCapture") {
			t.Errorf("%s has no legacy-stream sibling", e.Name)
		}
	}
}

// A hook with several policies chains them in the order of policies, each
// handed the rest of the chain, the driver last.
func TestPolicyChainOrder(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.api")
	os.WriteFile(p, []byte("1000 cuFoo(int x) mem census\n"), 0o644)
	entries, err := parseAPI(p, LibCUDA)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(entries[0].Policies, " "); got != "census mem" {
		t.Fatalf("policies %q, want outermost first: census mem", got)
	}
	w, err := wrapper(entries[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		// The inner layer: mem over the driver.
		"static CUresult fg_layer1_cuFoo(int x)\n{\n    fg_real_cuFoo real = (fg_real_cuFoo)fg_real_fn(FG_API_cuFoo);\n" +
			"    return (fg_policy_on[FG_POLICY_MEM] ? fg_mem_cuFoo(real, x) : real(x));\n}\n",
		// The outer one, in the slow path: census over the inner layer,
		// which is written in place when census is off.
		"return (fg_policy_on[FG_POLICY_CENSUS] ? fg_census_cuFoo(fg_layer1_cuFoo, x) : " +
			"(fg_policy_on[FG_POLICY_MEM] ? fg_mem_cuFoo(real, x) : real(x)));",
	} {
		if !strings.Contains(w, want) {
			t.Errorf("wrapper lacks %q:\n%s", want, w)
		}
	}
}

// A policy acting on a hook on demand is left out of the hooks enabling it
// diverts, and acts only once asked for (fg_ondemand).
func TestOnDemandPolicy(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.api")
	os.WriteFile(p, []byte("1000 cuFoo(int x) mem:ondemand census\n1000 cuBar(int x) mem\n"), 0o644)
	entries, err := parseAPI(p, LibCUDA)
	if err != nil {
		t.Fatal(err)
	}
	w, err := wrapper(entries[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := "(fg_policy_on[FG_POLICY_MEM] && fg_ondemand[FG_API_cuFoo]) ? fg_mem_cuFoo(real, x)"; !strings.Contains(w, want) {
		t.Errorf("wrapper lacks %q:\n%s", want, w)
	}
	if got := policyHooks(entries, "mem"); got != "FG_API_cuBar" {
		t.Errorf("mem diverts %q when enabled, want only FG_API_cuBar", got)
	}
}

func TestRemoteAnnotationsRejected(t *testing.T) {
	cuda := []Entry{{Lib: LibCUDA, Version: 2000, Name: "cuFoo", Params: []Param{{"int *", "out"}, {"const void *", "src"}, {"size_t", "n"}}}}
	for _, line := range []string{
		"cuBar sync",                            // not in cuda.api
		"cuFoo",                                 // no disposition
		"cuFoo later out=out src=in[n]",         // unknown disposition
		"cuFoo sync out=out",                    // pointer without a kind
		"cuFoo sync out=out src=in",             // void buffer without a size
		"cuFoo sync out=out src=in[n] n=in",     // kind on a by-value parameter
		"cuFoo sync out=str[n] src=in[n]",       // count on a string
		"cuFoo sync out=wild src=in[n]",         // unknown kind
		"cuFoo sync out=out src=in[n] nope=out", // no such parameter
		"cuFoo sync out=out src=in[n] drain=s",  // drain names no parameter
		"2000 cuFoo(int *out) sync out=out",     // prototype of a cuda.api entry
		"3000 cuBaz(CUresult *q) sync q=out",    // reserved name
		"table 00 x 2",                          // bad UUID
		"slot 0 null",                           // slot before a table
		"table 00000000-0000-0000-0000-000000000000 t 2\nslot 0 null",                           // fewer words described
		"table 00000000-0000-0000-0000-000000000000 t 1\nslot 0 sync double f(int *p) p=out",    // pointers with a non-CUresult
		"table 00000000-0000-0000-0000-000000000000 t 1\nslot 0 sync CUresult f(CUdeviceptr p)", // a device address the executor would not check
		"table 00000000-0000-0000-0000-000000000000 t 1\nslot 0 sync double f(CUstream s)",      // a handle with no CUresult to refuse it by
		"table 00000000-0000-0000-0000-000000000000 t 1\nslot 0 sync CUresult f(int *p) p=zero", // zero is for by-value parameters
		"table 00000000-0000-0000-0000-000000000000 t 1\nslot 0 local CUresult f(void)",         // a local function not named fgr_
		"table 00000000-0000-0000-0000-000000000000 t 1\nslot 0 local fgr_f",                    // a local function without a prototype
		"table 00000000-0000-0000-0000-000000000000 t 2\nslot 0-1 null",                         // a range of other than unsupported
		"table 00000000-0000-0000-0000-000000000000 t 2\nslot 0-2 unsupported",                  // a range past the table
		"table 00000000-0000-0000-0000-000000000000 t 1\nslot 0 unsupported x",                  // unsupported takes nothing more
		"3000 cuD(CUdeviceptr d, size_t n) sync",                                                // a device address without a kind
		"3000 cuD(CUdeviceptr d, size_t n) sync d=dev",                                          // dev without its size
		"3000 cuD(CUdeviceptr d, size_t n) sync d=base[n]",                                      // base with a size
		"3000 cuD(CUdeviceptr d, size_t n) sync d=dev[n] n=dev[1]",                              // dev on a size
		"3000 cuD(CUdeviceptr *d, size_t n) sync d=dev[n]",                                      // dev on a result
		"3000 cuD(int *d, size_t n) sync d=alloc[n]",                                            // alloc on other than CUdeviceptr *
		"3000 cuD(CUdeviceptr d, size_t n) sync d=dev[n] destroys=d",                            // destroys needs base
		"3000 cuD(CUdeviceptr d, size_t n) sync d=dev[n] destroys=n",                            // destroys names no handle
		"3000 cuD(CUstream *s, size_t n) sync s=out owner=n",                                    // owner names no handle
		"3000 cuO(CUjit_option *o, void **v, unsigned int n) sync o=jitopts v=optvalues",        // options without their count
		"3000 cuO(CUjit_option *o, void **v, unsigned int n) sync o=jitopts[v] v=optvalues",     // a count that is a pointer
		"3000 cuO(CUjit_option *o, void **v, unsigned int n) sync o=jitopts[n] v=in[n]",         // values not optvalues
		"3000 cuO(void **v, CUjit_option *o, unsigned int n) sync o=jitopts[n] v=optvalues",     // values before the options
		"3000 cuH(void *d, int a) sync d=out[8] ashandle=d:CUcontext",                           // ashandle without its condition
		"3000 cuH(void *d, int a) sync d=out[8] ashandle=d:int:a==1",                            // ashandle of a type that is no handle
		"3000 cuH(int *d, int a) sync d=out ashandle=d:CUcontext:a==1",                          // ashandle of a typed result
		"cuFoo unsupported",                   // unsupported without its reason
		"cuFoo unsupported why",               // a reason not in quotes
		"cuFoo unsupported \"a\" \"b\"",       // more than the reason
		"cuFoo unsupported \"x\"\ncuFoo sync", // annotated twice
		"3000 cuU(int *p) unsupported p=out",  // unsupported with kinds
		"cuFoo local why",                     // a local note not in quotes
		"cuFoo local \"a\" out=out",           // a local note and more
	} {
		p := filepath.Join(t.TempDir(), "remote.api")
		os.WriteFile(p, []byte(line+"\n"), 0o644)
		_, _, err := parseRemote(p, cuda)
		if err == nil {
			t.Errorf("%q: parsed without error", line)
		}
	}
}

// projectSpec is api/cuda.api, and api/remote.api joined with it.
func projectSpec(t *testing.T) ([]Entry, []RemoteEntry, []*Table) {
	t.Helper()
	cuda, err := parseAPI(filepath.Join("..", "..", "api", "cuda.api"), LibCUDA)
	if err != nil {
		t.Fatal(err)
	}
	entries, tables, err := parseRemote(filepath.Join("..", "..", "api", "remote.api"), cuda)
	if err != nil {
		t.Fatal(err)
	}
	return cuda, entries, tables
}

// Every CUDA entry of the shim's list is exported by the remoting client,
// once, and forwarded entries get consecutive operation numbers.
func TestRemoteCoversCUDA(t *testing.T) {
	cuda, entries, tables := projectSpec(t)
	if len(tables) == 0 {
		t.Error("no export tables")
	}
	seen := map[string]bool{}
	op := 1
	for _, e := range entries {
		if seen[e.Name] {
			t.Errorf("%s twice", e.Name)
		}
		seen[e.Name] = true
		if e.Forwarded() {
			if e.Op != op {
				t.Errorf("%s: operation %d, want %d", e.Name, e.Op, op)
			}
			op++
		}
	}
	for _, e := range cuda {
		if !seen[e.Name] {
			t.Errorf("%s is not exported by the remoting client", e.Name)
		}
	}
}

// Every CUDA entry point the remoting client exports is carried to the
// server, answered by the client, or refused on purpose with the reason
// api/remote.api gives: none is left unsupported by omission.
func TestRemoteEveryEntryDecided(t *testing.T) {
	_, entries, _ := projectSpec(t)
	for _, e := range entries {
		if e.Table == nil && e.Disp == "" && e.Why == "" {
			t.Errorf("%s is neither forwarded, answered by the client, nor unsupported with a reason in api/remote.api", e.Name)
		}
	}
}

// Every function of the driver's headers must be an entry of the spec at
// the header's version: a name left out, or at another version, stops the
// generator and says which.
func TestAccountingOfTheDriverAPI(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.names")
	os.WriteFile(p, []byte("# header\n2000 cuA\n12030 cuB_v2\n"), 0o644)
	spec := []RemoteEntry{{Entry: Entry{Name: "cuA", Version: 2000}}, {Entry: Entry{Name: "cuB_v2", Version: 12030}}}
	if err := checkAccounting(p, spec); err != nil {
		t.Fatalf("all accounted for: %v", err)
	}
	if err := checkAccounting(p, spec[:1]); err == nil || !strings.Contains(err.Error(), "cuB_v2 (12030)") {
		t.Errorf("a name left out: %v", err)
	}
	spec[1].Version = 12000
	if err := checkAccounting(p, spec); err == nil || !strings.Contains(err.Error(), "cuB_v2 is at 12000 in the spec, 12030") {
		t.Errorf("another version: %v", err)
	}
	// An entry resolved at another version than its typedef's is
	// accounted for by the typedef's (the headers').
	spec[1] = RemoteEntry{Entry: Entry{Name: "cuB_v2", Version: 13000, Typedef: "12030"}}
	if err := checkAccounting(p, spec); err != nil {
		t.Errorf("by its typedef's version: %v", err)
	}
	os.WriteFile(p, []byte("cuA\n"), 0o644)
	if err := checkAccounting(p, spec); err == nil || !strings.Contains(err.Error(), "want VERSION NAME") {
		t.Errorf("a malformed line: %v", err)
	}
	// And the project's own list is accounted for by the spec.
	_, entries, _ := projectSpec(t)
	if err := checkAccounting(filepath.Join("..", "..", "api", "cuda13.names"), entries); err != nil {
		t.Error(err)
	}
}

// A name whose per-thread variants stop at an older version than its
// default-stream ones stops the generator: the per-thread flag would hand
// the program the older ABI. The project's spec has none.
func TestPerThreadVariantsAreNewest(t *testing.T) {
	spec := []RemoteEntry{{Entry: Entry{Name: "cuA", Version: 12080}}, {Entry: Entry{Name: "cuA_ptsz", Version: 12080}},
		{Entry: Entry{Name: "cuA_v2", Version: 13000}}}
	if err := checkPerThread(spec); err == nil || !strings.Contains(err.Error(), "cuA (per-thread 12080, default stream 13000)") {
		t.Errorf("an older per-thread variant: %v", err)
	}
	spec = append(spec, RemoteEntry{Entry: Entry{Name: "cuA_v2_ptsz", Version: 13000}})
	if err := checkPerThread(spec); err != nil {
		t.Errorf("per-thread at the newest version: %v", err)
	}
	_, entries, _ := projectSpec(t)
	if err := checkPerThread(entries); err != nil {
		t.Error(err)
	}
}

// An entry refused by name has no prototype: its stub takes no arguments,
// says the spec's reason, is resolvable at its version and is declared
// nowhere (so no header's declaration can clash with it).
func TestRemoteBareRefusal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "remote.api")
	os.WriteFile(p, []byte("12040 cuGreenCtxCreate unsupported \"green \"x\"\"\n"), 0o644)
	if _, _, err := parseRemote(p, nil); err == nil {
		t.Error("a reason with a quote inside was taken")
	}
	os.WriteFile(p, []byte("12040 cuGreenCtxCreate unsupported \"not carried yet\"\n"), 0o644)
	entries, tables, err := parseRemote(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || !entries[0].Bare || entries[0].Why != "not carried yet" || entries[0].Version != 12040 {
		t.Fatalf("entries %+v", entries)
	}
	c := emitRemoteClient(entries, tables)
	for _, want := range []string{"FGR_EXPORT CUresult cuGreenCtxCreate(void)\n{\n    return fgr_unsupported(0, \"cuGreenCtxCreate\", \"not carried yet\");",
		"{\"cuGreenCtxCreate\", \"cuGreenCtxCreate\", 12040, 0, (void *)cuGreenCtxCreate},"} {
		if !strings.Contains(c, want) {
			t.Errorf("client lacks %q", want)
		}
	}
	if h := emitRemoteProto(entries); strings.Contains(h, "cuGreenCtxCreate") {
		t.Errorf("declared:\n%s", h)
	}
}

// The offsets given to Python readers (emitLayoutPy) are the ones the Go
// mirror of the scheduler's region has, and so the C struct's (checked
// against each other elsewhere).
func TestPythonLayoutMatchesGo(t *testing.T) {
	types := map[string]reflect.Type{"Tenant": reflect.TypeOf(sched.Tenant{}), "Header": reflect.TypeOf(sched.Header{}),
		"Slot": reflect.TypeOf(sched.Slot{})}
	l := layouts[2]
	for _, s := range l.Structs {
		rt := types[s.Go]
		offs, size, _ := fieldOffsets(l, s)
		if uintptr(size) != rt.Size() {
			t.Errorf("%s: size %d, Go's %d", s.Go, size, rt.Size())
		}
		for i, f := range s.Fields {
			if gf, ok := rt.FieldByName(f.Go); !ok || gf.Offset != uintptr(offs[i]) {
				t.Errorf("%s.%s: offset %d, Go's %d (%v)", s.Go, f.Go, offs[i], gf.Offset, ok)
			}
		}
	}
}
