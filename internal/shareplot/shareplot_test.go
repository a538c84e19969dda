package shareplot

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/schedtest"
)

const gpu = "GPU-aaaaaaaa-1111-2222-3333-444444444444"

// samples of a 30/70 pair over 4 s, a's share raised to 50 % after 2 s;
// b's entry made again at 4 s.
func samples() []Sample {
	var out []Sample
	var ha, hb uint64
	for i := 0; i <= 4; i++ {
		ta, tb := 0.3, 0.7
		if i > 2 {
			ta, tb = 0.5, 0.5
		}
		// In every window up to this sample a gets 1 pp too much.
		if i > 0 {
			ha += uint64((ta + 0.01) * 1e9)
			hb += uint64((tb - 0.01) * 1e9)
		}
		out = append(out, Sample{T: float64(i), Tenant: "a", HeldNs: ha, Target: ta}, Sample{T: float64(i), Tenant: "b", HeldNs: hb, Target: tb})
	}
	out[len(out)-1].HeldNs = 0
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestWindowsAndSummary(t *testing.T) {
	series := Windows(samples())
	if len(series) != 2 || series[0].Tenant != "a" || len(series[0].Points) != 4 || len(series[1].Points) != 3 {
		t.Fatalf("series %+v", series)
	}
	if p := series[0].Points[0]; p.T != 1 || !near(p.Achieved, 0.31) || p.Target != 0.3 {
		t.Errorf("a's first window: %+v", p)
	}
	if p := series[0].Points[3]; !near(p.Achieved, 0.51) || p.Target != 0.5 {
		t.Errorf("a's last window: %+v", p)
	}
	st := Summary(series)
	if a := st[0]; a.Windows != 4 || !near(a.Achieved, (0.31*2+0.51*2)/4) || !near(a.Target, 0.4) || !near(a.MeanError, 0.01) || !near(a.P95Error, 0.01) {
		t.Errorf("a's summary: %+v", a)
	}
	if b := st[1]; b.Windows != 3 || !near(b.MeanError, 0.01) {
		t.Errorf("b's summary: %+v", b)
	}
}

// The plot is well-formed SVG with one achieved polyline and one target
// line per tenant.
func TestSVG(t *testing.T) {
	var b bytes.Buffer
	if err := SVG(&b, "30/70 then 50/50 <sim>", Windows(samples())); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&b)
	count := map[string]int{}
	var titles []string
	var inTitle bool
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if e.Name.Local == "svg" && e.Name.Space != "http://www.w3.org/2000/svg" {
				t.Errorf("svg element in namespace %q", e.Name.Space)
			}
			key := e.Name.Local
			for _, a := range e.Attr {
				if a.Name.Local == "class" {
					key += "." + a.Value
				}
			}
			count[key]++
			inTitle = e.Name.Local == "title"
		case xml.CharData:
			if inTitle {
				titles = append(titles, string(e))
			}
		case xml.EndElement:
			inTitle = false
		}
	}
	if count["svg"] != 1 || count["polyline.achieved"] != 2 || count["polyline"] != 0 || count["path.target"] != 2 {
		t.Errorf("elements %v, want one svg, 2 achieved polylines, 2 target paths", count)
	}
	if strings.Join(titles, ",") != "a,b" {
		t.Errorf("polyline titles %q", titles)
	}
	if err := SVG(io.Discard, "", nil); err == nil || !strings.Contains(err.Error(), "nothing to plot") {
		t.Errorf("no series: %v", err)
	}
}

func TestCSVRoundTripAndRefusals(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCSV(&b, samples()); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCSV(&b)
	if err != nil || len(got) != len(samples()) || got[3] != samples()[3] {
		t.Fatalf("read back: %+v %v", got, err)
	}
	for in, msg := range map[string]string{
		"":                                      "samples: EOF",
		"t,tenant,held,target\n":                `the first line is ["t" "tenant" "held" "target"]`,
		"time_s,tenant,held_ns,target\n1,a,2\n": "samples line 2: 3 fields, want 4 (time_s,tenant,held_ns,target)",
		"time_s,tenant,held_ns,target\nx,a,2,0\n":  `samples line 2: time_s "x" is not a number of seconds`,
		"time_s,tenant,held_ns,target\n1,a,-2,0\n": `samples line 2: held_ns "-2" is not a whole number`,
		"time_s,tenant,held_ns,target\n1,a,2,3\n":  `samples line 2: target "3" is not a share from 0 to 1`,
		"time_s,tenant,held_ns,target\n1,,2,0\n":   "samples line 2: no tenant",
	} {
		if _, err := ReadCSV(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ReadCSV(%q): %v, want %q", in, err, msg)
		}
	}
}

// Recording reads a live region: what its shims count, and targets as they
// are changed.
func TestRecord(t *testing.T) {
	dir := t.TempDir()
	m, err := sched.Join(dir, gpu, "a", sched.Policy{Share: 3000, Priority: sched.PriorityNormal})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r := schedtest.Open(t, dir, gpu)
	// The tenant holds the GPU for as long as the recording lasts, so
	// its held time grows between any two samples however late the host
	// runs either side; 200 ms leaves room for several.
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			r.Run(m.Index, 1_000_000, 0, 0)
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	got, err := Record(context.Background(), dir, gpu, 5*time.Millisecond, 200*time.Millisecond)
	close(stop)
	<-done
	if err != nil || len(got) < 2 || got[0].Tenant != "a" || got[0].Target != 0.3 || got[len(got)-1].HeldNs <= got[0].HeldNs {
		t.Fatalf("recorded %+v %v", got, err)
	}
	if _, err := Record(context.Background(), dir, "GPU-none", time.Millisecond, time.Millisecond); err == nil || !strings.Contains(err.Error(), "GPU GPU-none has no scheduler") {
		t.Errorf("a GPU without a scheduler: %v", err)
	}
}

// The 95th percentile of 20 windows is the 19th smallest error.
func TestP95(t *testing.T) {
	s := Series{Tenant: "a"}
	for i := 0; i < 20; i++ {
		e := 0.01
		if i >= 18 {
			e = 0.1 * float64(i-16)
		}
		s.Points = append(s.Points, Point{T: float64(i + 1), Achieved: 0.5 + e, Target: 0.5})
	}
	if st := Summary([]Series{s})[0]; !near(st.P95Error, 0.2) || !near(st.MeanError, (18*0.01+0.2+0.3)/20) {
		t.Errorf("summary %+v", st)
	}
}
