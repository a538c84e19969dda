package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

var kindRE = regexp.MustCompile(`^([a-z]+)(?:\[(.+)\])?$`)

// bareRE is an entry refused by name: VERSION NAME unsupported "WHY".
var bareRE = regexp.MustCompile(`^(\d+)\s+(cu[A-Za-z0-9_]+)\s+unsupported\s+"([^"]+)"$`)

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
		var rest string // the line after the entry's name or prototype
		if m := bareRE.FindStringSubmatch(line); m != nil {
			// Refused without a prototype: the stub never reads its
			// arguments, so no declaration is needed (nor checked).
			v, _ := strconv.Atoi(m[1])
			if _, dup := byName[m[2]]; dup {
				return nil, nil, fmt.Errorf("%s: %s is given twice", where, m[2])
			}
			byName[m[2]] = len(out)
			out = append(out, RemoteEntry{Entry: Entry{Lib: LibCUDA, Version: v, Name: m[2]}, Extra: true, Bare: true,
				Why: m[3], Source: where, Kinds: map[string]Ann{}, Dev: map[string]Ann{}, Alloc: map[string]string{}})
			continue
		}
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
			attrs, rest = strings.Fields(m[4]), m[4]
		} else {
			f := strings.Fields(line)
			i, ok := byName[f[0]]
			if !ok {
				return nil, nil, fmt.Errorf("%s: %s is not in api/cuda.api (give an unhooked entry with its prototype)", where, f[0])
			}
			re = &out[i]
			if re.Disp != "" || re.Extra || re.Why != "" {
				return nil, nil, fmt.Errorf("%s: %s is annotated twice", where, f[0])
			}
			attrs, rest = f[1:], strings.TrimSpace(line[len(f[0]):])
		}
		re.Source = where
		if len(attrs) == 0 {
			return nil, nil, fmt.Errorf("%s: %s has no disposition (local, sync or wrap)", where, re.Name)
		}
		// A note for the docs' list ends the line, in double quotes.
		if q := strings.Index(rest, `"`); q >= 0 && attrs[0] != "unsupported" {
			note := strings.TrimSpace(rest[q:])
			if len(note) < 3 || note[len(note)-1] != '"' || strings.Contains(note[1:len(note)-1], `"`) {
				return nil, nil, fmt.Errorf("%s: %s: a note is one string in double quotes, last on its line", where, re.Name)
			}
			re.Note = note[1 : len(note)-1]
			attrs = strings.Fields(rest[:q])
		}
		switch d := Disposition(attrs[0]); d {
		case DispLocal, DispSync, DispWrap, DispQueue:
			re.Disp = d
		case "unsupported":
			// Exported, so that a library that looks it up finds it; a
			// call answers CUDA_ERROR_NOT_SUPPORTED. The spec says why.
			why := strings.TrimSpace(strings.TrimPrefix(rest, "unsupported"))
			if len(why) < 3 || why[0] != '"' || why[len(why)-1] != '"' || strings.Contains(why[1:len(why)-1], `"`) {
				return nil, nil, fmt.Errorf("%s: %s: unsupported takes its reason in double quotes, and nothing more", where, re.Name)
			}
			re.Why = why[1 : len(why)-1]
			re.Kinds = map[string]Ann{}
			re.Dev = map[string]Ann{}
			re.Alloc = map[string]string{}
			continue
		default:
			return nil, nil, fmt.Errorf("%s: %s: unknown disposition %q", where, re.Name, attrs[0])
		}
		re.Kinds = map[string]Ann{}
		re.Dev = map[string]Ann{}
		re.Alloc = map[string]string{}
		for _, a := range attrs[1:] {
			if a == "legacy" {
				if !re.Extra {
					return nil, nil, fmt.Errorf("%s: %s: legacy is for an entry given with its prototype", where, re.Name)
				}
				re.Legacy = true
				continue
			}
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
			if name == "typedef" {
				if _, err := strconv.Atoi(val); err != nil && val != "none" {
					return nil, nil, fmt.Errorf("%s: %s: typedef=%s is neither a version nor none", where, re.Name, val)
				}
				re.Typedef = val
				continue
			}
			if name == "ashandle" {
				f := strings.SplitN(val, ":", 3)
				if len(f) != 3 || re.param(f[0]) == nil || re.param(f[0]).Type != "void *" || !remoteHandles[f[1]] || f[2] == "" {
					return nil, nil, fmt.Errorf("%s: %s: ashandle=%s is not VOIDPTR:HANDLETYPE:CONDITION", where, re.Name, val)
				}
				re.AsHandle = append(re.AsHandle, [3]string{f[0], f[1], f[2]})
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
			m := kindRE.FindStringSubmatch(val)
			if m == nil || kinds[m[1]] == nil {
				return nil, nil, fmt.Errorf("%s: %s: unknown kind %q (kinds: %s)", where, re.Name, val, kindNames())
			}
			if err := kinds[m[1]].annotate(re, p, Ann{Name: m[1], Count: m[2]}); err != nil {
				return nil, nil, fmt.Errorf("%s: %s: %v", where, re.Name, err)
			}
		}
		if re.Disp != DispLocal {
			for _, p := range re.Params {
				if _, ok := re.Kinds[p.Name]; !ok && re.Dev[p.Name].Name == "" && strings.HasSuffix(p.Type, "*") {
					return nil, nil, fmt.Errorf("%s: %s: pointer parameter %s needs a kind", where, re.Name, p.Name)
				}
				if _, ok := re.Dev[p.Name]; !ok && p.Type == "CUdeviceptr" {
					return nil, nil, fmt.Errorf("%s: %s: device address %s needs dev[N], base or any", where, re.Name, p.Name)
				}
			}
			for _, a := range re.args() {
				if err := a.k.validate(a); err != nil {
					return nil, nil, fmt.Errorf("%s: %s: %v", where, re.Name, err)
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
			if re.Disp == DispQueue && (re.Sync || re.Drain != "") {
				return nil, nil, fmt.Errorf("%s: %s: a queued call cannot wait", where, re.Name)
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
			Table: t, Slot: idx, Kinds: map[string]Ann{}}
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
				fn.Kinds[name] = Ann{Name: val}
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
		for _, p := range fn.Params {
			// Such a function has no CUresult to refuse with: the executor
			// could not check the handle before the driver sees it.
			if fn.Ret != "" && remoteHandles[p.Type] {
				return fmt.Errorf("slot %d: %s: only functions returning CUresult may take handles", idx, p.Name)
			}
		}
		sl.Fn = fn
	default:
		return fmt.Errorf("slot %d: unknown kind %s", idx, sl.Kind)
	}
	t.Slots = append(t.Slots, sl)
	return nil
}
