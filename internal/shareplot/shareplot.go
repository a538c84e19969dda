// Package shareplot records what a GPU's scheduler gives each tenant over
// time and draws it: each tenant's achieved share of the GPU's time per
// window next to its target, as an SVG, with the error statistics the
// compute-sharing benchmarks report. Samples can be kept as CSV, to plot
// them later or elsewhere.
package shareplot

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flexgv/flexgv/internal/sched"
)

// Sample is what a GPU's scheduler had counted for one tenant at one time.
type Sample struct {
	T      float64 // seconds since the first sample
	Tenant string
	HeldNs uint64  // GPU time it had held
	Target float64 // its guaranteed share then, 0 to 1
}

// Record reads GPU uuid's scheduler in dir every interval until d has
// passed or ctx ends, and returns what it read.
func Record(ctx context.Context, dir, uuid string, interval, d time.Duration) ([]Sample, error) {
	var out []Sample
	start := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		g, err := sched.Read(dir, uuid)
		if err != nil {
			return out, err
		}
		if g == nil {
			return out, fmt.Errorf("GPU %s has no scheduler in %s: no tenant with a compute policy has used it", uuid, dir)
		}
		t := time.Since(start).Seconds()
		for _, x := range g.Tenants {
			out = append(out, Sample{T: t, Tenant: x.Name, HeldNs: x.HeldNs, Target: float64(x.Policy.Share) / 10000})
		}
		if time.Since(start) >= d {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, nil
		case <-tick.C:
		}
	}
}

var csvHeader = []string{"time_s", "tenant", "held_ns", "target"}

// WriteCSV writes samples as CSV, with a header line.
func WriteCSV(w io.Writer, samples []Sample) error {
	cw := csv.NewWriter(w)
	cw.Write(csvHeader)
	for _, s := range samples {
		cw.Write([]string{strconv.FormatFloat(s.T, 'f', 6, 64), s.Tenant, strconv.FormatUint(s.HeldNs, 10), strconv.FormatFloat(s.Target, 'f', 4, 64)})
	}
	cw.Flush()
	return cw.Error()
}

// ReadCSV reads samples WriteCSV wrote.
func ReadCSV(r io.Reader) ([]Sample, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // checked here, to say what is expected
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("samples: %w", err)
	}
	if !slices.Equal(head, csvHeader) {
		return nil, fmt.Errorf("samples: the first line is %q, want the header %q", head, csvHeader)
	}
	var out []Sample
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("samples: %w", err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(csvHeader) {
			return nil, fmt.Errorf("samples line %d: %d fields, want %d (%s)", line, len(rec), len(csvHeader), strings.Join(csvHeader, ","))
		}
		s := Sample{Tenant: rec[1]}
		var e1, e2, e3 error
		s.T, e1 = strconv.ParseFloat(rec[0], 64)
		s.HeldNs, e2 = strconv.ParseUint(rec[2], 10, 64)
		s.Target, e3 = strconv.ParseFloat(rec[3], 64)
		switch {
		case e1 != nil || math.IsNaN(s.T) || math.IsInf(s.T, 0) || s.T < 0:
			return nil, fmt.Errorf("samples line %d: time_s %q is not a number of seconds", line, rec[0])
		case e2 != nil:
			return nil, fmt.Errorf("samples line %d: held_ns %q is not a whole number of nanoseconds", line, rec[2])
		case e3 != nil || !(s.Target >= 0 && s.Target <= 1):
			return nil, fmt.Errorf("samples line %d: target %q is not a share from 0 to 1", line, rec[3])
		case s.Tenant == "":
			return nil, fmt.Errorf("samples line %d: no tenant", line)
		}
		out = append(out, s)
	}
}

// Point is one window of one tenant: the share of the GPU's time it held
// in the window that ended at T, and its target then.
type Point struct {
	T, Achieved, Target float64
}

// Series is one tenant's windows, in time order.
type Series struct {
	Tenant string
	Points []Point
}

// Windows turns samples into each tenant's achieved share per window
// between consecutive samples of it, tenants in name order. A window in
// which its counter went back (its entry was made again) is left out.
func Windows(samples []Sample) []Series {
	by := map[string][]Sample{}
	for _, s := range samples {
		by[s.Tenant] = append(by[s.Tenant], s)
	}
	var out []Series
	for name, ss := range by {
		slices.SortStableFunc(ss, func(a, b Sample) int { return cmp.Compare(a.T, b.T) })
		sr := Series{Tenant: name}
		for i := 1; i < len(ss); i++ {
			a, b := ss[i-1], ss[i]
			if b.T <= a.T || b.HeldNs < a.HeldNs {
				continue
			}
			sr.Points = append(sr.Points, Point{T: b.T, Achieved: float64(b.HeldNs-a.HeldNs) / 1e9 / (b.T - a.T), Target: b.Target})
		}
		if len(sr.Points) > 0 {
			out = append(out, sr)
		}
	}
	slices.SortFunc(out, func(a, b Series) int { return cmp.Compare(a.Tenant, b.Tenant) })
	return out
}

// Stats sum up one tenant's windows: mean share achieved and target, and
// the absolute error |achieved - target|, mean and 95th percentile.
type Stats struct {
	Tenant              string
	Windows             int
	Achieved, Target    float64 // means
	MeanError, P95Error float64
}

// Summary gives each series' statistics.
func Summary(series []Series) []Stats {
	var out []Stats
	for _, s := range series {
		st := Stats{Tenant: s.Tenant, Windows: len(s.Points)}
		errs := make([]float64, len(s.Points))
		for i, p := range s.Points {
			st.Achieved += p.Achieved
			st.Target += p.Target
			errs[i] = math.Abs(p.Achieved - p.Target)
			st.MeanError += errs[i]
		}
		n := float64(len(s.Points))
		st.Achieved, st.Target, st.MeanError = st.Achieved/n, st.Target/n, st.MeanError/n
		slices.Sort(errs)
		st.P95Error = errs[int(math.Ceil(0.95*n))-1]
		out = append(out, st)
	}
	return out
}
