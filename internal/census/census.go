// Package census reads the export-table census files the shim writes
// (FLEXGV_CENSUS=PREFIX: one PREFIX.PID.census per process that was handed
// a private driver table) and merges them into one report: which tables,
// what their slots hold, how often each function slot was called and by
// which programs.
package census

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Slot is one word of a table.
type Slot struct {
	Index int    `json:"index"`
	Kind  string `json:"kind"` // size, fn (counted), skip (left alone on request), uncounted (could not be patched), data
	Calls uint64 `json:"calls"`
	// Target is where a function slot points: an exported symbol, or
	// OBJECT+0xOFFSET.
	Target string `json:"target,omitempty"`
	// Value is the size in bytes of a size word, or what a data slot holds:
	// 0, "int N" or "ptr LOCATION".
	Value string `json:"value,omitempty"`
}

// Table is one export table, by the UUID it was asked for with.
type Table struct {
	UUID     string   `json:"uuid"`
	Location string   `json:"location"`           // OBJECT+0xOFFSET of its first slot
	AliasOf  string   `json:"alias_of,omitempty"` // handed out at the same address under this UUID first
	Requests uint64   `json:"requests"`           // how often cuGetExportTable handed it out
	Calls    uint64   `json:"calls"`              // over its function slots
	Programs []string `json:"programs,omitempty"` // of the processes that asked for it or called it
	Errors   []string `json:"errors,omitempty"`   // why functions are not counted; disagreements between processes
	Slots    []Slot   `json:"slots"`
}

// Refusal is a UUID the driver refused to hand out a table for.
type Refusal struct {
	UUID     string   `json:"uuid"`
	Result   int      `json:"result"` // the CUresult
	Requests uint64   `json:"requests"`
	Programs []string `json:"programs"`
}

// Process is one process that was handed (or called) a table.
type Process struct {
	Pid      int    `json:"pid"`
	Ppid     int    `json:"ppid"`
	Comm     string `json:"comm"`
	Cmd      string `json:"cmd"`
	Driver   string `json:"driver,omitempty"`
	Requests uint64 `json:"requests"`
	Calls    uint64 `json:"calls"`
}

// Report is the census of a run, over all of its processes.
type Report struct {
	Processes []Process `json:"processes"`
	Tables    []Table   `json:"tables"`
	Refused   []Refusal `json:"refused,omitempty"`
	// Incomplete names the files of processes still writing, or killed
	// while writing, when the report was made.
	Incomplete []string `json:"incomplete,omitempty"`
	ExitCode   int      `json:"exit_code"`
}

// file is one process's census file.
type file struct {
	Process
	tables  []Table
	refused []Refusal
}

// parse reads one census file; an error says where it is cut short or
// malformed.
func parse(r io.Reader) (*file, error) {
	f := &file{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var t *Table
	ln, ended := 0, false
	for sc.Scan() {
		ln++
		key, rest, _ := strings.Cut(sc.Text(), " ")
		if ln == 1 {
			if key != "flexgv-census" || rest != "1" {
				return nil, fmt.Errorf("not a census file of this version (%q)", sc.Text())
			}
			continue
		}
		var err error
		switch key {
		case "pid":
			f.Pid, err = strconv.Atoi(rest)
		case "ppid":
			f.Ppid, err = strconv.Atoi(rest)
		case "comm":
			f.Comm = rest
		case "cmd":
			f.Cmd = rest
		case "driver":
			f.Driver = rest
		case "table":
			var tb Table
			tb, err = parseTable(rest)
			f.tables = append(f.tables, tb)
			t = &f.tables[len(f.tables)-1]
		case "error":
			if t == nil {
				return nil, fmt.Errorf("line %d: error before any table", ln)
			}
			t.Errors = append(t.Errors, rest)
		case "slot":
			if t == nil || t.AliasOf != "" {
				return nil, fmt.Errorf("line %d: slot outside a table", ln)
			}
			var s Slot
			s, err = parseSlot(rest)
			if err == nil && s.Index != len(t.Slots) {
				err = fmt.Errorf("slot %d out of order", s.Index)
			}
			t.Slots = append(t.Slots, s)
		case "refused":
			var rf Refusal
			rf, err = parseRefusal(rest)
			f.refused = append(f.refused, rf)
		case "end":
			ended = true
		default:
			err = fmt.Errorf("unknown line")
		}
		if err != nil {
			return nil, fmt.Errorf("line %d (%q): %v", ln, sc.Text(), err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !ended {
		return nil, fmt.Errorf("cut short after %d lines", ln)
	}
	return f, nil
}

// pairs reads "KEY VALUE KEY VALUE ..." into a map.
func pairs(fields []string) (map[string]string, error) {
	if len(fields)%2 != 0 {
		return nil, fmt.Errorf("odd number of fields")
	}
	m := map[string]string{}
	for i := 0; i < len(fields); i += 2 {
		m[fields[i]] = fields[i+1]
	}
	return m, nil
}

func parseTable(s string) (Table, error) {
	f := strings.Fields(s)
	if len(f) < 1 {
		return Table{}, fmt.Errorf("no UUID")
	}
	m, err := pairs(f[1:])
	if err != nil {
		return Table{}, err
	}
	t := Table{UUID: f[0], Location: m["at"], AliasOf: m["alias"]}
	if t.Requests, err = strconv.ParseUint(m["requests"], 10, 64); err != nil {
		return t, err
	}
	if t.AliasOf == "" {
		n, err := strconv.Atoi(m["slots"])
		if err != nil {
			return t, err
		}
		t.Slots = make([]Slot, 0, n)
	}
	return t, nil
}

func parseSlot(s string) (Slot, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return Slot{}, fmt.Errorf("too few fields")
	}
	i, err := strconv.Atoi(f[0])
	if err != nil {
		return Slot{}, err
	}
	sl := Slot{Index: i, Kind: f[1]}
	switch sl.Kind {
	case "size":
		sl.Value = f[2]
	case "data":
		sl.Value = strings.Join(f[2:], " ")
	case "fn":
		if len(f) != 4 {
			return sl, fmt.Errorf("want calls and target")
		}
		sl.Calls, err = strconv.ParseUint(f[2], 10, 64)
		sl.Target = f[3]
	case "skip", "uncounted":
		sl.Target = f[2]
	default:
		err = fmt.Errorf("unknown kind %q", sl.Kind)
	}
	return sl, err
}

func parseRefusal(s string) (Refusal, error) {
	f := strings.Fields(s)
	if len(f) < 1 {
		return Refusal{}, fmt.Errorf("no UUID")
	}
	m, err := pairs(f[1:])
	if err != nil {
		return Refusal{}, err
	}
	r := Refusal{UUID: f[0]}
	if r.Result, err = strconv.Atoi(m["result"]); err != nil {
		return r, err
	}
	r.Requests, err = strconv.ParseUint(m["requests"], 10, 64)
	return r, err
}

// ReadDir merges every census file in dir.
func ReadDir(dir string) (Report, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.census"))
	if err != nil {
		return Report{}, err
	}
	var files []*file
	var incomplete []string
	for _, p := range paths {
		r, err := os.Open(p)
		if err != nil {
			return Report{}, err
		}
		f, err := parse(r)
		r.Close()
		if err != nil {
			incomplete = append(incomplete, fmt.Sprintf("%s: %v", filepath.Base(p), err))
			continue
		}
		files = append(files, f)
	}
	rep := merge(files)
	rep.Incomplete = incomplete
	return rep, nil
}

// merge adds the files up, in pid order.
func merge(files []*file) Report {
	sort.Slice(files, func(a, b int) bool { return files[a].Pid < files[b].Pid })
	var rep Report
	tables := map[string]*Table{}
	refused := map[string]*Refusal{}
	var order, rorder []string
	for _, f := range files {
		for _, t := range f.tables {
			m, ok := tables[t.UUID]
			if !ok {
				c := t
				c.Slots = slices.Clone(t.Slots)
				c.Requests, c.Calls, c.Errors = 0, 0, nil
				for i := range c.Slots {
					c.Slots[i].Calls = 0
				}
				m = &c
				tables[t.UUID] = m
				order = append(order, t.UUID)
			}
			calls := addTable(m, t, f)
			f.Requests += t.Requests
			f.Calls += calls
			if t.Requests > 0 || calls > 0 {
				m.Programs = addName(m.Programs, f.Comm)
			}
		}
		for _, r := range f.refused {
			key := fmt.Sprintf("%s %d", r.UUID, r.Result)
			m, ok := refused[key]
			if !ok {
				m = &Refusal{UUID: r.UUID, Result: r.Result}
				refused[key] = m
				rorder = append(rorder, key)
			}
			m.Requests += r.Requests
			m.Programs = addName(m.Programs, f.Comm)
			f.Requests += r.Requests
		}
		rep.Processes = append(rep.Processes, f.Process)
	}
	for _, u := range order {
		rep.Tables = append(rep.Tables, *tables[u])
	}
	sort.Slice(rep.Tables, func(a, b int) bool { return rep.Tables[a].UUID < rep.Tables[b].UUID })
	for _, k := range rorder {
		rep.Refused = append(rep.Refused, *refused[k])
	}
	sort.Slice(rep.Refused, func(a, b int) bool { return rep.Refused[a].UUID < rep.Refused[b].UUID })
	return rep
}

// addTable adds one process's view of a table to the merged one and returns
// that process's calls into it.
func addTable(m *Table, t Table, f *file) uint64 {
	m.Requests += t.Requests
	for _, e := range t.Errors {
		m.Errors = addName(m.Errors, e)
	}
	note := func(format string, args ...any) {
		m.Errors = addName(m.Errors, fmt.Sprintf("pid %d (%s): ", f.Pid, f.Comm)+fmt.Sprintf(format, args...))
	}
	if t.Location != m.Location {
		note("at %s", t.Location)
	}
	if t.AliasOf != m.AliasOf {
		note("alias of %q", t.AliasOf)
	}
	if len(t.Slots) != len(m.Slots) {
		note("%d slots", len(t.Slots))
	}
	var calls uint64
	for i, s := range t.Slots {
		calls += s.Calls
		if i >= len(m.Slots) {
			continue
		}
		if s.Kind != m.Slots[i].Kind {
			note("slot %d is %s", i, s.Kind)
		}
		m.Slots[i].Calls += s.Calls
	}
	m.Calls += calls
	return calls
}

// addName adds s to a list once.
func addName(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}
