package top

import (
	"encoding/json"
	"io"
	"math"
	"time"
)

// The JSON form of a snapshot: sizes in bytes, shares and caps in
// hundredths of a percent as flexgv ps --json gives them, rates as
// fractions of the interval (null where unknown).
type jsonView struct {
	At       time.Time `json:"at"`
	Interval float64   `json:"interval_s"` // rates are over it; 0: none yet
	NVMLErr  string    `json:"nvml_error,omitempty"`
	GPUs     []jsonGPU `json:"gpus"`
}

type jsonGPU struct {
	UUID      string       `json:"uuid"`
	Index     int          `json:"index"` // -1: NVML does not know the GPU
	Name      string       `json:"name,omitempty"`
	NVML      bool         `json:"nvml"` // whether the memory and utilization figures are known
	MemTotal  uint64       `json:"memory_total"`
	MemUsed   uint64       `json:"memory_used"`
	Util      uint32       `json:"utilization"` // percent
	HandOvers uint64       `json:"hand_overs"`
	Tenants   []jsonTenant `json:"tenants"`
}

type jsonTenant struct {
	Name        string   `json:"name"`
	Share       uint32   `json:"compute_share"`
	Cap         uint32   `json:"compute_max"`
	Priority    uint32   `json:"priority"`
	SM          uint32   `json:"sm"`
	Quota       uint64   `json:"quota"`
	Used        uint64   `json:"used"`
	Procs       int      `json:"processes"`
	Suspended   bool     `json:"suspended,omitempty"`
	Scheduled   bool     `json:"scheduled"` // the counters below are known
	HeldNs      uint64   `json:"held_ns"`
	WaitedNs    uint64   `json:"waited_ns"`
	Preemptions uint64   `json:"preemptions"`
	Holder      bool     `json:"holder"`
	BesideOffNs uint64   `json:"beside_off_ns,omitempty"` // lower priorities take turns with it, not beside it, this much longer (MPS)
	Achieved    *float64 `json:"achieved"`
	Throttled   *float64 `json:"throttled"`
}

func known(f float64) *float64 {
	if math.IsNaN(f) {
		return nil
	}
	return &f
}

// WriteJSON writes cur, with rates over the time since prev (nil: none yet).
func WriteJSON(w io.Writer, prev *Snapshot, cur Snapshot) error {
	v := jsonView{At: cur.At, GPUs: []jsonGPU{}}
	if prev != nil {
		v.Interval = cur.At.Sub(prev.At).Seconds()
	}
	if cur.NVMLErr != nil {
		v.NVMLErr = cur.NVMLErr.Error()
	}
	for _, g := range cur.GPUs {
		jg := jsonGPU{UUID: g.UUID, Index: g.Index, Name: g.Name, NVML: g.NVML, MemTotal: g.MemTotal, MemUsed: g.MemUsed,
			Util: g.Util, HandOvers: g.Switches, Tenants: []jsonTenant{}}
		for _, t := range g.Tenants {
			r := rates(prev, g.UUID, t, cur.At)
			jg.Tenants = append(jg.Tenants, jsonTenant{Name: t.Name, Share: t.Policy.Share, Cap: t.Policy.Cap,
				Priority: t.Policy.Priority, SM: t.SM, Quota: t.Quota, Used: t.Used, Procs: t.Procs, Suspended: t.Suspended, Scheduled: t.Scheduled,
				HeldNs: t.HeldNs, WaitedNs: t.WaitedNs, Preemptions: t.Preemptions, Holder: t.Holder,
				BesideOffNs: t.BesideOffNs, Achieved: known(r.Achieved), Throttled: known(r.Throttled)})
		}
		v.GPUs = append(v.GPUs, jg)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
