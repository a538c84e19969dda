package top

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
)

// Rates are what a tenant did on a GPU between two snapshots, as
// fractions of the time between them; NaN where unknown (no earlier
// snapshot, a tenant that was not there, counters that started again).
type Rates struct {
	Achieved  float64 // GPU time held
	Throttled float64 // time waited to launch, summed over its processes
}

// rates compares t on GPU uuid with the earlier snapshot prev.
func rates(prev *Snapshot, uuid string, t Tenant, at time.Time) Rates {
	r := Rates{math.NaN(), math.NaN()}
	if prev == nil || !t.Scheduled {
		return r
	}
	dt := float64(at.Sub(prev.At).Nanoseconds())
	if dt <= 0 {
		return r
	}
	for _, g := range prev.GPUs {
		if g.UUID != uuid {
			continue
		}
		for _, p := range g.Tenants {
			if p.Name == t.Name && p.Scheduled && t.HeldNs >= p.HeldNs && t.WaitedNs >= p.WaitedNs {
				// At most all of it: the reads of the two snapshots
				// take their own time, which dt does not see.
				r.Achieved = min(float64(t.HeldNs-p.HeldNs)/dt, 1)
				r.Throttled = float64(t.WaitedNs-p.WaitedNs) / dt
			}
		}
	}
	return r
}

// barWidth is the share bars' width in characters.
const barWidth = 20

// bar draws achieved (0 to 1) as '#' over '.', with the target share
// marked '|' at its place; unknown achieved draws no fill.
func bar(achieved float64, target uint32) string {
	b := []byte(strings.Repeat(".", barWidth))
	if !math.IsNaN(achieved) {
		n := int(math.Round(min(max(achieved, 0), 1) * barWidth))
		for i := range n {
			b[i] = '#'
		}
	}
	if target > 0 {
		i := min(int(math.Round(float64(target)/10000*barWidth)), barWidth) - 1
		b[max(i, 0)] = '|'
	}
	return "[" + string(b) + "]"
}

func pct(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", f*100)
}

// Render writes the view of cur, with rates over the time since prev (nil:
// none yet).
func Render(prev *Snapshot, cur Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "flexgv top  %s", cur.At.Format("15:04:05"))
	if prev != nil {
		fmt.Fprintf(&b, "  achieved over the last %.1fs", cur.At.Sub(prev.At).Seconds())
	}
	b.WriteString("\n")
	if cur.NVMLErr != nil {
		fmt.Fprintf(&b, "no NVML figures: %v\n", cur.NVMLErr)
	}
	if len(cur.GPUs) == 0 {
		b.WriteString("\nno GPU, no tenant\n")
	}
	for _, g := range cur.GPUs {
		b.WriteString("\n")
		b.WriteString(gpuLine(g))
		b.WriteString("\n")
		if len(g.Tenants) == 0 {
			b.WriteString("  no tenant\n")
			continue
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TENANT\tSHARE\tACHIEVED\t\tCAP\tPRIORITY\tSMS\tMEMORY\tPROCS\tTHROTTLED\tPREEMPTED")
		for _, t := range g.Tenants {
			r := rates(prev, g.UUID, t, cur.At)
			share, limit, sms := "-", "-", "-"
			if t.SM > 0 {
				sms = fmt.Sprintf("%d%%", t.SM)
			}
			if t.Policy.Share > 0 {
				share = sched.Percent(t.Policy.Share)
			}
			if t.Policy.Cap > 0 {
				limit = sched.Percent(t.Policy.Cap)
			}
			mem := tenant.FormatSize(t.Used)
			if t.Quota > 0 {
				mem += "/" + tenant.FormatSize(t.Quota)
			}
			throttled, preempted, achieved := "-", "-", "-"
			if t.Scheduled {
				throttled = fmt.Sprintf("%.1fs", float64(t.WaitedNs)/1e9)
				if !math.IsNaN(r.Throttled) {
					throttled += fmt.Sprintf(" (%s)", pct(r.Throttled))
				}
				preempted = fmt.Sprint(t.Preemptions)
				achieved = bar(r.Achieved, t.Policy.Share)
			}
			name := t.Name
			if t.Holder {
				name += " *"
			}
			if t.Suspended {
				name += " (suspended)"
			}
			prio := sched.PriorityName(t.Policy.Priority)
			if t.BesideOffNs > 0 { // lower priorities take turns with it, not beside it, for this long
				prio += fmt.Sprintf(" (turns %.0fs)", math.Ceil(float64(t.BesideOffNs)/1e9))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", name, share, achieved, pct(r.Achieved), limit,
				prio, sms, mem, t.Procs, throttled, preempted)
		}
		tw.Flush()
	}
	return b.String()
}

func gpuLine(g GPU) string {
	var parts []string
	switch {
	case g.Index >= 0 && g.UUID != "":
		parts = append(parts, fmt.Sprintf("GPU %d  %s", g.Index, g.UUID))
	case g.UUID != "":
		parts = append(parts, "GPU "+g.UUID)
	default:
		parts = append(parts, fmt.Sprintf("CUDA device %d", g.Index))
	}
	if g.Name != "" {
		parts = append(parts, g.Name)
	}
	if g.NVML {
		parts = append(parts, fmt.Sprintf("memory %s/%s", tenant.FormatSize(g.MemUsed), tenant.FormatSize(g.MemTotal)),
			fmt.Sprintf("utilization %d%%", g.Util))
	}
	parts = append(parts, fmt.Sprintf("hand-overs %d", g.Switches))
	return strings.Join(parts, "  ")
}
