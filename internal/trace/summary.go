package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/flexgv/flexgv/internal/api"
	"github.com/flexgv/flexgv/internal/liveness"
)

// Process is one traced process (one program image: an exec makes another).
type Process struct {
	Pid    int    `json:"pid"`
	Ppid   int    `json:"ppid"`
	Comm   string `json:"comm"`
	Status string `json:"status"` // exited, running, or gone (ended without exit handlers: killed, _exit)
	Calls  uint64 `json:"calls"`
}

// APISummary is one entry point over all processes.
type APISummary struct {
	Name    string `json:"name"`
	Calls   uint64 `json:"calls"`
	Errors  uint64 `json:"errors"`
	TotalNs uint64 `json:"total_ns"`
	MeanNs  uint64 `json:"mean_ns"`
	Bytes   uint64 `json:"bytes,omitempty"`
}

// Summary is what a traced run did, over every process it started.
type Summary struct {
	Processes []Process    `json:"processes"`
	Overflow  uint32       `json:"overflow_processes"` // counted together in one slot
	APIs      []APISummary `json:"apis"`
	ExitCode  int          `json:"exit_code"`
}

// Summarize reads every slot of the region.
func (r *Region) Summarize() Summary {
	h := r.header()
	var sum Summary
	totals := make([]APISummary, len(api.Names))
	n := int(atomic.LoadUint32(&h.NextSlot))
	if n > int(h.NSlots) {
		n = int(h.NSlots)
	}
	add := func(stats []APIStat) uint64 {
		var calls uint64
		for i := range stats {
			c := atomic.LoadUint64(&stats[i].Calls)
			if c == 0 {
				continue
			}
			calls += c
			totals[i].Calls += c
			totals[i].Errors += atomic.LoadUint64(&stats[i].Errors)
			totals[i].TotalNs += atomic.LoadUint64(&stats[i].Ns)
			totals[i].Bytes += atomic.LoadUint64(&stats[i].Bytes)
		}
		return calls
	}
	_, overflow := r.slot(0)
	add(overflow)
	sum.Overflow = atomic.LoadUint32(&h.Overflowed)
	for i := 1; i < n; i++ {
		s, stats := r.slot(i)
		state := atomic.LoadUint32(&s.State)
		if state == 0 {
			continue // claimed but not yet filled in
		}
		p := Process{Pid: int(s.Pid), Ppid: int(s.Ppid), Comm: strings.TrimRight(string(s.Comm[:]), "\x00")}
		switch {
		case state == SlotExited:
			p.Status = "exited"
		case r.replacedByExec(i, p.Pid, n):
			p.Status = "exec"
		case r.alive(i):
			p.Status = "running"
		default:
			p.Status = "gone"
		}
		p.Calls = add(stats)
		sum.Processes = append(sum.Processes, p)
	}
	for i, t := range totals {
		if t.Calls == 0 {
			continue
		}
		t.Name = api.Names[i]
		t.MeanNs = t.TotalNs / t.Calls
		sum.APIs = append(sum.APIs, t)
	}
	sort.Slice(sum.APIs, func(a, b int) bool {
		if sum.APIs[a].Calls != sum.APIs[b].Calls {
			return sum.APIs[a].Calls > sum.APIs[b].Calls
		}
		return sum.APIs[a].Name < sum.APIs[b].Name
	})
	return sum
}

// alive reports whether the process of slot i still holds its lock.
func (r *Region) alive(i int) bool {
	held, err := liveness.Held(r.f, int64(slotOffset(i)), 1)
	return err == nil && held
}

// A later slot with the same pid is the image an exec replaced this one with.
func (r *Region) replacedByExec(i, pid, n int) bool {
	for j := i + 1; j < n; j++ {
		if s, _ := r.slot(j); int(atomic.LoadInt32(&s.Pid)) == pid {
			return true
		}
	}
	return false
}

// WriteJSON writes the summary as one JSON document.
func (s Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// WriteText writes the summary as tables.
func (s Summary) WriteText(w io.Writer) error {
	var b bytes.Buffer
	var total time.Duration
	var calls uint64
	for _, a := range s.APIs {
		total += time.Duration(a.TotalNs)
		calls += a.Calls
	}
	status := map[string]int{}
	for _, p := range s.Processes {
		status[p.Status]++
	}
	var parts []string
	for _, k := range []string{"exited", "exec", "gone", "running"} {
		if status[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", status[k], k))
		}
	}
	fmt.Fprintf(&b, "flexgv trace: %s (%s), %s, %s in the driver, exit code %d\n",
		plural(len(s.Processes), "process", "processes"), strings.Join(parts, ", "), plural(int(calls), "driver call", "driver calls"),
		fmtDur(uint64(total)), s.ExitCode)
	if s.Overflow > 0 {
		fmt.Fprintf(&b, "flexgv trace: %s found no free slot; their calls are counted without a process (raise --slots)\n",
			plural(int(s.Overflow), "process", "processes"))
	}
	// Names left, numbers right.
	width := len("API")
	for _, a := range s.APIs {
		width = max(width, len(a.Name))
	}
	fmt.Fprintf(&b, "%-*s %8s %7s %10s %10s %10s\n", width, "API", "CALLS", "ERRORS", "TOTAL", "MEAN", "BYTES")
	for _, a := range s.APIs {
		bytes := "-"
		if api.Bytes[a.Name] {
			bytes = fmtBytes(a.Bytes)
		}
		fmt.Fprintf(&b, "%-*s %8d %7d %10s %10s %10s\n", width, a.Name, a.Calls, a.Errors, fmtDur(a.TotalNs), fmtDur(a.MeanNs), bytes)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tPPID\tCOMMAND\tSTATUS\tCALLS")
	for _, p := range s.Processes {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\n", p.Pid, p.Ppid, p.Comm, p.Status, p.Calls)
	}
	tw.Flush()
	_, err := w.Write(b.Bytes())
	return err
}

func fmtDur(ns uint64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2fs", float64(ns)/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2fms", float64(ns)/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1fus", float64(ns)/1e3)
	}
	return fmt.Sprintf("%dns", ns)
}

func fmtBytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%dB", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

// plural is n and the noun's form for it.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
