package census

import (
	"fmt"
	"slices"
	"sort"
)

// Compare lists what differs between two censuses in what a remoting
// client must emulate: tables handed out or not, their layout (slots, size
// word, function or data), which function slots each workload both had
// calls into, and the refused UUIDs. Numbers of calls, addresses and
// offsets inside the driver are left out: they change from run to run and
// from build to build.
func Compare(old, cur Set) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	ou, cu := unite(old), unite(cur)
	for _, id := range mergedKeys(ou.uuids, cu.uuids) {
		o, inOld := ou.tables[id]
		c, inCur := cu.tables[id]
		switch {
		case !inCur:
			add("table %s (%s): no longer handed out (was to %v)", id, o.Shape(), ou.by[id])
		case !inOld:
			add("table %s (%s): new, handed out to %v", id, c.Shape(), cu.by[id])
		default:
			out = append(out, compareLayout(id, o, c)...)
		}
	}
	if len(old.Workloads) == 1 && len(cur.Workloads) == 1 {
		// Two reports: the same workload, whatever their files are called.
		out = append(out, compareCalls(cur.Workloads[0].Name, old.Workloads[0].Report, cur.Workloads[0].Report)...)
	} else {
		for _, ow := range old.Workloads {
			i := slices.IndexFunc(cur.Workloads, func(w Workload) bool { return w.Name == ow.Name })
			if i < 0 {
				add("workload %s: only in the old census", ow.Name)
				continue
			}
			out = append(out, compareCalls(ow.Name, ow.Report, cur.Workloads[i].Report)...)
		}
		for _, cw := range cur.Workloads {
			if !slices.ContainsFunc(old.Workloads, func(w Workload) bool { return w.Name == cw.Name }) {
				add("workload %s: only in the new census", cw.Name)
			}
		}
	}
	or, cr := refusedSet(old), refusedSet(cur)
	for _, k := range mergedKeys(or, cr) {
		switch {
		case !slices.Contains(cr, k):
			add("refused %s: no longer asked for, or now handed out", k)
		case !slices.Contains(or, k):
			add("refused %s: new", k)
		}
	}
	return out
}

func compareLayout(id string, o, c Table) []string {
	var out []string
	if o.AliasOf != c.AliasOf {
		return []string{fmt.Sprintf("table %s: %s, was %s", id, c.Shape(), o.Shape())}
	}
	if len(o.Slots) != len(c.Slots) {
		out = append(out, fmt.Sprintf("table %s: %d slots, was %d", id, len(c.Slots), len(o.Slots)))
	}
	for i := 0; i < min(len(o.Slots), len(c.Slots)); i++ {
		was, is := o.Slots[i], c.Slots[i]
		if kind(was) != kind(is) || (was.Kind == "size" && was.Value != is.Value) {
			out = append(out, fmt.Sprintf("table %s slot %d: %s %s, was %s %s", id, i, is.Kind, is.Value, was.Kind, was.Value))
		}
	}
	return out
}

// kind is a slot's kind with every function slot alike, however it was
// counted.
func kind(s Slot) string {
	if s.Kind == "skip" || s.Kind == "uncounted" {
		return "fn"
	}
	return s.Kind
}

func compareCalls(name string, o, c Report) []string {
	var out []string
	var ids []string
	for _, t := range o.Tables {
		ids = append(ids, t.UUID)
	}
	for _, t := range c.Tables {
		ids = append(ids, t.UUID)
	}
	sort.Strings(ids)
	for _, id := range slices.Compact(ids) {
		ot, inOld := tableOf(o, id)
		ct, inCur := tableOf(c, id)
		switch {
		case !inCur:
			out = append(out, fmt.Sprintf("%s: no longer handed table %s", name, id))
			continue
		case !inOld:
			out = append(out, fmt.Sprintf("%s: now handed table %s", name, id))
			continue
		}
		var now, gone []int
		for i := 0; i < min(len(ot.Slots), len(ct.Slots)); i++ {
			was, is := ot.Slots[i].Calls > 0, ct.Slots[i].Calls > 0
			if is && !was {
				now = append(now, i)
			}
			if was && !is && ct.Slots[i].Kind == "fn" {
				gone = append(gone, i)
			}
		}
		if len(now) > 0 {
			out = append(out, fmt.Sprintf("%s: table %s: slots %v now called", name, id, now))
		}
		if len(gone) > 0 {
			out = append(out, fmt.Sprintf("%s: table %s: slots %v no longer called", name, id, gone))
		}
	}
	return out
}

func refusedSet(s Set) []string {
	var out []string
	for _, w := range s.Workloads {
		for _, f := range w.Report.Refused {
			out = append(out, fmt.Sprintf("%s (CUresult %d)", f.UUID, f.Result))
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func mergedKeys(a, b []string) []string {
	all := append(slices.Clone(a), b...)
	sort.Strings(all)
	return slices.Compact(all)
}
