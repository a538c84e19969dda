package main

// The remoting protocol, generated from api/remote.api joined with
// api/cuda.api: the client stubs of the remoting libcuda.so.1, the
// executor's dispatch, the operation numbers both share and the support
// list in the docs. Wire format and helpers: remote/wire.h.

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

// Disposition says where a call is answered.
type Disposition string

const (
	DispLocal Disposition = "local"  // by the client alone, hand-written
	DispSync  Disposition = "sync"   // forwarded, answer awaited
	DispWrap  Disposition = "wrap"   // forwarded, with hand-written client bookkeeping
	DispQueue Disposition = "queued" // forwarded without waiting; errors surface at the next syncpoint
)

// Kind says how a pointer parameter travels.
type Kind struct {
	Name  string // in, out, inout, str, image, kparams, launchcfg, null
	Count string // C expression: number of pointed-to objects, "" for one
}

// RemoteEntry is one entry point as the remoting client exports it.
type RemoteEntry struct {
	Entry
	Disp  Disposition // "" when not supported remotely
	Kinds map[string]Kind
	Drain string // stream the executor waits for before answering
	// A call that waits for the device: Wait names what its answer is the
	// wait for (a CUstream or CUevent parameter, or "context"), After the
	// stream ("null": the variant's default stream) it waits for before
	// it is made. Either lets the connection's other calls go on meanwhile
	// (remote/executor/wait.c).
	Wait, After string
	// Stage: the buffer parameter of an upload or download that may go
	// through the staging areas of shm:// (remote/client/stage.c).
	Stage string
	Chunk string // byte count by which the client splits a large call into several
	Sync  bool   // a syncpoint: errors of earlier queued calls surface here
	// PinnedWait: a synchronous memset, which natively returns once done
	// when its destination is pinned host memory.
	PinnedWait bool
	UVA        bool   // a copy under unified addressing (dst, src, ByteCount[, hStream]): fgr_uva_copy first
	Extra      bool   // given with its prototype in api/remote.api (not hooked by the shim)
	Op         int    // operation number on the wire (forwarded entries), from 1
	Source     string // file:line of the annotation
	Table      *Table // export table this is a function (or the fetch) of
	Slot       int    // its word in the table
	Fetch      bool   // the table's fetch: its data words
	Ret        string // C return type of a table function ("" for CUresult)
	// What the executor checks and records (milestone 7): the device
	// range each by-value CUdeviceptr must lie in, the out CUdeviceptr
	// parameters that return this connection's memory (with the size, ""
	// to ask the driver), the handle or range a successful call destroys,
	// and the parameter whose handle owns what the call returns.
	Dev      map[string]Kind
	Alloc    map[string]string
	Destroys string
	Owner    string
	// AsHandle: an untyped result that holds a handle of a kind when a
	// condition over the parameters holds (cuPointerGetAttribute's
	// context): param, kind, condition.
	AsHandle [3]string
	// By-value parameters of a table function whose meaning is unknown
	// and that were 0 natively: the driver is given 0 whatever the caller
	// passed (what a caller leaves there may be a register of its own).
	Zero []string
}

// remoteHandles are the handle kinds the executor tracks per connection:
// every by-value one a request carries must be one the connection was
// given, and every one a call returns is recorded.
var remoteHandles = map[string]bool{
	"CUcontext": true, "CUmodule": true, "CUfunction": true, "CUlibrary": true, "CUkernel": true,
	"CUstream": true, "CUevent": true, "CUgraph": true, "CUgraphExec": true, "CUgraphNode": true,
	"CUarray": true, "CUmipmappedArray": true, "CUmemoryPool": true, "CUmemGenericAllocationHandle": true,
	"CUgreenCtx": true, "fgrCtxObject": true,
}

// deviceWide handles outlive the context they were made in.
var deviceWide = map[string]bool{"CUcontext": true, "CUmemoryPool": true, "CUmemGenericAllocationHandle": true}

// structHandles are the handles inside structures a request carries.
var structHandles = map[string][][2]string{
	"CUDA_GRAPH_INSTANTIATE_PARAMS": {{"hUploadStream", "CUstream"}},
	"CUlaunchConfig":                {{"hStream", "CUstream"}},
}

// structOutHandles are the handles a call writes into the structures an
// inout parameter carries: renamed before the reply.
var structOutHandles = map[string][][2]string{
	"CUDA_GRAPH_INSTANTIATE_PARAMS": {{"hErrNode_out", "CUgraphNode"}},
}

// Table is a private export table the client answers (cuGetExportTable).
type Table struct {
	UUID  [16]byte
	Name  string
	Words int
	Slots []Slot
}

// Local says the client answers the whole table without the driver: no
// word is forwarded or copied.
func (t *Table) Local() bool {
	for _, sl := range t.Slots {
		if sl.Kind == "sync" || sl.Kind == "data" {
			return false
		}
	}
	return true
}

// Asked says handing the table out takes a round trip: some word is a copy
// of the driver's data, or every function word is forwarded (such a table
// is the server's driver's to hand out or refuse). A table the client
// answers in part itself is handed out at once; a forwarded word of it that
// the server's driver lacks answers CUDA_ERROR_NOT_SUPPORTED.
func (t *Table) Asked() bool {
	local, forwarded := false, false
	for _, sl := range t.Slots {
		switch sl.Kind {
		case "data":
			return true
		case "local":
			local = true
		case "sync":
			forwarded = true
		}
	}
	return forwarded && !local
}

// Slot is one word of a table.
type Slot struct {
	Index int
	Kind  string // size, null, self, data, returns, sync, local, unsupported
	N     int    // data: bytes; returns: the word returned
	Fn    *RemoteEntry
	Proto string // local: the C prototype of the client's function
	Func  string // local: its name
}

var remoteKinds = map[string]bool{"in": true, "out": true, "inout": true, "str": true, "image": true,
	"kparams": true, "launchcfg": true, "null": true, "shadow": true, "jitopts": true, "libopts": true,
	"optvalues": true, "extra": true}

// optionKinds are option arrays (jitopts[COUNT], libopts[COUNT]): their
// values are the next parameter (kind optvalues), COUNT the by-value count,
// which the executor sets to what it decoded (only options whose value is
// the word itself travel: remote/options.h).
var optionKinds = map[string]string{"jitopts": "FGR_OPTS_JIT", "libopts": "FGR_OPTS_LIBRARY"}

// shadowed are the handle kinds a client may name before the server made
// them: it picks the value (a shadow handle, FGR_SHADOW_TAG in its top
// bits), the creating call is queued, and the executor maps the value to
// the driver's handle wherever a request carries one.
var shadowed = map[string]bool{"CUstream": true, "CUevent": true}

var kindRE = regexp.MustCompile(`^([a-z]+)(?:\[(.+)\])?$`)

// parseRemote reads api/remote.api and joins it with the CUDA entries:
// every CUDA entry comes back, annotated or not, followed by the extra ones.
func parseRemote(path string, cuda []Entry) ([]RemoteEntry, []*Table, error) {
	var tables []*Table
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]int{}
	out := make([]RemoteEntry, 0, len(cuda))
	for _, e := range cuda {
		byName[e.Name] = len(out)
		out = append(out, RemoteEntry{Entry: e})
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := fmt.Sprintf("%s:%d", path, ln)
		if f := strings.Fields(line); f[0] == "table" || f[0] == "slot" {
			if err := parseTableLine(f, line, &tables); err != nil {
				return nil, nil, fmt.Errorf("%s: %v", where, err)
			}
			continue
		}
		var re *RemoteEntry
		var attrs []string
		if m := splitPrototype(line); m != nil {
			v, _ := strconv.Atoi(m[1])
			e := Entry{Lib: LibCUDA, Version: v, Name: m[2]}
			if p := strings.TrimSpace(m[3]); p != "void" && p != "" {
				for _, part := range strings.Split(p, ",") {
					param, err := parseParam(strings.TrimSpace(part))
					if err != nil {
						return nil, nil, fmt.Errorf("%s: %v", where, err)
					}
					e.Params = append(e.Params, param)
				}
			}
			if _, dup := byName[e.Name]; dup {
				return nil, nil, fmt.Errorf("%s: %s is in api/cuda.api; annotate it by name", where, e.Name)
			}
			byName[e.Name] = len(out)
			out = append(out, RemoteEntry{Entry: e, Extra: true})
			re = &out[len(out)-1]
			attrs = strings.Fields(m[4])
		} else {
			f := strings.Fields(line)
			i, ok := byName[f[0]]
			if !ok {
				return nil, nil, fmt.Errorf("%s: %s is not in api/cuda.api (give an unhooked entry with its prototype)", where, f[0])
			}
			re = &out[i]
			if re.Disp != "" || re.Extra {
				return nil, nil, fmt.Errorf("%s: %s is annotated twice", where, f[0])
			}
			attrs = f[1:]
		}
		re.Source = where
		if len(attrs) == 0 {
			return nil, nil, fmt.Errorf("%s: %s has no disposition (local, sync or wrap)", where, re.Name)
		}
		switch d := Disposition(attrs[0]); d {
		case DispLocal, DispSync, DispWrap, DispQueue:
			re.Disp = d
		case "unsupported":
			// Exported, so that a library that looks it up finds it; a
			// call answers CUDA_ERROR_NOT_SUPPORTED, as for an entry of
			// api/cuda.api left without a disposition.
			if !re.Extra || len(attrs) > 1 {
				return nil, nil, fmt.Errorf("%s: %s: unsupported is for an entry given with its prototype, alone", where, re.Name)
			}
			re.Kinds = map[string]Kind{}
			re.Dev = map[string]Kind{}
			re.Alloc = map[string]string{}
			continue
		default:
			return nil, nil, fmt.Errorf("%s: %s: unknown disposition %q", where, re.Name, attrs[0])
		}
		re.Kinds = map[string]Kind{}
		re.Dev = map[string]Kind{}
		re.Alloc = map[string]string{}
		for _, a := range attrs[1:] {
			if a == "syncpoint" {
				re.Sync = true
				continue
			}
			if a == "pinnedwait" {
				if re.param("dstDevice") == nil || re.param("hStream") != nil || attrs[0] != string(DispQueue) {
					return nil, nil, fmt.Errorf("%s: %s: pinnedwait needs a queued call on the default stream with a dstDevice", where, re.Name)
				}
				re.PinnedWait = true
				continue
			}
			if a == "uva" {
				if re.param("dst") == nil || re.param("src") == nil || re.param("ByteCount") == nil {
					return nil, nil, fmt.Errorf("%s: %s: uva needs dst, src and ByteCount", where, re.Name)
				}
				re.UVA = true
				continue
			}
			name, val, ok := strings.Cut(a, "=")
			if !ok {
				return nil, nil, fmt.Errorf("%s: %s: %q is not PARAM=KIND", where, re.Name, a)
			}
			if name == "drain" {
				re.Drain = val
				continue
			}
			if name == "stage" {
				p := re.param(val)
				up := p != nil && p.Type == "const void *" && re.param("dstDevice") != nil
				down := p != nil && p.Type == "void *" && re.param("srcDevice") != nil
				if (!up && !down) || re.param("ByteCount") == nil {
					return nil, nil, fmt.Errorf("%s: %s: stage=%s names no buffer of an upload or download", where, re.Name, val)
				}
				re.Stage = val
				continue
			}
			if name == "wait" || name == "after" {
				p := re.param(val)
				switch {
				case name == "wait" && val == "context", name == "after" && val == "null":
				case p != nil && (p.Type == "CUstream" || (name == "wait" && p.Type == "CUevent")):
				default:
					return nil, nil, fmt.Errorf("%s: %s: %s=%s names no stream%s", where, re.Name, name, val,
						map[bool]string{true: ", event or context", false: " or null"}[name == "wait"])
				}
				if name == "wait" {
					re.Wait = val
				} else {
					re.After = val
				}
				continue
			}
			if name == "chunk" {
				re.Chunk = val
				continue
			}
			if name == "ashandle" {
				f := strings.SplitN(val, ":", 3)
				if len(f) != 3 || re.param(f[0]) == nil || re.param(f[0]).Type != "void *" || !remoteHandles[f[1]] || f[2] == "" {
					return nil, nil, fmt.Errorf("%s: %s: ashandle=%s is not VOIDPTR:HANDLETYPE:CONDITION", where, re.Name, val)
				}
				re.AsHandle = [3]string{f[0], f[1], f[2]}
				continue
			}
			if name == "owner" && val == "none" {
				re.Owner = val
				continue
			}
			if name == "destroys" || name == "owner" {
				p := re.param(val)
				if p == nil || (!remoteHandles[p.Type] && p.Type != "CUdeviceptr") || (name == "owner" && !remoteHandles[p.Type]) {
					return nil, nil, fmt.Errorf("%s: %s: %s=%s names no handle parameter", where, re.Name, name, val)
				}
				if name == "destroys" {
					re.Destroys = val
				} else {
					re.Owner = val
				}
				continue
			}
			p := re.param(name)
			if p == nil {
				return nil, nil, fmt.Errorf("%s: %s has no parameter %s", where, re.Name, name)
			}
			// Device addresses: dev[N] (N bytes in this connection's memory),
			// base (the start of its allocation), any (not dereferenced);
			// alloc[SIZE] an out address of SIZE bytes it now owns.
			if dk, cnt, _ := strings.Cut(strings.TrimSuffix(val, "]"), "["); dk == "dev" || dk == "base" || dk == "any" || dk == "alloc" {
				switch {
				case dk == "alloc" && p.Type != "CUdeviceptr *":
					return nil, nil, fmt.Errorf("%s: %s: alloc is for a CUdeviceptr * result, not %s", where, re.Name, name)
				case dk == "alloc":
					re.Kinds[name] = Kind{Name: "out"}
					re.Alloc[name] = cnt
				case p.Type != "CUdeviceptr" && ((dk != "any" && dk != "dev") || p.Type != "void *"):
					// (any and dev also take a void *: a device address the call keeps, as
					// a tensor map does, or looks up, as cuMemRetainAllocationHandle does)
					return nil, nil, fmt.Errorf("%s: %s: %s is for a CUdeviceptr, not %s", where, re.Name, dk, name)
				case (dk == "dev") != (cnt != ""):
					return nil, nil, fmt.Errorf("%s: %s: %s: only dev takes (and needs) a size", where, re.Name, name)
				default:
					re.Dev[name] = Kind{Name: dk, Count: cnt}
				}
				continue
			}
			m := kindRE.FindStringSubmatch(val)
			if m == nil || !remoteKinds[m[1]] {
				return nil, nil, fmt.Errorf("%s: %s: unknown kind %q", where, re.Name, val)
			}
			if _, opts := optionKinds[m[1]]; m[2] != "" && m[1] != "in" && m[1] != "out" && m[1] != "inout" && !opts {
				return nil, nil, fmt.Errorf("%s: %s: only in, out, inout and option arrays take a count", where, re.Name)
			}
			if _, opts := optionKinds[m[1]]; opts {
				next := re.paramAfter(name)
				if c := re.param(m[2]); m[2] == "" || c == nil || strings.HasSuffix(c.Type, "*") || next == nil {
					return nil, nil, fmt.Errorf("%s: %s: %s[COUNT] needs a by-value count and its values as the next parameter", where, re.Name, m[1])
				}
			}
			if !strings.HasSuffix(p.Type, "*") {
				return nil, nil, fmt.Errorf("%s: %s: %s is passed by value and needs no kind", where, re.Name, name)
			}
			if m[1] == "shadow" && (!shadowed[pointee(p.Type)] || m[2] != "") {
				return nil, nil, fmt.Errorf("%s: %s: shadow is for an out handle of a kind the executor maps (%s is %s)", where, re.Name, name, p.Type)
			}
			re.Kinds[name] = Kind{Name: m[1], Count: m[2]}
		}
		if re.Disp != DispLocal {
			for _, p := range re.Params {
				if _, ok := re.Kinds[p.Name]; !ok && re.Dev[p.Name].Name == "" && strings.HasSuffix(p.Type, "*") {
					return nil, nil, fmt.Errorf("%s: %s: pointer parameter %s needs a kind", where, re.Name, p.Name)
				}
				if k := re.Kinds[p.Name]; (k.Name == "in" || k.Name == "out" || k.Name == "inout") && pointee(p.Type) == "void" && k.Count == "" {
					return nil, nil, fmt.Errorf("%s: %s: %s points to void: give its size in bytes", where, re.Name, p.Name)
				}
				if k := re.Kinds[p.Name]; k.Name == "optvalues" && (re.paramBefore(p.Name) == nil || optionKinds[re.Kinds[re.paramBefore(p.Name).Name].Name] == "") {
					return nil, nil, fmt.Errorf("%s: %s: %s=optvalues must follow an option array", where, re.Name, p.Name)
				}
				if k := re.Kinds[p.Name]; optionKinds[k.Name] != "" && re.Kinds[re.paramAfter(p.Name).Name].Name != "optvalues" {
					return nil, nil, fmt.Errorf("%s: %s: the values of %s need optvalues", where, re.Name, p.Name)
				}
				if k := re.Kinds[p.Name]; k.Name == "extra" && re.param("kernelParams") == nil {
					return nil, nil, fmt.Errorf("%s: %s: extra= goes with a kernelParams parameter", where, re.Name)
				}
				if k := re.Kinds[p.Name]; k.Name == "kparams" && re.param("f") == nil {
					return nil, nil, fmt.Errorf("%s: %s: kparams needs a function parameter f", where, re.Name)
				}
				if _, ok := re.Dev[p.Name]; !ok && p.Type == "CUdeviceptr" {
					return nil, nil, fmt.Errorf("%s: %s: device address %s needs dev[N], base or any", where, re.Name, p.Name)
				}
			}
			if d := re.Destroys; d != "" && re.param(d).Type == "CUdeviceptr" && re.Dev[d].Name != "base" {
				return nil, nil, fmt.Errorf("%s: %s: destroys=%s needs %s=base", where, re.Name, d, d)
			}
			if re.Drain != "" && re.param(re.Drain) == nil {
				return nil, nil, fmt.Errorf("%s: %s: drain names no parameter", where, re.Name)
			}
			if (re.Wait != "" || re.After != "") && (re.Disp != DispSync || !re.Sync || (re.Wait != "" && re.After != "")) {
				return nil, nil, fmt.Errorf("%s: %s: wait= or after= is for a sync syncpoint, one of them", where, re.Name)
			}
			if re.Stage != "" && re.Chunk != "ByteCount" {
				return nil, nil, fmt.Errorf("%s: %s: stage= is for a copy in pieces (chunk=ByteCount)", where, re.Name)
			}
			if c := re.Chunk; c != "" {
				if p := re.param(c); p == nil || p.Type != "size_t" {
					return nil, nil, fmt.Errorf("%s: %s: chunk=%s names no size_t parameter", where, re.Name, c)
				}
				for _, p := range re.Params {
					k, buf := re.Kinds[p.Name]
					if d, dev := re.Dev[p.Name]; (buf && k.Count != c) || (dev && d.Count != c) {
						return nil, nil, fmt.Errorf("%s: %s: chunk=%s, but %s is not %s bytes", where, re.Name, c, p.Name, c)
					}
				}
			}
			for n, k := range re.Kinds {
				if k.Name == "shadow" && re.Disp != DispQueue {
					return nil, nil, fmt.Errorf("%s: %s: %s=shadow makes no round trip: the call must be queued", where, re.Name, n)
				}
			}
			if re.Disp == DispQueue {
				for n, k := range re.Kinds {
					if k.Name == "out" || k.Name == "inout" {
						return nil, nil, fmt.Errorf("%s: %s: a queued call has no results, but %s is %s", where, re.Name, n, k.Name)
					}
				}
				if re.Sync || re.Drain != "" {
					return nil, nil, fmt.Errorf("%s: %s: a queued call cannot wait", where, re.Name)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	for _, t := range tables {
		if len(t.Slots) != t.Words {
			return nil, nil, fmt.Errorf("%s: table %s has %d words, %d described", path, t.Name, t.Words, len(t.Slots))
		}
		if t.Local() {
			continue
		}
		out = append(out, RemoteEntry{Entry: Entry{Lib: LibCUDA, Name: "xt_" + t.Name}, Disp: DispSync, Table: t, Fetch: true})
		for i := range t.Slots {
			if fn := t.Slots[i].Fn; fn != nil {
				out = append(out, *fn)
				t.Slots[i].Fn = &out[len(out)-1]
			}
		}
	}
	for _, e := range out {
		for _, p := range e.Params {
			if p.Name == "rd" || p.Name == "q" || strings.HasPrefix(p.Name, "fgr_") || strings.HasPrefix(p.Name, "n_") || strings.HasPrefix(p.Name, "has_") {
				return nil, nil, fmt.Errorf("%s: parameter name %s is reserved for the generated code", e.Name, p.Name)
			}
		}
	}
	op := 1
	for i := range out {
		if out[i].Forwarded() {
			out[i].Op = op
			op++
		}
	}
	return out, tables, nil
}

// splitPrototype reads "VERSION NAME(PARAMS) REST" with the parameter list
// ended by its matching parenthesis (REST may hold parentheses of its own):
// the same submatches as lineRE, or nil.
func splitPrototype(line string) []string {
	m := regexp.MustCompile(`^(\d+)\s+([A-Za-z_][A-Za-z0-9_]*)\(`).FindStringSubmatch(line)
	if m == nil {
		return nil
	}
	depth := 1
	for i := len(m[0]); i < len(line); i++ {
		switch line[i] {
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				return []string{line, m[1], m[2], line[len(m[0]):i], strings.TrimSpace(line[i+1:])}
			}
		}
	}
	return nil
}

var protoRE = regexp.MustCompile(`^(.*?)\b([A-Za-z_][A-Za-z0-9_]*)\((.*)\)$`)

// parseTableLine reads a table or slot line of api/remote.api.
func parseTableLine(f []string, line string, tables *[]*Table) error {
	if f[0] == "table" {
		if len(f) != 4 {
			return fmt.Errorf("want: table UUID NAME WORDS")
		}
		hex := strings.ReplaceAll(f[1], "-", "")
		var t Table
		if len(hex) != 32 {
			return fmt.Errorf("bad UUID %s", f[1])
		}
		for i := 0; i < 16; i++ {
			v, err := strconv.ParseUint(hex[2*i:2*i+2], 16, 8)
			if err != nil {
				return fmt.Errorf("bad UUID %s", f[1])
			}
			t.UUID[i] = byte(v)
		}
		t.Name = f[2]
		n, err := strconv.Atoi(f[3])
		if err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("bad word count %s", f[3])
		}
		t.Words = n
		*tables = append(*tables, &t)
		return nil
	}
	if len(*tables) == 0 || len(f) < 3 {
		return fmt.Errorf("want: slot N KIND ... after a table line")
	}
	t := (*tables)[len(*tables)-1]
	first, last, isRange := strings.Cut(f[1], "-")
	idx, err := strconv.Atoi(first)
	if err != nil || idx != len(t.Slots) || idx >= t.Words {
		return fmt.Errorf("slot %s out of order (want %d)", f[1], len(t.Slots))
	}
	if isRange {
		// A run of words no program is known to call.
		end, err := strconv.Atoi(last)
		if err != nil || end < idx || end >= t.Words || f[2] != "unsupported" || len(f) != 3 {
			return fmt.Errorf("slot %s: a range takes unsupported, within the table", f[1])
		}
		for i := idx; i <= end; i++ {
			t.Slots = append(t.Slots, Slot{Index: i, Kind: "unsupported"})
		}
		return nil
	}
	sl := Slot{Index: idx, Kind: f[2]}
	switch sl.Kind {
	case "unsupported":
		if len(f) != 3 {
			return fmt.Errorf("slot %d %s takes nothing more", idx, sl.Kind)
		}
	case "local":
		// Written by hand in remote/client/; the prototype is declared for
		// it in exports_gen.h, so a definition that differs does not build.
		sl.Proto = strings.TrimSpace(line[strings.Index(line, "local")+5:])
		m := protoRE.FindStringSubmatch(sl.Proto)
		if m == nil || strings.TrimSpace(m[1]) == "" || !strings.HasPrefix(m[2], "fgr_") {
			return fmt.Errorf("slot %d: want local RET fgr_NAME(PARAMS)", idx)
		}
		sl.Func = m[2]
	case "size", "null", "self":
		if len(f) != 3 {
			return fmt.Errorf("slot %d %s takes nothing more", idx, sl.Kind)
		}
	case "data", "returns":
		if len(f) != 4 {
			return fmt.Errorf("slot %d %s takes one number", idx, sl.Kind)
		}
		if sl.N, err = strconv.Atoi(f[3]); err != nil || sl.N < 0 || sl.N > 1<<16 {
			return fmt.Errorf("slot %d: bad number %s", idx, f[3])
		}
	case "sync":
		rest := strings.TrimSpace(line[strings.Index(line, "sync")+4:])
		closeAt := strings.LastIndex(rest, ")")
		if closeAt < 0 {
			return fmt.Errorf("slot %d: no prototype", idx)
		}
		m := protoRE.FindStringSubmatch(rest[:closeAt+1])
		if m == nil {
			return fmt.Errorf("slot %d: cannot read the prototype", idx)
		}
		fn := &RemoteEntry{Entry: Entry{Lib: LibCUDA, Name: fmt.Sprintf("xt_%s_%d", t.Name, idx)}, Disp: DispSync,
			Table: t, Slot: idx, Kinds: map[string]Kind{}}
		if ret := strings.TrimSpace(m[1]); ret != "CUresult" {
			fn.Ret = ret
		}
		if p := strings.TrimSpace(m[3]); p != "void" && p != "" {
			for _, part := range strings.Split(p, ",") {
				param, err := parseParam(strings.TrimSpace(part))
				if err != nil {
					return fmt.Errorf("slot %d: %v", idx, err)
				}
				fn.Params = append(fn.Params, param)
			}
		}
		for _, a := range strings.Fields(rest[closeAt+1:]) {
			name, val, _ := strings.Cut(a, "=")
			p := fn.param(name)
			switch {
			case p != nil && val == "zero" && !strings.HasSuffix(p.Type, "*"):
				fn.Zero = append(fn.Zero, name)
			case p == nil || (val != "out" && val != "in" && val != "inout"):
				return fmt.Errorf("slot %d: bad annotation %q", idx, a)
			default:
				fn.Kinds[name] = Kind{Name: val}
			}
		}
		for _, p := range fn.Params {
			if p.Type == "CUdeviceptr" {
				return fmt.Errorf("slot %d: %s: device addresses are not checked in table functions", idx, p.Name)
			}
			if _, ok := fn.Kinds[p.Name]; strings.HasSuffix(p.Type, "*") && !ok {
				return fmt.Errorf("slot %d: pointer parameter %s needs a kind", idx, p.Name)
			}
		}
		if fn.Ret != "" && len(fn.Kinds) > 0 {
			return fmt.Errorf("slot %d: only functions returning CUresult may have pointer parameters", idx)
		}
		sl.Fn = fn
	default:
		return fmt.Errorf("slot %d: unknown kind %s", idx, sl.Kind)
	}
	t.Slots = append(t.Slots, sl)
	return nil
}

// bitsPut and bitsGet carry a by-value table function argument or result
// of type t as a u64.
func bitsPut(t, v string) string {
	switch t {
	case "double":
		return fmt.Sprintf("fgr_f64_bits(%s)", v)
	case "float":
		return fmt.Sprintf("(uint64_t)fgr_f32_bits(%s)", v)
	}
	return scalarPut(Param{Type: t, Name: v})
}

func bitsGet(t, v string) string {
	switch t {
	case "double":
		return fmt.Sprintf("fgr_bits_f64(%s)", v)
	case "float":
		return fmt.Sprintf("fgr_bits_f32((uint32_t)%s)", v)
	}
	if handleTypes[t] || strings.Contains(t, "*") {
		return fmt.Sprintf("(%s)(uintptr_t)%s", t, v)
	}
	return fmt.Sprintf("(%s)%s", t, v)
}

func (r *RemoteEntry) param(name string) *Param {
	for i := range r.Params {
		if r.Params[i].Name == name {
			return &r.Params[i]
		}
	}
	return nil
}

// paramAfter and paramBefore are the parameters next to name, or nil.
func (r *RemoteEntry) paramAfter(name string) *Param {
	for i := 0; i+1 < len(r.Params); i++ {
		if r.Params[i].Name == name {
			return &r.Params[i+1]
		}
	}
	return nil
}

func (r *RemoteEntry) paramBefore(name string) *Param {
	for i := 1; i < len(r.Params); i++ {
		if r.Params[i].Name == name {
			return &r.Params[i-1]
		}
	}
	return nil
}

// Forwarded reports whether the entry has an operation on the wire.
func (r RemoteEntry) Forwarded() bool {
	return r.Disp == DispSync || r.Disp == DispWrap || r.Disp == DispQueue
}

// pointee is the type a pointer parameter points to, without const.
func pointee(t string) string {
	t = strings.TrimSpace(strings.TrimSuffix(t, "*"))
	return strings.TrimSpace(strings.TrimPrefix(t, "const "))
}

// elemSize is the C expression for the size of one pointed-to object.
func elemSize(t string) string {
	if p := pointee(t); p != "void" {
		return "sizeof(" + p + ")"
	}
	return "1"
}

// bytesExpr is the C expression for a buffer's size in bytes.
func bytesExpr(p Param, k Kind) string {
	if k.Count == "" {
		return elemSize(p.Type)
	}
	return fmt.Sprintf("fgr_mul((uint64_t)(%s), %s)", k.Count, elemSize(p.Type))
}

// byteBuffer: the executor can hand the frame's bytes to the driver
// without copying them into aligned memory.
func byteBuffer(t string) bool {
	p := pointee(t)
	return p == "void" || p == "char" || p == "unsigned char"
}

// opsHash identifies the operation table; client and executor built from
// different tables refuse each other at the handshake.
func opsHash(entries []RemoteEntry) uint64 {
	h := fnv.New64a()
	for _, e := range entries {
		if e.Forwarded() {
			fmt.Fprintf(h, "%d %s(%s)", e.Op, e.Name, e.ParamList())
			var names []string
			for n, k := range e.Kinds {
				names = append(names, n+"="+k.Name+"["+k.Count+"]")
			}
			sort.Strings(names)
			fmt.Fprintf(h, "%s drain=%s %s sync=%v\n", strings.Join(names, " "), e.Drain, e.Disp, e.Sync)
		}
	}
	return h.Sum64()
}

// scalarGet is the executor's expression decoding a by-value parameter.
func scalarGet(t string) string {
	if handleTypes[t] || strings.Contains(t, "*") {
		return fmt.Sprintf("(%s)(uintptr_t)fgr_get_u64(rd)", t)
	}
	return fmt.Sprintf("(%s)fgr_get_u64(rd)", t)
}

// scalarPut is the client's expression encoding a by-value parameter.
func scalarPut(p Param) string {
	if handleTypes[p.Type] || strings.Contains(p.Type, "*") {
		return fmt.Sprintf("(uint64_t)(uintptr_t)%s", p.Name)
	}
	if p.Type == "int" || p.Type == "CUdevice" {
		return fmt.Sprintf("(uint64_t)(int64_t)%s", p.Name)
	}
	return fmt.Sprintf("(uint64_t)%s", p.Name)
}

const remoteHeader = "/* Code generated by tools/gen from api/remote.api and api/cuda.api. DO NOT EDIT. */\n"

// emitRemoteProto writes the operation numbers and the prototypes of the
// entries only the remoting client exports.
func emitRemoteProto(entries []RemoteEntry) string {
	var b strings.Builder
	b.WriteString(remoteHeader)
	b.WriteString("#ifndef FLEXGV_REMOTE_PROTO_GEN_H\n#define FLEXGV_REMOTE_PROTO_GEN_H\n\n#include \"flexgv/cuda_api_gen.h\"\n\n")
	b.WriteString("/* Operations on the wire; 0 is the handshake. */\nenum fgr_op {\n    FGR_OP_HELLO = 0,\n")
	n := 0
	for _, e := range entries {
		if e.Forwarded() {
			fmt.Fprintf(&b, "    FGR_OP_%s = %d,\n", e.Name, e.Op)
			n = e.Op
		}
	}
	fmt.Fprintf(&b, "    FGR_NUM_OPS = %d\n};\n\n", n+1)
	fmt.Fprintf(&b, "#define FGR_OPS_HASH 0x%016xULL\n\n", opsHash(entries))
	b.WriteString("/* Entry points the shim does not hook, exported by the remoting client. */\n")
	for _, e := range entries {
		if e.Extra {
			fmt.Fprintf(&b, "CUresult %s(%s);\n", e.Name, e.ParamList())
		}
	}
	b.WriteString("\n/* Forwarders of the wrap entries, called by their hand-written exports. */\n")
	for _, e := range entries {
		if e.Disp == DispWrap {
			fmt.Fprintf(&b, "CUresult fgr_fwd_%s(%s);\n", e.Name, e.ParamList())
		}
	}
	b.WriteString("\n#endif\n")
	return b.String()
}

// emitRemoteClient writes the client's stubs, its entry point table and
// its export tables.
func emitRemoteClient(entries []RemoteEntry, tables []*Table) string {
	var b strings.Builder
	b.WriteString(remoteHeader)
	b.WriteString("#include \"client.h\"\n\n")
	var unsupported []string
	for _, e := range entries {
		switch {
		case e.Table != nil || e.Disp == DispLocal:
			continue // below; remote/client/*.c
		case e.Disp == "":
			unsupported = append(unsupported, e.Name)
			fmt.Fprintf(&b, "FGR_EXPORT CUresult %s(%s)\n{\n", e.Name, e.ParamList())
			for _, p := range e.Params {
				fmt.Fprintf(&b, "    (void)%s;\n", p.Name)
			}
			fmt.Fprintf(&b, "    return fgr_unsupported(%d, \"%s\", NULL);\n}\n\n", len(unsupported)-1, e.Name)
		case e.Disp == DispWrap:
			clientStub(&b, e, fmt.Sprintf("CUresult fgr_fwd_%s(%s)", e.Name, e.ParamList()))
		default:
			clientStub(&b, e, fmt.Sprintf("FGR_EXPORT CUresult %s(%s)", e.Name, e.ParamList()))
		}
	}
	fmt.Fprintf(&b, "const int fgr_nunsupported = %d;\n", len(unsupported))
	b.WriteString("\n/* Each operation's entry point, for FLEXGV_REMOTE_LOG. */\nconst char *const fgr_op_names[FGR_NUM_OPS] = {\n")
	for _, e := range entries {
		if e.Forwarded() {
			fmt.Fprintf(&b, "    [FGR_OP_%s] = \"%s\",\n", e.Name, e.Name)
		}
	}
	b.WriteString("};\n")
	b.WriteString("\n/* The operations that wait for the device (syncpoints). */\nconst unsigned char fgr_op_syncs[FGR_NUM_OPS] = {\n")
	for _, e := range entries {
		if e.Forwarded() && e.Sync {
			fmt.Fprintf(&b, "    [FGR_OP_%s] = 1,\n", e.Name)
		}
	}
	b.WriteString("};\n")
	b.WriteString("\n/* The operations that may be answered \"pending\" while the device works\n * (wait= and after=). */\nconst unsigned char fgr_op_waits[FGR_NUM_OPS] = {\n")
	for _, e := range entries {
		if e.Forwarded() && (e.Wait != "" || e.After != "") {
			fmt.Fprintf(&b, "    [FGR_OP_%s] = 1,\n", e.Name)
		}
	}
	b.WriteString("};\n")
	b.WriteString("\n/* What cuGetProcAddress hands out: every exported entry point. */\n")
	b.WriteString("const struct fg_proc fgr_procs[] = {\n")
	for _, e := range entries {
		if e.Table != nil {
			continue
		}
		pt := 0
		if e.PerThread() != "" {
			pt = 1
		}
		fmt.Fprintf(&b, "    {\"%s\", \"%s\", %d, %d, (void *)%s},\n", e.Base(), e.Name, e.Version, pt, e.Name)
	}
	b.WriteString("};\n\nconst int fgr_nprocs = sizeof(fgr_procs) / sizeof(fgr_procs[0]);\n")
	nxt := 0
	for _, t := range tables {
		emitClientTable(&b, t, &nxt)
	}
	b.WriteString("\nconst struct fgr_table fgr_tables[] = {\n")
	for _, t := range tables {
		fmt.Fprintf(&b, "    {{{")
		for i, c := range t.UUID {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%d", c)
		}
		fmt.Fprintf(&b, "}}, xt_%s_words, sizeof xt_%s_words, xt_%s_fetch},\n", t.Name, t.Name, t.Name)
	}
	fmt.Fprintf(&b, "};\n\nconst int fgr_ntables = %d;\nunsigned char fgr_xt_said[%d];\n", len(tables), nxt+1)
	return b.String()
}

// clientStub writes one forwarder: encode, round trip, decode.
func clientStub(b *strings.Builder, e RemoteEntry, decl string) {
	c := e.Chunk
	if c == "" {
		fmt.Fprintf(b, "%s\n{\n", decl)
		stubBody(b, e, "")
		return
	}
	// Large copies go as several calls of at most fgr_chunk_bytes, each
	// its own frame: no size limit, bounded buffers on both sides. A
	// synchronous upload's pieces but the last are queued, so that the
	// server copies one while the next travels; the last, a syncpoint,
	// answers the first error of them all.
	upload := e.Disp == DispSync
	for _, p := range e.Params {
		if k := e.Kinds[p.Name].Name; k == "out" || k == "inout" {
			upload = false
		}
	}
	var args, whole []string
	for _, p := range e.Params {
		whole = append(whole, p.Name)
		switch {
		case p.Name == c:
			args = append(args, "fgr_n")
		case e.Dev[p.Name].Name == "dev":
			args = append(args, p.Name+" + fgr_off")
		case strings.HasPrefix(p.Type, "const "):
			args = append(args, "(const char *)"+p.Name+" + fgr_off")
		case strings.HasSuffix(p.Type, "*"):
			args = append(args, "(char *)"+p.Name+" + fgr_off")
		default:
			args = append(args, p.Name)
		}
	}
	piece, last := e.Name, "return fgr_piece_"+e.Name+"("+strings.Join(append(whole, "0"), ", ")+");\n"
	if upload {
		piece = "fgr_piece_" + e.Name
		args = append(args, "fgr_off + fgr_n < "+c)
		fmt.Fprintf(b, "static CUresult %s(%s, int fgr_queued)\n{\n", piece, e.ParamList())
		stubBody(b, e, "fgr_queued")
	}
	fmt.Fprintf(b, "%s\n{\n", decl)
	b.WriteString("    CUresult fgr_r;\n")
	if e.Stage != "" {
		for _, p := range e.Params {
			if k := e.Dev[p.Name].Name; k == "dev" || k == "base" {
				fmt.Fprintf(b, "    fgr_mirror_named((uint64_t)%s);\n", p.Name)
			}
		}
		copyShortcuts(b, e)
	}
	fmt.Fprintf(b, "    if (%s > fgr_chunk_bytes) {\n", c)
	fmt.Fprintf(b, "        for (size_t fgr_off = 0; fgr_off < %s; fgr_off += fgr_chunk_bytes) {\n", c)
	fmt.Fprintf(b, "            size_t fgr_n = %s - fgr_off < fgr_chunk_bytes ? %s - fgr_off : fgr_chunk_bytes;\n", c, c)
	fmt.Fprintf(b, "            if ((fgr_r = %s(%s)) != CUDA_SUCCESS)\n                return fgr_r;\n", piece, strings.Join(args, ", "))
	b.WriteString("        }\n        return CUDA_SUCCESS;\n    }\n")
	if upload {
		b.WriteString("    " + last + "}\n\n")
		return
	}
	stubBody(b, e, "")
}

// copyShortcuts writes, for a copy with a stage= buffer, the ways over
// shm:// that take it whole before it is cut into pieces: to or from the
// pinned heap, the GPU's straight from or into it (an asynchronous one
// queued); another of FGR_STAGE_MIN bytes or more through the staging
// areas (remote/client/stage.c, which cuts it to their size).
func copyShortcuts(b *strings.Builder, e RemoteEntry) {
	stream, wait := copyStream(e), b2i(e.param("hStream") == nil)
	if e.param("srcDevice") != nil {
		fmt.Fprintf(b, "    uint64_t fgr_at;\n    if (fgr_heap_copyable(%s, ByteCount, &fgr_at))\n        return fgr_heap_download(fgr_at, srcDevice, ByteCount, %s, %d);\n",
			e.Stage, stream, wait)
		fmt.Fprintf(b, "    if (fgr_stage_down_wanted(ByteCount))\n        return fgr_stage_download(%s, srcDevice, ByteCount, %s);\n",
			e.Stage, stream)
		return
	}
	fmt.Fprintf(b, "    uint64_t fgr_at;\n    if (fgr_heap_copyable(%s, ByteCount, &fgr_at))\n        return fgr_heap_upload(dstDevice, fgr_at, ByteCount, %s, %d);\n",
		e.Stage, stream, wait)
	how := []string{"FGR_STAGE_SYNC"}
	s := "NULL"
	if e.param("hStream") != nil {
		s, how = "hStream", nil
	}
	if e.PerThread() != "" {
		how = append(how, "FGR_STAGE_PT")
	}
	if len(how) == 0 {
		how = []string{"0"}
	}
	fmt.Fprintf(b, "    if (fgr_stage_wanted(ByteCount))\n        return fgr_stage_upload(dstDevice, %s, ByteCount, %s, %s, %d);\n",
		e.Stage, s, strings.Join(how, " | "), b2i(e.Disp == DispQueue))
}

// stubBody writes a forwarder's body after its opening brace; queued, when
// not empty, is the expression that sends a synchronous call without
// waiting for its answer.
func stubBody(b *strings.Builder, e RemoteEntry, queuedBy string) {
	name := e.Name
	fail := "fgr_r"
	if e.Ret != "" {
		fail = "0"
	}
	if e.Chunk == "" || queuedBy != "" {
		b.WriteString("    CUresult fgr_r;\n")
	}
	if e.UVA {
		stream := "NULL"
		if e.param("hStream") != nil {
			stream = "hStream"
		}
		fmt.Fprintf(b, "    if (fgr_uva_copy(&fgr_r, dst, src, ByteCount, %s, %d, %d))\n        return fgr_r;\n",
			stream, b2i(e.PerThread() != ""), b2i(e.Disp == DispQueue))
	}
	// A device address range freed: no longer the connection's.
	if d := e.Destroys; d != "" && e.param(d).Type == "CUdeviceptr" {
		fmt.Fprintf(b, "    fgr_range_drop((uint64_t)%s);\n", d)
	}
	// Pinned memory named as a device address is kept alike from then on
	// (for a copy with shortcuts, said before them).
	for _, p := range e.Params {
		if k := e.Dev[p.Name].Name; (k == "dev" || k == "base") && e.Stage == "" {
			fmt.Fprintf(b, "    fgr_mirror_named((uint64_t)(uintptr_t)%s);\n", p.Name)
		}
	}
	// What the protocol cannot carry is refused before anything is sent.
	for _, p := range e.Params {
		switch k := e.Kinds[p.Name]; k.Name {
		case "null":
			fmt.Fprintf(b, "    if (%s != NULL)\n        return fgr_unsupported(-1, \"%s\", \"%s\");\n", p.Name, name, p.Name)
		case "launchcfg":
			fmt.Fprintf(b, "    if ((fgr_r = fgr_launchcfg_check(%s, \"%s\")) != CUDA_SUCCESS)\n        return fgr_refused_here(\"%s\", fgr_r);\n", p.Name, name, name)
		case "in", "out", "inout":
			fmt.Fprintf(b, "    uint64_t n_%s = %s ? %s : 0;\n", p.Name, p.Name, bytesExpr(p, k))
			if k.Count != "" {
				fmt.Fprintf(b, "    if (n_%s > FGR_MAX_BUF)\n        return fgr_unsupported(-1, \"%s\", \"a buffer over the frame limit\");\n", p.Name, name)
			}
		case "jitopts", "libopts":
			fmt.Fprintf(b, "    if ((fgr_r = fgr_opts_check(%s, %s, %s, %s, \"%s\")) != CUDA_SUCCESS)\n        return fgr_refused_here(\"%s\", fgr_r);\n",
				optionKinds[k.Name], p.Name, e.paramAfter(p.Name).Name, k.Count, name, name)
		case "kparams":
			fmt.Fprintf(b, "    struct fgr_kparams fgr_kp;\n    if ((fgr_r = fgr_kparams_layout(f, %s, &fgr_kp)) != CUDA_SUCCESS)\n        return fgr_refused_here(\"%s\", fgr_r);\n", p.Name, name)
		case "extra":
			fmt.Fprintf(b, "    struct fgr_extra fgr_ex;\n    if ((fgr_r = fgr_extra_check(%s, kernelParams, &fgr_ex, \"%s\")) != CUDA_SUCCESS)\n        return fgr_refused_here(\"%s\", fgr_r);\n", p.Name, name, name)
		case "shadow":
			fmt.Fprintf(b, "    if (%s == NULL)\n        return CUDA_ERROR_INVALID_VALUE;\n", p.Name)
		}
	}
	b.WriteString("    struct fgr_call fgr_c;\n")
	queued := "0"
	if e.Disp == DispQueue {
		queued = "1"
	} else if queuedBy != "" {
		queued = queuedBy
	}
	fmt.Fprintf(b, "    if ((fgr_r = fgr_begin(&fgr_c, FGR_OP_%s, %s)) != CUDA_SUCCESS)\n        return %s;\n", name, queued, fail)
	for _, p := range e.Params {
		if _, ptr := e.Kinds[p.Name]; !ptr {
			fmt.Fprintf(b, "    fgr_put_u64(&fgr_c.w, %s);\n", bitsPut(p.Type, p.Name))
		}
	}
	for _, p := range e.Params {
		switch k := e.Kinds[p.Name]; k.Name {
		case "in", "inout":
			fmt.Fprintf(b, "    fgr_put_buf(&fgr_c.w, %s, n_%s);\n", p.Name, p.Name)
		case "out":
			fmt.Fprintf(b, "    fgr_put_u8(&fgr_c.w, %s != NULL);\n", p.Name)
		case "str":
			fmt.Fprintf(b, "    fgr_put_str(&fgr_c.w, %s);\n", p.Name)
		case "image":
			fmt.Fprintf(b, "    fgr_put_image(&fgr_c.w, %s);\n", p.Name)
		case "kparams":
			fmt.Fprintf(b, "    fgr_put_kparams(&fgr_c.w, &fgr_kp, %s);\n", p.Name)
		case "extra":
			b.WriteString("    fgr_put_extra(&fgr_c.w, &fgr_ex);\n")
		case "launchcfg":
			fmt.Fprintf(b, "    fgr_put_launchcfg(&fgr_c.w, %s);\n", p.Name)
		case "jitopts", "libopts":
			fmt.Fprintf(b, "    fgr_put_opts(&fgr_c.w, %s, %s, %s, %s);\n", optionKinds[k.Name], p.Name, e.paramAfter(p.Name).Name, k.Count)
		case "shadow":
			// The handle is ours to name: the server makes it when the call comes.
			fmt.Fprintf(b, "    *%s = (%s)(uintptr_t)fgr_shadow_new();\n    fgr_put_u64(&fgr_c.w, (uint64_t)(uintptr_t)*%s);\n", p.Name, pointee(p.Type), p.Name)
		}
	}
	if e.Disp == DispQueue && e.PinnedWait {
		sync := "cuStreamSynchronize(NULL)"
		if e.PerThread() != "" {
			sync = "cuStreamSynchronize_ptsz(NULL)"
		}
		fmt.Fprintf(b, "    if ((fgr_r = fgr_send(&fgr_c)) == CUDA_SUCCESS && fgr_pinned_host((uint64_t)dstDevice))\n        fgr_r = %s;\n    return fgr_r;\n}\n\n", sync)
		return
	}
	if e.Disp == DispQueue {
		b.WriteString("    return fgr_send(&fgr_c);\n}\n\n")
		return
	}
	if queuedBy != "" {
		fmt.Fprintf(b, "    if (%s)\n        return fgr_send(&fgr_c);\n", queuedBy)
	}
	// A call whose one result is a buffer of a given size: the answer's
	// bytes are read straight into it when large (fgr_roundtrip).
	var outs []Param
	for _, p := range e.Params {
		if k := e.Kinds[p.Name]; k.Name == "out" || k.Name == "inout" {
			outs = append(outs, p)
		}
	}
	if len(outs) == 1 && e.Kinds[outs[0].Name].Name == "out" && e.Kinds[outs[0].Name].Count != "" {
		fmt.Fprintf(b, "    fgr_c.direct = %s;\n    fgr_c.direct_n = n_%s;\n", outs[0].Name, outs[0].Name)
	}
	fmt.Fprintf(b, "    if ((fgr_r = fgr_roundtrip(&fgr_c)) != CUDA_SUCCESS)\n        return %s;\n", fail)
	if e.Ret != "" {
		// The driver's function answers a value, not a CUresult.
		b.WriteString("    uint64_t fgr_v = fgr_c.result == CUDA_SUCCESS ? fgr_get_u64(&fgr_c.r) : 0;\n")
		fmt.Fprintf(b, "    fgr_end(&fgr_c);\n    return %s;\n}\n\n", bitsGet(e.Ret, "fgr_v"))
		return
	}
	for _, p := range e.Params {
		switch k := e.Kinds[p.Name]; k.Name {
		case "inout":
			fmt.Fprintf(b, "    fgr_get_out(&fgr_c, %s, n_%s, 1);\n", p.Name, p.Name)
		case "out":
			fmt.Fprintf(b, "    fgr_get_out(&fgr_c, %s, n_%s, 0);\n", p.Name, p.Name)
		}
	}
	// Device memory of a known size the connection was given.
	var given []string
	for _, p := range e.Params {
		if size := e.Alloc[p.Name]; size != "" {
			given = append(given, fmt.Sprintf("        if (%s)\n            fgr_range_add((uint64_t)*%s, (uint64_t)(%s));\n", p.Name, p.Name, size))
		}
	}
	if len(given) == 0 {
		b.WriteString("    return fgr_end(&fgr_c);\n}\n\n")
		return
	}
	b.WriteString("    if ((fgr_r = fgr_end(&fgr_c)) == CUDA_SUCCESS) {\n")
	for _, g := range given {
		b.WriteString(g)
	}
	b.WriteString("    }\n    return fgr_r;\n}\n\n")
}

// emitClientTable writes a table's words, its functions and its fetch,
// which fills the words once per process: asking the driver for the table
// (and its data) when a word is forwarded or copied, locally otherwise.
func emitClientTable(b *strings.Builder, t *Table, unsupported *int) {
	// A page of its own, made read-only once filled, as the driver's are.
	page := (t.Words*8 + 4095) / 4096 * 4096
	fmt.Fprintf(b, "\n/* Export table %s, in pages of its own. */\nstatic const void *xt_%s_words[%d] __attribute__((aligned(4096)));\n", t.Name, t.Name, page/8)
	for _, sl := range t.Slots {
		switch sl.Kind {
		case "data":
			fmt.Fprintf(b, "static unsigned char xt_%s_data%d[%d];\n", t.Name, sl.Index, sl.N)
		case "self":
			fmt.Fprintf(b, "static const void *xt_%s_self(void) { return xt_%s_words; }\n", t.Name, t.Name)
		case "returns":
			fmt.Fprintf(b, "static const void *xt_%s_ret%d(void) { return xt_%s_words[%d]; }\n", t.Name, sl.Index, t.Name, sl.N)
		case "unsupported":
			// Its own function, so that each word can be told apart (said once,
			// counted by flexgv census).
			fmt.Fprintf(b, "static CUresult xt_%s_no%d(void) { return fgr_xt_unsupported(%d, \"%s %s\", %d); }\n",
				t.Name, sl.Index, *unsupported, t.Name, uuidString(t.UUID), sl.Index)
			*unsupported++
		case "sync":
			fn := sl.Fn
			ret := fn.Ret
			if ret == "" {
				ret = "CUresult"
			}
			clientStub(b, *fn, fmt.Sprintf("static %s %s(%s)", ret, fn.Name, fn.ParamList()))
		}
	}
	fmt.Fprintf(b, "static CUresult xt_%s_fetch(void)\n{\n", t.Name)
	if t.Asked() {
		b.WriteString("    CUresult r;\n    struct fgr_call c;\n")
		fmt.Fprintf(b, "    if ((r = fgr_begin(&c, FGR_OP_xt_%s, 0)) != CUDA_SUCCESS)\n        return r;\n", t.Name)
		b.WriteString("    if ((r = fgr_roundtrip(&c)) != CUDA_SUCCESS)\n        return r;\n")
		for _, sl := range t.Slots {
			if sl.Kind == "data" {
				fmt.Fprintf(b, "    fgr_get_out(&c, xt_%s_data%d, %d, 0);\n", t.Name, sl.Index, sl.N)
			}
		}
		b.WriteString("    if ((r = fgr_end(&c)) != CUDA_SUCCESS)\n        return r;\n")
	}
	for _, sl := range t.Slots {
		w := fmt.Sprintf("    xt_%s_words[%d] = ", t.Name, sl.Index)
		switch sl.Kind {
		case "size":
			fmt.Fprintf(b, "%s(const void *)(%d * sizeof(void *));\n", w, t.Words)
		case "data":
			fmt.Fprintf(b, "%sxt_%s_data%d;\n", w, t.Name, sl.Index)
		case "self":
			fmt.Fprintf(b, "%s(const void *)xt_%s_self;\n", w, t.Name)
		case "returns":
			fmt.Fprintf(b, "%s(const void *)xt_%s_ret%d;\n", w, t.Name, sl.Index)
		case "sync":
			fmt.Fprintf(b, "%s(const void *)%s;\n", w, sl.Fn.Name)
		case "local":
			fmt.Fprintf(b, "%s(const void *)%s;\n", w, sl.Func)
		case "unsupported":
			fmt.Fprintf(b, "%s(const void *)xt_%s_no%d;\n", w, t.Name, sl.Index)
		}
	}
	b.WriteString("    return CUDA_SUCCESS;\n}\n")
}

// uuidString writes a table's UUID as the census does: its bytes in memory
// order, grouped 8-4-4-4-12.
func uuidString(u [16]byte) string {
	h := fmt.Sprintf("%x", u)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// emitClientExports declares the hand-written functions of the tables'
// local words, for their definitions and for the tables.
func emitClientExports(tables []*Table) string {
	var b strings.Builder
	b.WriteString(remoteHeader)
	b.WriteString("#ifndef FLEXGV_REMOTE_EXPORTS_GEN_H\n#define FLEXGV_REMOTE_EXPORTS_GEN_H\n\n#include <stdarg.h>\n\n")
	b.WriteString("/* Each table's index in fgr_tables. */\nenum {\n")
	for i, t := range tables {
		fmt.Fprintf(&b, "    FGR_XT_%s = %d,\n", t.Name, i)
	}
	b.WriteString("};\n\n")
	for _, t := range tables {
		for _, sl := range t.Slots {
			if sl.Kind == "local" {
				fmt.Fprintf(&b, "/* %s word %d */\n%s;\n", t.Name, sl.Index, sl.Proto)
			}
		}
	}
	b.WriteString("\n#endif\n")
	return b.String()
}

// emitRemoteServer writes the executor's decoders and dispatch table.
func emitRemoteServer(entries []RemoteEntry, tables []*Table) string {
	var b strings.Builder
	b.WriteString(remoteHeader)
	b.WriteString("#include \"executor.h\"\n\n")
	for _, e := range entries {
		if e.Forwarded() && !e.Fetch {
			ret := e.Ret
			if ret == "" {
				ret = "CUresult"
			}
			fmt.Fprintf(&b, "typedef %s (*pfn_%s)(%s);\n", ret, e.Name, e.ParamList())
		}
	}
	b.WriteString("\n")
	for _, e := range entries {
		if !e.Forwarded() {
			continue
		}
		fmt.Fprintf(&b, "static CUresult op_%s(struct fgr_rd *rd, struct fgr_req *q)\n{\n    (void)q;\n", e.Name)
		if e.Fetch {
			// The table's data words, read where the driver's table points.
			fmt.Fprintf(&b, "    const void *const *fgr_t = fgr_real[FGR_OP_%s];\n    (void)fgr_t;\n", e.Name)
			b.WriteString("    if (!fgr_rd_done(rd))\n        return FGR_BAD_FRAME;\n")
			for _, sl := range e.Table.Slots {
				if sl.Kind == "data" {
					fmt.Fprintf(&b, "    fgr_reply_out(q, fgr_t[%d], %d, 0, CUDA_SUCCESS);\n", sl.Index, sl.N)
				}
			}
			b.WriteString("    return CUDA_SUCCESS;\n}\n\n")
			continue
		}
		// By-value parameters first, then pointers: sizes may use the former.
		for _, p := range e.Params {
			if _, ptr := e.Kinds[p.Name]; !ptr {
				get := "fgr_get_u64(rd)"
				if remoteHandles[p.Type] { // the client's name for it
					get = fmt.Sprintf("fgr_in(FGR_H_%s, fgr_get_u64(rd))", p.Type)
				}
				fmt.Fprintf(&b, "    %s = %s;\n", joinDecl(p.Type, p.Name), bitsGet(p.Type, get))
			}
		}
		for _, z := range e.Zero {
			fmt.Fprintf(&b, "    %s = 0; /* of unknown use: as the driver was seen given it */\n", z)
		}
		for _, p := range e.Params {
			k, ptr := e.Kinds[p.Name]
			if !ptr {
				continue
			}
			t := pointee(p.Type)
			switch k.Name {
			case "in", "inout":
				fmt.Fprintf(&b, "    %s *%s = fgr_get_buf(rd, q, %s, %d);\n", t, p.Name, bytesExpr(p, k), b2i(!byteBuffer(p.Type)))
				for _, f := range structHandles[t] { // our copy: the driver is given its own handle
					if k.Name == "inout" { // and the client gets its name back
						fmt.Fprintf(&b, "    uint64_t fgr_name_%s_%s = %s ? (uint64_t)(uintptr_t)%s->%s : 0;\n", p.Name, f[0], p.Name, p.Name, f[0])
					}
					fmt.Fprintf(&b, "    if (%s)\n        %s->%s = (%s)(uintptr_t)fgr_in(FGR_H_%s, (uint64_t)(uintptr_t)%s->%s);\n",
						p.Name, p.Name, f[0], f[1], f[1], p.Name, f[0])
				}
			case "shadow":
				fmt.Fprintf(&b, "    uint64_t fgr_id_%s = fgr_get_u64(rd);\n", p.Name)
			case "out":
				fmt.Fprintf(&b, "    int has_%s = fgr_get_u8(rd);\n", p.Name)
			case "str":
				fmt.Fprintf(&b, "    char *%s = fgr_get_str(rd);\n", p.Name)
			case "image":
				fmt.Fprintf(&b, "    void *%s = fgr_get_image(rd, q);\n", p.Name)
			case "kparams":
				fmt.Fprintf(&b, "    void **%s = fgr_get_kparams(rd, q);\n", p.Name)
			case "extra":
				fmt.Fprintf(&b, "    void **%s = fgr_get_extra(rd, q);\n", p.Name)
			case "launchcfg":
				fmt.Fprintf(&b, "    CUlaunchConfig *%s = fgr_get_launchcfg(rd, q);\n", p.Name)
			case "jitopts", "libopts":
				v := e.paramAfter(p.Name).Name
				fmt.Fprintf(&b, "    void **%s = NULL;\n    %s *%s = fgr_get_opts(rd, q, %s, &%s, &%s);\n", v, pointee(p.Type), p.Name, optionKinds[k.Name], v, k.Count)
			case "null":
				fmt.Fprintf(&b, "    %s = NULL;\n", joinDecl(p.Type, p.Name))
			}
		}
		b.WriteString("    if (!fgr_rd_done(rd))\n        return FGR_BAD_FRAME;\n")
		for _, p := range e.Params { // arrays of handles, by the client's names
			if k := e.Kinds[p.Name]; (k.Name == "in" || k.Name == "inout") && remoteHandles[pointee(p.Type)] {
				fmt.Fprintf(&b, "    fgr_in_n(FGR_H_%s, %s, %s / sizeof(%s));\n", pointee(p.Type), p.Name, bytesExpr(p, k), pointee(p.Type))
			}
		}
		for _, p := range e.Params {
			if k := e.Kinds[p.Name]; k.Name == "shadow" {
				fmt.Fprintf(&b, "    if (!fgr_is_shadow(fgr_id_%s))\n        return FGR_BAD_FRAME;\n", p.Name)
				fmt.Fprintf(&b, "    %s fgr_v_%s = NULL, *%s = &fgr_v_%s;\n", pointee(p.Type), p.Name, p.Name, p.Name)
			}
			if k := e.Kinds[p.Name]; k.Name == "out" {
				fmt.Fprintf(&b, "    %s *%s = NULL;\n", pointee(p.Type), p.Name)
			}
		}
		// Results get memory only once the checks passed: a refused call
		// allocates (and pins) nothing.
		var outs strings.Builder
		for _, p := range e.Params {
			if k := e.Kinds[p.Name]; k.Name == "out" {
				fmt.Fprintf(&outs, "    if (fgr_r == CUDA_SUCCESS && has_%s && !(%s = fgr_out(q, %s)))\n        return fgr_out_failed(q);\n", p.Name, p.Name, bytesExpr(p, k))
			}
		}
		call := fmt.Sprintf("((pfn_%s)fgr_real[FGR_OP_%s])(%s)", e.Name, e.Name, e.ArgList())
		if e.Ret != "" {
			if outs.Len() > 0 {
				fmt.Fprintf(&b, "    CUresult fgr_r = CUDA_SUCCESS;\n%s", outs.String())
			}
			fmt.Fprintf(&b, "    fgr_put_u64(q->reply, %s);\n    return CUDA_SUCCESS;\n}\n\n", bitsPut(e.Ret, call))
			continue
		}
		checks := serverChecks(e)
		var before []string
		if w := waitArgs(e); w != "" {
			before = append(before, "(fgr_r = fgr_wait("+w+")) == FGR_GO")
		}
		if c := captureArgs(e); c != "" {
			before = append(before, "(fgr_r = "+c+") == CUDA_SUCCESS")
		}
		b.WriteString("    CUresult fgr_r = CUDA_SUCCESS;\n")
		for i, c := range checks {
			if i > 0 {
				b.WriteString("    else ")
			} else {
				b.WriteString("    ")
			}
			refuse := "fgr_refuse"
			if c.size {
				refuse = "fgr_refuse_size"
			}
			fmt.Fprintf(&b, "if (!(%s))\n        fgr_r = %s(\"%s\", \"%s\", %s, %s);\n", c.cond, refuse, e.Name, c.what, c.val, c.err)
		}
		b.WriteString(outs.String())
		before = append([]string{"fgr_r == CUDA_SUCCESS"}, before...)
		fmt.Fprintf(&b, "    if (%s)\n        fgr_r = %s;\n", strings.Join(before, " &&\n        "), call)
		if rec := serverRecords(e); rec != "" {
			fmt.Fprintf(&b, "    if (fgr_r == CUDA_SUCCESS) {\n%s    }\n", rec)
		}
		if e.Drain != "" {
			fmt.Fprintf(&b, "    if (fgr_r == CUDA_SUCCESS)\n        fgr_r = fgr_drain(%s, %d);\n", e.Drain, b2i(e.PerThread() != ""))
		}
		for _, p := range e.Params { // handles in structures go back by name
			if k := e.Kinds[p.Name]; k.Name == "inout" {
				for _, f := range structHandles[pointee(p.Type)] {
					fmt.Fprintf(&b, "    if (%s)\n        %s->%s = (%s)(uintptr_t)fgr_name_%s_%s;\n", p.Name, p.Name, f[0], f[1], p.Name, f[0])
				}
				for _, f := range structOutHandles[pointee(p.Type)] { // none when it has no name
					fmt.Fprintf(&b, "    if (%s)\n        fgr_out_n(FGR_H_%s, &%s->%s, 1);\n", p.Name, f[1], p.Name, f[0])
				}
			}
		}
		for _, p := range e.Params {
			switch k := e.Kinds[p.Name]; k.Name {
			case "inout":
				fmt.Fprintf(&b, "    fgr_reply_out(q, %s, %s, 1, fgr_r);\n", p.Name, bytesExpr(p, k))
			case "out":
				fmt.Fprintf(&b, "    if (has_%s)\n        fgr_reply_out(q, %s, %s, 0, fgr_r);\n", p.Name, p.Name, bytesExpr(p, k))
			}
		}
		b.WriteString("    return fgr_r;\n}\n\n")
	}
	b.WriteString("const struct fgr_op_desc fgr_ops[FGR_NUM_OPS] = {\n")
	for _, e := range entries {
		if e.Forwarded() {
			fmt.Fprintf(&b, "    [FGR_OP_%s] = {\"%s\", op_%s, %d, %s},\n", e.Name, e.Name, e.Name, b2i(e.Sync), maxFrame(e))
		}
	}
	b.WriteString("};\n\n/* The export tables the client answers: the functions it forwards. */\n")
	b.WriteString("const struct fgr_xtable fgr_xtables[] = {\n")
	forwarded := 0
	for _, t := range tables {
		if t.Local() {
			continue
		}
		forwarded++
		b.WriteString("    {{{")
		for i, c := range t.UUID {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%d", c)
		}
		fmt.Fprintf(&b, "}}, FGR_OP_xt_%s, {", t.Name)
		for _, sl := range t.Slots {
			if sl.Fn != nil {
				fmt.Fprintf(&b, "{FGR_OP_%s, %d}, ", sl.Fn.Name, sl.Index)
			}
		}
		b.WriteString("{0, 0}}},\n")
	}
	fmt.Fprintf(&b, "};\n\nconst int fgr_nxtables = %d;\n", forwarded)
	return b.String()
}

// copyStream is the stream a copy's entry point names, the per-thread
// default one by its handle.
func copyStream(e RemoteEntry) string {
	switch {
	case e.param("hStream") != nil && e.PerThread() != "":
		return "hStream ? hStream : CU_STREAM_PER_THREAD"
	case e.param("hStream") != nil:
		return "hStream"
	case e.PerThread() != "":
		return "CU_STREAM_PER_THREAD"
	}
	return "NULL"
}

// captureArgs is the call that deals with a copy of the program's memory
// on a stream that captures a graph (remote/executor/captured.c), "" for a
// call that makes none.
func captureArgs(e RemoteEntry) string {
	if e.Stage == "" || e.param("hStream") == nil {
		return "" // a synchronous copy: the driver refuses it in capture
	}
	pt := b2i(e.PerThread() != "")
	if e.Kinds[e.Stage].Name == "in" {
		return fmt.Sprintf("fgr_captured_upload((const void **)&%s, %s, hStream, %d)", e.Stage, bytesExpr(*e.param(e.Stage), e.Kinds[e.Stage]), pt)
	}
	return fmt.Sprintf("fgr_captured_download(hStream, %d, \"%s\")", pt, e.Name)
}

// waitArgs are fgr_wait's arguments for a call that waits for the device
// (wait= or after=), "" for another.
func waitArgs(e RemoteEntry) string {
	pt := b2i(e.PerThread() != "")
	switch {
	case e.Wait == "context":
		if e.param("ctx") != nil {
			return "FGR_WAIT_CONTEXT, (uint64_t)(uintptr_t)ctx, 0"
		}
		return "FGR_WAIT_CONTEXT, 0, 0"
	case e.Wait != "" && e.param(e.Wait).Type == "CUevent":
		return fmt.Sprintf("FGR_WAIT_EVENT, (uint64_t)(uintptr_t)%s, 0", e.Wait)
	case e.Wait != "":
		return fmt.Sprintf("FGR_WAIT_STREAM, (uint64_t)(uintptr_t)%s, %d", e.Wait, pt)
	case e.After == "null":
		return fmt.Sprintf("FGR_AFTER_STREAM, 0, %d", pt)
	case e.After != "":
		return fmt.Sprintf("FGR_AFTER_STREAM, (uint64_t)(uintptr_t)%s, %d", e.After, pt)
	}
	return ""
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// emitRemoteDoc writes the support list of the remoting client.
func emitRemoteDoc(entries []RemoteEntry, tables []*Table) string {
	var b strings.Builder
	b.WriteString("<!-- Code generated by tools/gen from api/remote.api and api/cuda.api. DO NOT EDIT. -->\n")
	b.WriteString("# What the remoting client supports\n\n")
	b.WriteString("Every entry point the remoting `libcuda.so.1` exports and how it is\n" +
		"answered: *local* on the client, *sync* forwarded with the caller waiting,\n" +
		"*wrap* forwarded with client-side bookkeeping, *queued* forwarded without\n" +
		"waiting (an error surfaces at the next call marked as where queued calls'\n" +
		"errors surface, as a GPU's asynchronous errors do). Entries marked\n" +
		"*unsupported* answer `CUDA_ERROR_NOT_SUPPORTED`, say so once on stderr\n" +
		"and count as failed calls under `flexgv trace`. A device address marked\n" +
		"`dev[N]` must hold N bytes of memory the connection allocated, one marked\n" +
		"`base` must start such an allocation; the executor checks every handle.\n" +
		"Source: `api/remote.api`.\n\n")
	count := map[Disposition]int{}
	var api []RemoteEntry
	for _, e := range entries {
		if e.Table == nil {
			count[e.Disp]++
			api = append(api, e)
		}
	}
	entries = api
	fmt.Fprintf(&b, "%d entry points: %d local, %d forwarded (%d of them queued), %d wrap, %d unsupported.\n\n",
		len(entries), count[DispLocal], count[DispSync]+count[DispQueue], count[DispQueue], count[DispWrap], count[""])
	b.WriteString("| entry point | answered | pointer parameters |\n| --- | --- | --- |\n")
	for _, e := range entries {
		d := string(e.Disp)
		if d == "" {
			d = "**unsupported**"
		}
		var ks []string
		for _, p := range e.Params {
			if k, ok := e.Kinds[p.Name]; ok {
				s := p.Name + ": " + k.Name
				if k.Count != "" {
					s += "[" + k.Count + "]"
				}
				ks = append(ks, "`"+strings.ReplaceAll(s, "|", "\\|")+"`")
			}
		}
		for _, p := range e.Params {
			if k, ok := e.Dev[p.Name]; ok && k.Name != "any" {
				s := p.Name + ": " + k.Name
				if k.Count != "" {
					s += "[" + k.Count + "]"
				}
				ks = append(ks, "`"+strings.ReplaceAll(s, "|", "\\|")+"`")
			}
			if _, ok := e.Alloc[p.Name]; ok {
				ks = append(ks, fmt.Sprintf("`%s` is the connection's memory from then on", p.Name))
			}
		}
		if e.Chunk != "" {
			ks = append(ks, "over `FLEXGV_REMOTE_CHUNK` bytes (4 MiB) sent as several calls")
		}
		if e.Destroys != "" {
			ks = append(ks, "destroys `"+e.Destroys+"`")
		}
		if e.Drain != "" {
			ks = append(ks, "waits for `"+e.Drain+"`")
		}
		if e.Sync {
			ks = append(ks, "queued calls' errors surface here")
		}
		if e.UVA {
			ks = append(ks, "with a side in the program's own memory: made as the explicit copy")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", e.Name, d, strings.Join(ks, ", "))
	}
	b.WriteString("\n## Export tables\n\n`cuGetExportTable` answers these tables from the client (any other is refused\n" +
		"with `CUDA_ERROR_NOT_SUPPORTED`). An *unsupported* word is a function that\n" +
		"answers `CUDA_ERROR_NOT_SUPPORTED` and says its table and word once on stderr.\n\n" +
		"| table | word | answered |\n| --- | ---: | --- |\n")
	for _, t := range tables {
		for i := 0; i < len(t.Slots); i++ {
			sl := t.Slots[i]
			what := sl.Kind
			switch sl.Kind {
			case "data":
				what = fmt.Sprintf("copy of %d bytes of the driver's data", sl.N)
			case "returns":
				what = fmt.Sprintf("local: returns word %d", sl.N)
			case "self":
				what = "local: returns the table"
			case "size":
				what = fmt.Sprintf("size: %d bytes", t.Words*8)
			case "local":
				what = "local `" + strings.ReplaceAll(sl.Proto, "|", "\\|") + "`"
			case "sync":
				ret := sl.Fn.Ret
				if ret == "" {
					ret = "CUresult"
				}
				what = fmt.Sprintf("sync `%s (%s)`", ret, sl.Fn.ParamList())
			}
			word := fmt.Sprint(sl.Index)
			if sl.Kind == "unsupported" {
				end := i
				for end+1 < len(t.Slots) && t.Slots[end+1].Kind == "unsupported" {
					end++
				}
				if end > i {
					word = fmt.Sprintf("%d–%d", sl.Index, t.Slots[end].Index)
				}
				i = end
			}
			fmt.Fprintf(&b, "| %s `%x` | %s | %s |\n", t.Name, t.UUID, word, what)
		}
	}
	return b.String()
}

// handleVal is the u64 the executor's tables hold for a handle.
func handleVal(t, v string) string {
	if t == "CUmemGenericAllocationHandle" {
		return "(uint64_t)" + v
	}
	return "(uint64_t)(uintptr_t)" + v
}

type check struct {
	cond, what, val, err string
	size                 bool // a result's size, not a handle or address
}

// maxFrame is the largest request frame e can carry: any up to
// FGR_MAX_FRAME when it sends a buffer of a size it chooses or a module
// image, else FGR_SMALL_FRAME (its by-value words, single objects, strings,
// kernel parameters, options and launch attributes are each bounded far
// below it). The executor refuses a longer frame before reading it.
func maxFrame(e RemoteEntry) string {
	for _, k := range e.Kinds {
		if k.Name == "image" || ((k.Name == "in" || k.Name == "inout") && k.Count != "") {
			return "FGR_MAX_FRAME"
		}
	}
	return "FGR_SMALL_FRAME"
}

// serverChecks are the conditions a request must meet before the driver
// sees it: every handle it names is this connection's, every device
// address lies in this connection's memory.
func serverChecks(e RemoteEntry) []check {
	var cs []check

	for _, p := range e.Params {
		_, ptr := e.Kinds[p.Name]
		switch {
		case !ptr && remoteHandles[p.Type]:
			v := handleVal(p.Type, p.Name)
			bad := "CUDA_ERROR_INVALID_HANDLE"
			if p.Type == "CUcontext" { // as the driver answers for a destroyed context
				bad = "CUDA_ERROR_INVALID_CONTEXT"
			}
			cs = append(cs, check{fmt.Sprintf("fgr_has(FGR_H_%s, %s)", p.Type, v), p.Name, v, bad, false})
		case !ptr && (p.Type == "CUdeviceptr" || e.Dev[p.Name].Name == "dev"):
			v := "(uint64_t)(uintptr_t)" + p.Name
			switch k := e.Dev[p.Name]; k.Name {
			case "dev":
				cs = append(cs, check{fmt.Sprintf("fgr_mem_in(%s, %s)", v, k.Count), p.Name, v, "CUDA_ERROR_INVALID_VALUE", false})
			case "base":
				cs = append(cs, check{fmt.Sprintf("fgr_mem_base(%s)", v), p.Name, v, "CUDA_ERROR_INVALID_VALUE", false})
			}
		case ptr:
			k := e.Kinds[p.Name]
			t := pointee(p.Type)
			// A result other than a download's bytes is small: a size the
			// client chose is refused before anything is allocated.
			if k.Name == "out" && k.Count != "" && e.Stage != p.Name {
				n := bytesExpr(p, k)
				cs = append(cs, check{fmt.Sprintf("!has_%s || %s <= FGR_SMALL_FRAME", p.Name, n), p.Name, n, "CUDA_ERROR_INVALID_VALUE", true})
			}
			if (k.Name == "in" || k.Name == "inout") && remoteHandles[t] {
				cs = append(cs, check{fmt.Sprintf("fgr_has_n(FGR_H_%s, %s, %s / sizeof(%s))", t, p.Name, bytesExpr(p, k), t), p.Name, "(uint64_t)0", "CUDA_ERROR_INVALID_HANDLE", false})
			}
			if k.Name == "launchcfg" {
				t = "CUlaunchConfig"
			}
			if k.Name == "in" || k.Name == "inout" || k.Name == "launchcfg" {
				for _, f := range structHandles[t] {
					v := fmt.Sprintf("(%s ? %s : 0)", p.Name, handleVal(f[1], p.Name+"->"+f[0]))
					cs = append(cs, check{fmt.Sprintf("fgr_has(FGR_H_%s, %s)", f[1], v), p.Name + "->" + f[0], v, "CUDA_ERROR_INVALID_HANDLE", false})
				}
			}
			if k.Name == "launchcfg" { // events named by its attributes
				cs = append(cs, check{fmt.Sprintf("fgr_launchcfg_events_ok(%s)", p.Name), p.Name + "->attrs", "(uint64_t)0", "CUDA_ERROR_INVALID_HANDLE", false})
			}
		}
	}
	return cs
}

// serverRecords is what a successful call changes in the connection's
// tables: what it destroyed is forgotten, with all it owned; the handles
// and memory it returned are the connection's, owned by the Owner
// parameter's handle, else by the request's context.
func serverRecords(e RemoteEntry) string {
	var b strings.Builder
	if d := e.Destroys; d != "" {
		p := e.param(d)
		if p.Type == "CUdeviceptr" {
			fmt.Fprintf(&b, "        fgr_drop(FGR_H_MEM, (uint64_t)%s);\n", d)
		} else {
			fmt.Fprintf(&b, "        fgr_drop(FGR_H_%s, %s);\n", p.Type, handleVal(p.Type, d))
		}
	}
	owner := func(kind string) string {
		if e.Owner == "none" || deviceWide[kind] {
			return "0, 0"
		}
		if e.Owner != "" {
			p := e.param(e.Owner)
			return fmt.Sprintf("FGR_H_%s, %s", p.Type, handleVal(p.Type, e.Owner))
		}
		return "FGR_H_CUcontext, fgr_ctx"
	}
	for _, p := range e.Params {
		k, ok := e.Kinds[p.Name]
		if ok && k.Name == "shadow" {
			t := pointee(p.Type)
			fmt.Fprintf(&b, "        fgr_add(FGR_H_%s, %s, %s);\n        fgr_shadow_add(FGR_H_%s, fgr_id_%s, %s);\n",
				t, handleVal(t, "*"+p.Name), owner(t), t, p.Name, handleVal(t, "*"+p.Name))
			continue
		}
		if !ok || k.Name != "out" {
			continue
		}
		t := pointee(p.Type)
		if size, ok := e.Alloc[p.Name]; ok {
			if size == "" {
				fmt.Fprintf(&b, "        if (%s)\n            fgr_mem_add_found(*%s, %s);\n", p.Name, p.Name, owner(""))
			} else {
				fmt.Fprintf(&b, "        if (%s)\n            fgr_mem_add(*%s, %s, %s);\n", p.Name, p.Name, size, owner(""))
			}
			continue
		}
		if !remoteHandles[t] {
			continue
		}
		if k.Count == "" {
			fmt.Fprintf(&b, "        if (%s)\n            fgr_add(FGR_H_%s, %s, %s);\n", p.Name, t, handleVal(t, "*"+p.Name), owner(t))
		} else {
			fmt.Fprintf(&b, "        for (uint64_t fgr_i = 0; %s && fgr_i < %s / sizeof(%s); fgr_i++)\n            fgr_add(FGR_H_%s, %s, %s);\n",
				p.Name, bytesExpr(p, k), t, t, handleVal(t, p.Name+"[fgr_i]"), owner(t))
		}
	}
	// The client is given names, never the driver's values (a handle that
	// has none, for want of memory, fails the call).
	for _, p := range e.Params {
		k, ok := e.Kinds[p.Name]
		if t := pointee(p.Type); ok && (k.Name == "out" || k.Name == "inout") && remoteHandles[t] {
			n := "1"
			if k.Count != "" {
				n = fmt.Sprintf("%s / sizeof(%s)", bytesExpr(p, k), t)
			}
			fmt.Fprintf(&b, "        if (fgr_out_n(FGR_H_%s, %s, %s) != 0)\n            fgr_r = CUDA_ERROR_OUT_OF_MEMORY;\n", t, p.Name, n)
		}
	}
	if a := e.AsHandle; a[0] != "" { // not one of the connection's: no answer
		fmt.Fprintf(&b, "        if ((%s) && fgr_out_n(FGR_H_%s, %s, 1) != 0)\n            fgr_r = CUDA_ERROR_INVALID_VALUE;\n", a[2], a[1], a[0])
	}
	return b.String()
}
