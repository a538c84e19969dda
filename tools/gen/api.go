package main

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/fnv"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Lib is the library an entry point belongs to.
type Lib int

const (
	LibCUDA Lib = iota
	LibNVML
)

// Param is one parameter of an entry point.
type Param struct {
	Type string // C type, e.g. "const char *"
	Name string
}

// Entry is one exported variant from api/*.api.
type Entry struct {
	Lib      Lib
	Version  int
	Name     string // exported symbol, e.g. cuMemAlloc_v2
	Params   []Param
	Bytes    string   // C expression counted as bytes, or ""
	Policies []string // policies that act on this hook, outermost first (see policies)
	// Compute is the form of a compute hook the generator writes (see
	// computeForms); "" when fg_compute_<name> is written by hand.
	Compute string
	Legacy  bool // typedef only under __CUDA_API_VERSION_INTERNAL
	// OnDemand are policies (POLICY:ondemand) that act on this hook but do
	// not divert it when enabled: the policy diverts it itself once it has
	// something to do there, so that until then the hook stays on the
	// pass-through path.
	OnDemand []string
	// Typedef is the version in the name of cudaTypedefs.h's PFN_ typedef
	// for this ABI where it is not Version (the version cuGetProcAddress
	// resolves the name at), or "none" where the headers declare it not at
	// all (the driver exports it): its declaration is then not checked.
	Typedef string
}

// policies are the policies a hook can name in api/*.api, outermost first:
// each is hand-written once per hook as fg_<policy>_<name>(next, args...),
// where next is the rest of the chain (the next active policy, and at the
// end the backend: the driver). Tracing wraps every hook outside them all.
var policies = []struct {
	Name, Doc string
	Always    bool // on in every process; its hooks never take the pass-through path
}{
	{"procaddr", "cuGetProcAddress answers mapped to the wrapper of exactly their variant", true},
	{"census", "export tables patched with counting trampolines (FLEXGV_CENSUS)", false},
	{"mem", "memory quotas (FLEXGV_TENANT)", false},
	{"compute", "compute caps (FLEXGV_COMPUTE with FLEXGV_TENANT)", false},
}

// computeForms are the compute hooks the generator writes
// (shim/compute_gen.inc, over the macros of shim/compute.c), by the kind of
// call: the rest are written by hand.
var computeForms = map[string]string{
	"stream":   "work queued on its hStream, taking its turn as a launch does",
	"blocking": "a synchronous copy or memset on the default stream",
	"readback": "a synchronous copy into host memory: a synchronization too",
	"sync":     "a synchronization: what completed is said at once",
}

// policyIndex is the position of a policy in policies, or -1.
func policyIndex(name string) int {
	for i, p := range policies {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// Base is the name cuGetProcAddress is asked for: the symbol without its
// ABI suffixes (_v2, _ptsz, _ptds).
func (e Entry) Base() string {
	n := strings.TrimSuffix(strings.TrimSuffix(e.Name, "_ptsz"), "_ptds")
	return regexp.MustCompile(`_v[0-9]+$`).ReplaceAllString(n, "")
}

// PerThread reports whether this variant is a per-thread-default-stream ABI.
func (e Entry) PerThread() string {
	switch {
	case strings.HasSuffix(e.Name, "_ptsz"):
		return "ptsz"
	case strings.HasSuffix(e.Name, "_ptds"):
		return "ptds"
	}
	return ""
}

// PFN is the name of the real typedef in cudaTypedefs.h for this variant.
func (e Entry) PFN() string {
	v := fmt.Sprint(e.Version)
	if e.Typedef != "" {
		v = e.Typedef
	}
	s := fmt.Sprintf("PFN_%s_v%s", e.Base(), v)
	if pt := e.PerThread(); pt != "" {
		s += "_" + pt
	}
	return s
}

// Ret is the C return type.
func (e Entry) Ret() string {
	if e.Lib == LibNVML {
		return "nvmlReturn_t"
	}
	return "CUresult"
}

// ParamList is the C parameter list ("void" when empty).
func (e Entry) ParamList() string {
	if len(e.Params) == 0 {
		return "void"
	}
	var s []string
	for _, p := range e.Params {
		s = append(s, joinDecl(p.Type, p.Name))
	}
	return strings.Join(s, ", ")
}

// ArgList is the comma-separated argument names.
func (e Entry) ArgList() string {
	var s []string
	for _, p := range e.Params {
		s = append(s, p.Name)
	}
	return strings.Join(s, ", ")
}

func joinDecl(typ, name string) string {
	if strings.HasSuffix(typ, "*") {
		return typ + name
	}
	return typ + " " + name
}

var lineRE = regexp.MustCompile(`^(\d+)\s+([A-Za-z_][A-Za-z0-9_]*)\((.*)\)\s*(.*)$`)

func parseAPI(path string, lib Lib) ([]Entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := lineRE.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: cannot parse %q", path, ln, line)
		}
		v, _ := strconv.Atoi(m[1])
		e := Entry{Lib: lib, Version: v, Name: m[2]}
		if p := strings.TrimSpace(m[3]); p != "void" && p != "" {
			for _, part := range strings.Split(p, ",") {
				param, err := parseParam(strings.TrimSpace(part))
				if err != nil {
					return nil, fmt.Errorf("%s:%d: %v", path, ln, err)
				}
				e.Params = append(e.Params, param)
			}
		}
		for _, attr := range strings.Fields(m[4]) {
			switch {
			case strings.HasPrefix(attr, "bytes="):
				e.Bytes = strings.TrimPrefix(attr, "bytes=")
			case policyIndex(attr) >= 0:
				e.Policies = append(e.Policies, attr)
			case strings.HasSuffix(attr, ":ondemand") && policyIndex(strings.TrimSuffix(attr, ":ondemand")) >= 0:
				e.Policies = append(e.Policies, strings.TrimSuffix(attr, ":ondemand"))
				e.OnDemand = append(e.OnDemand, strings.TrimSuffix(attr, ":ondemand"))
			case strings.HasPrefix(attr, "compute:"):
				form := strings.TrimPrefix(attr, "compute:")
				if _, ok := computeForms[form]; !ok {
					return nil, fmt.Errorf("%s:%d: unknown compute form %q", path, ln, form)
				}
				e.Policies = append(e.Policies, "compute")
				e.Compute = form
			case attr == "legacy":
				e.Legacy = true
			default:
				return nil, fmt.Errorf("%s:%d: unknown attribute %q", path, ln, attr)
			}
		}
		sort.SliceStable(e.Policies, func(a, b int) bool { return policyIndex(e.Policies[a]) < policyIndex(e.Policies[b]) })
		out = append(out, e)
	}
	return out, sc.Err()
}

var paramRE = regexp.MustCompile(`^(.*?)([A-Za-z_][A-Za-z0-9_]*)$`)

func parseParam(s string) (Param, error) {
	m := paramRE.FindStringSubmatch(s)
	if m == nil || strings.TrimSpace(m[1]) == "" {
		return Param{}, fmt.Errorf("parameter %q needs a type and a name", s)
	}
	t := strings.TrimSpace(m[1])
	// Normalize "T * *" spacing to "T **".
	t = regexp.MustCompile(`\s*\*`).ReplaceAllString(t, "*")
	t = strings.Replace(t, "*", " *", 1)
	return Param{Type: t, Name: m[2]}, nil
}

// apiHash identifies the ordered API list; the shim and the CLI refuse to
// share a trace region built for another list.
func apiHash(entries []Entry) uint64 {
	h := fnv.New64a()
	for _, e := range entries {
		h.Write([]byte(e.Name + "\n"))
	}
	return h.Sum64()
}

// handleTypes are pointer-sized opaque types, logged as %p.
var handleTypes = map[string]bool{
	"CUcontext": true, "CUmodule": true, "CUfunction": true, "CUlibrary": true,
	"CUkernel": true, "CUstream": true, "CUevent": true, "CUgraph": true,
	"CUgraphExec": true, "CUarray": true, "CUmipmappedArray": true,
	"CUmemoryPool": true, "CUhostFn": true, "CUstreamCallback": true, "nvmlDevice_t": true, "CUgraphNode": true, "CUgreenCtx": true, "CUlinkState": true, "CUdevResourceDesc": true,
	"fgrCtxObject": true, "CUuserObject": true,
}

// logFormat returns the printf conversion and argument expression for p.
func logFormat(p Param) (string, string, error) {
	t := p.Type
	switch {
	case t == "const char *":
		return "\\\"%s\\\"", fmt.Sprintf("fg_str(%s)", p.Name), nil
	case t == "CUdeviceptr *":
		// The address the call gave back, so that a log ties later uses to it.
		return "%p->0x%llx", fmt.Sprintf("(const void *)%s, (unsigned long long)(r == CUDA_SUCCESS && %s ? *%s : 0)", p.Name, p.Name, p.Name), nil
	case strings.Contains(t, "*") || handleTypes[t]:
		return "%p", fmt.Sprintf("(const void *)%s", p.Name), nil
	case t == "size_t":
		return "%zu", p.Name, nil
	case t == "unsigned int" || t == "unsigned char" || t == "unsigned short":
		return "%u", fmt.Sprintf("(unsigned)%s", p.Name), nil
	case t == "int" || t == "CUdevice":
		return "%d", p.Name, nil
	case t == "CUdeviceptr" || t == "cuuint64_t" || t == "unsigned long long" || t == "CUmemGenericAllocationHandle":
		return "0x%llx", fmt.Sprintf("(unsigned long long)%s", p.Name), nil
	case strings.HasPrefix(t, "CU"):
		// Enumerations.
		return "%d", fmt.Sprintf("(int)%s", p.Name), nil
	}
	return "", "", fmt.Errorf("no log format for type %q of %s", t, p.Name)
}
