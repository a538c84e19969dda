// Package top is flexgv top: the node's GPUs and their tenants, what each
// tenant asks of a GPU's time and what it got, read from the state folder
// (tenant files, GPU scheduler regions) and NVML, whether a daemon runs or
// not.
package top

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
)

// Snapshot is the node at one instant.
type Snapshot struct {
	At      time.Time
	GPUs    []GPU
	NVMLErr error // why the GPUs have no NVML figures
}

// GPU is one device and its tenants.
type GPU struct {
	UUID     string // "" for tenant entries made without NVML: CUDA device Index
	Index    int    // NVML's index; -1 where NVML does not know the GPU
	Name     string
	NVML     bool // whether MemTotal, MemUsed and Util are known
	MemTotal uint64
	MemUsed  uint64
	Util     uint32 // percent
	Switches uint64 // its scheduler's hand-overs
	Tenants  []Tenant
}

// Tenant is one tenant on one GPU.
type Tenant struct {
	Name        string
	Policy      sched.Policy
	Scheduled   bool   // it is in the GPU's scheduler: the counters below are its
	HeldNs      uint64 // GPU time it held
	WaitedNs    uint64 // time its processes waited to launch
	Preemptions uint64
	Holder      bool   // it holds the GPU now
	Quota, Used uint64 // memory
	Procs       int    // its processes on the GPU
	Suspended   bool   // flexgv suspend holds its processes off the GPU
	SM          uint32 // percentage of the SMs under MPS; 0: all
	BesideOffNs uint64 // how much longer lower priorities take turns with it rather than run beside it (MPS)
}

// Source is what a snapshot reads.
type Source struct {
	Dir     string                           // the state folder
	Devices func() ([]gpuinfo.Device, error) // NVML
}

// Read takes a snapshot: the scheduler regions and tenant files of the
// state folder, and NVML where it answers.
func (s Source) Read() (Snapshot, error) {
	var snap Snapshot
	devs, err := s.Devices()
	snap.NVMLErr = err
	// The holder's current turn counts up to the moment the regions are
	// read: that moment, not one before NVML answered, is the snapshot's.
	snap.At = time.Now()
	scheds, _, err := sched.List(s.Dir)
	if err != nil {
		return Snapshot{}, err
	}
	infos, _, err := tenant.List(s.Dir)
	if err != nil {
		return Snapshot{}, err
	}
	byKey := map[string]*GPU{}
	var order []string
	gpu := func(uuid string, index int) *GPU {
		key := uuid
		if key == "" {
			key = fmt.Sprintf("device %d", index)
		}
		if g := byKey[key]; g != nil {
			return g
		}
		g := &GPU{UUID: uuid, Index: -1}
		if uuid == "" {
			g.Index = index
		}
		byKey[key] = g
		order = append(order, key)
		return g
	}
	for _, d := range devs {
		g := gpu(d.UUID, d.Index)
		g.Index, g.Name, g.NVML, g.MemTotal, g.MemUsed, g.Util = d.Index, d.Name, true, d.Total, d.Used, d.Util
	}
	for _, sg := range scheds {
		g := gpu(sg.UUID, -1)
		g.Switches = sg.Switches
		for _, st := range sg.Tenants {
			g.Tenants = append(g.Tenants, Tenant{Name: st.Name, Policy: st.Policy, Scheduled: true, HeldNs: st.HeldNs,
				WaitedNs: st.WaitedNs, Preemptions: st.Preemptions, Holder: st.Holder, Procs: len(st.Pids), BesideOffNs: st.BesideOffNs})
		}
	}
	sms := map[string]uint32{}
	for _, in := range infos {
		sms[in.Name] = in.SM
		for _, d := range in.Devices {
			if d.Quota == 0 && d.Used == 0 {
				continue
			}
			g := gpu(d.UUID, d.Index)
			i := slices.IndexFunc(g.Tenants, func(t Tenant) bool { return t.Name == in.Name })
			if i < 0 {
				g.Tenants = append(g.Tenants, Tenant{Name: in.Name, Policy: sched.Policy{Share: d.Share, Cap: d.ComputeMax, Priority: in.Priority}})
				i = len(g.Tenants) - 1
			}
			t := &g.Tenants[i]
			t.Quota, t.Used = d.Quota, d.Used
			procs := 0
			for _, p := range in.Procs {
				if p.Used[d.Index] > 0 {
					procs++
					t.Suspended = t.Suspended || p.Suspended
				}
			}
			// Processes that hold memory there and those taking turns are
			// mostly the same ones; either may be missing from the other.
			t.Procs = max(t.Procs, procs)
		}
	}
	for _, k := range order {
		g := byKey[k]
		for i := range g.Tenants {
			g.Tenants[i].SM = sms[g.Tenants[i].Name]
		}
		slices.SortFunc(g.Tenants, func(a, b Tenant) int { return cmp.Compare(a.Name, b.Name) })
		snap.GPUs = append(snap.GPUs, *g)
	}
	slices.SortStableFunc(snap.GPUs, func(a, b GPU) int {
		if a.Index < 0 || b.Index < 0 {
			return cmp.Compare(b.Index, a.Index) // known indexes first
		}
		return cmp.Compare(a.Index, b.Index)
	})
	return snap, nil
}
