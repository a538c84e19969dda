package census

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as one JSON document.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report for people: every table with its slots, the
// refusals and the processes.
func (r Report) WriteText(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "flexgv census: %d export tables handed out to %d processes, %d refused, exit code %d\n",
		len(r.Tables), len(r.Processes), len(r.Refused), r.ExitCode)
	for _, s := range r.Incomplete {
		fmt.Fprintf(&b, "flexgv census: not counted: %s\n", s)
	}
	for _, t := range r.Tables {
		fmt.Fprintf(&b, "\ntable %s at %s: %s, %d requests", t.UUID, t.Location, t.Shape(), t.Requests)
		if t.AliasOf == "" {
			fmt.Fprintf(&b, ", %d calls", t.Calls)
		}
		fmt.Fprintf(&b, " (%s)\n", strings.Join(t.Programs, ", "))
		for _, e := range t.Errors {
			fmt.Fprintf(&b, "  note: %s\n", e)
		}
		if len(t.Slots) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  SLOT\tKIND\tCALLS\tTARGET OR VALUE")
		for _, s := range t.Slots {
			calls := ""
			if s.Kind == "fn" {
				calls = fmt.Sprint(s.Calls)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", s.Index, s.Kind, calls, s.Target+s.Value)
		}
		tw.Flush()
	}
	if len(r.Refused) > 0 {
		fmt.Fprintln(&b)
	}
	for _, f := range r.Refused {
		fmt.Fprintf(&b, "refused %s: CUresult %d, %d requests (%s)\n", f.UUID, f.Result, f.Requests, strings.Join(f.Programs, ", "))
	}
	if len(r.Processes) > 0 {
		fmt.Fprintln(&b)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PID\tPPID\tCOMMAND\tREQUESTS\tCALLS\tCMDLINE")
		for _, p := range r.Processes {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%s\n", p.Pid, p.Ppid, p.Comm, p.Requests, p.Calls, p.Cmd)
		}
		tw.Flush()
	}
	_, err := w.Write(b.Bytes())
	return err
}

// Shape says how a table is laid out, in a few words.
func (t Table) Shape() string {
	if t.AliasOf != "" {
		return "same table as " + t.AliasOf
	}
	kinds := map[string]int{}
	size := "no size word"
	for _, s := range t.Slots {
		kinds[s.Kind]++
		if s.Kind == "size" {
			size = "size word " + s.Value
		}
	}
	parts := []string{fmt.Sprintf("%d slots", len(t.Slots)), size, fmt.Sprintf("%d functions", kinds["fn"]+kinds["skip"]+kinds["uncounted"])}
	if kinds["data"] > 0 {
		parts = append(parts, fmt.Sprintf("%d data", kinds["data"]))
	}
	return strings.Join(parts, ", ")
}
