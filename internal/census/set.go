package census

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Workload is the census of one named run.
type Workload struct {
	Name   string `json:"name"`
	Report Report `json:"report"`
}

// Set is the census of several workloads: what one CUDA version's runtime
// and libraries use.
type Set struct {
	Workloads []Workload `json:"workloads"`
}

// Load reads a set, or a report as a set of one workload named after its
// file.
func Load(path string) (Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Set{}, err
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return Set{}, fmt.Errorf("%s: %v", path, err)
	}
	var s Set
	if _, ok := probe["workloads"]; ok {
		err = json.Unmarshal(data, &s)
	} else if _, ok := probe["tables"]; ok {
		w := Workload{Name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))}
		err = json.Unmarshal(data, &w.Report)
		s.Workloads = []Workload{w}
	} else {
		err = fmt.Errorf("neither a census report nor a set")
	}
	if err != nil {
		return Set{}, fmt.Errorf("%s: %v", path, err)
	}
	return s, nil
}

// WriteJSON writes the set as one JSON document.
func (s Set) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// union is every table of the set by UUID, as the first workload that was
// handed it saw it, and which workloads were.
type union struct {
	uuids  []string
	tables map[string]Table
	by     map[string][]string
}

func unite(s Set) union {
	u := union{tables: map[string]Table{}, by: map[string][]string{}}
	for _, w := range s.Workloads {
		for _, t := range w.Report.Tables {
			if _, ok := u.tables[t.UUID]; !ok {
				u.tables[t.UUID] = t
				u.uuids = append(u.uuids, t.UUID)
			}
			u.by[t.UUID] = append(u.by[t.UUID], w.Name)
		}
	}
	sort.Strings(u.uuids)
	return u
}

func tableOf(r Report, uuid string) (Table, bool) {
	for _, t := range r.Tables {
		if t.UUID == uuid {
			return t, true
		}
	}
	return Table{}, false
}

// WriteMarkdown writes the set for the docs: the workloads, then one matrix
// of every slot of every table against the calls each workload made, then
// the tables handed out but never called, the aliases, the refusals and any
// notes.
func (s Set) WriteMarkdown(w io.Writer) error {
	var b bytes.Buffer
	u := unite(s)
	b.WriteString("| workload | processes with tables | tables | calls | refused UUIDs | exit |\n|---|---:|---:|---:|---:|---:|\n")
	for _, wl := range s.Workloads {
		r := wl.Report
		var calls uint64
		for _, t := range r.Tables {
			calls += t.Calls
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d |\n", wl.Name, len(r.Processes), len(r.Tables), calls, len(r.Refused), r.ExitCode)
	}
	b.WriteString("\nCalls per slot (`–`: the workload was not handed the table):\n\n| table | slot | kind | target or value |")
	for _, wl := range s.Workloads {
		fmt.Fprintf(&b, " %s |", wl.Name)
	}
	b.WriteString("\n|---|---:|---|---|" + strings.Repeat("---:|", len(s.Workloads)) + "\n")
	for _, id := range u.uuids {
		t := u.tables[id]
		if t.AliasOf != "" {
			continue
		}
		for i, sl := range t.Slots {
			name := ""
			if i == 0 {
				name = "`" + id + "`"
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s |", name, sl.Index, sl.Kind, strings.TrimSpace(sl.Target+" "+sl.Value))
			for _, wl := range s.Workloads {
				wt, ok := tableOf(wl.Report, id)
				switch {
				case !ok:
					b.WriteString(" – |")
				case sl.Kind == "fn" && i < len(wt.Slots):
					fmt.Fprintf(&b, " %d |", wt.Slots[i].Calls)
				default:
					b.WriteString(" |")
				}
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\nHanded out, never called:\n\n")
	none := true
	for _, id := range u.uuids {
		t := u.tables[id]
		var calls uint64
		for _, wl := range s.Workloads {
			if wt, ok := tableOf(wl.Report, id); ok {
				calls += wt.Calls
			}
		}
		if t.AliasOf == "" && calls == 0 {
			fmt.Fprintf(&b, "- `%s` (%s), to %s\n", id, t.Shape(), strings.Join(u.by[id], ", "))
			none = false
		}
	}
	if none {
		b.WriteString("- none\n")
	}
	for _, id := range u.uuids {
		if t := u.tables[id]; t.AliasOf != "" {
			fmt.Fprintf(&b, "\n`%s` is handed out at the same address as `%s` (%s).\n", id, t.AliasOf, strings.Join(u.by[id], ", "))
		}
	}
	refused := map[string][]string{}
	var rids []string
	for _, wl := range s.Workloads {
		for _, f := range wl.Report.Refused {
			key := fmt.Sprintf("`%s` (CUresult %d)", f.UUID, f.Result)
			if refused[key] == nil {
				rids = append(rids, key)
			}
			refused[key] = append(refused[key], wl.Name)
		}
	}
	sort.Strings(rids)
	if len(rids) > 0 {
		b.WriteString("\nRefused by the driver:\n\n")
	}
	for _, k := range rids {
		fmt.Fprintf(&b, "- %s: %s\n", k, strings.Join(refused[k], ", "))
	}
	var notes []string
	for _, wl := range s.Workloads {
		for _, t := range wl.Report.Tables {
			for _, e := range t.Errors {
				notes = append(notes, fmt.Sprintf("- %s, `%s`: %s", wl.Name, t.UUID, e))
			}
		}
		for _, f := range wl.Report.Incomplete {
			notes = append(notes, fmt.Sprintf("- %s: not counted: %s", wl.Name, f))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nNotes:\n\n" + strings.Join(notes, "\n") + "\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}
