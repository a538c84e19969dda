package shareplot

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// Plot geometry, in SVG user units.
const (
	width, height            = 900, 420
	left, right, top, bottom = 60, 170, 40, 50
	plotW, plotH             = width - left - right, height - top - bottom
)

// colors tell tenants apart; the ninth reuses the first.
var colors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

func escape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// SVG draws each series' achieved share (a solid polyline) over time next
// to its target (a dashed step line of the same colour), shares from 0 to
// 100 % of the GPU's time.
func SVG(w io.Writer, title string, series []Series) error {
	if len(series) == 0 {
		return fmt.Errorf("nothing to plot: no tenant has two samples")
	}
	tmax := 0.0
	for _, s := range series {
		tmax = max(tmax, s.Points[len(s.Points)-1].T)
	}
	x := func(t float64) float64 { return left + t/tmax*plotW }
	y := func(v float64) float64 { return top + (1-min(max(v, 0), 1))*plotH }

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14">%s</text>`+"\n", left, top-15, escape(title))
	for _, v := range []float64{0, 0.25, 0.5, 0.75, 1} {
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, left, y(v), left+plotW, y(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%.0f%%</text>`+"\n", left-6, y(v)+4, v*100)
	}
	step := tickStep(tmax)
	for t := 0.0; t <= tmax+1e-9; t += step {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999"/>`, x(t), top+plotH, x(t), top+plotH+4)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%g</text>`+"\n", x(t), top+plotH+18, t)
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", left, top, plotW, plotH)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">time (s)</text>`+"\n", left+plotW/2, height-12)
	fmt.Fprintf(b, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">share of the GPU's time</text>`+"\n", top+plotH/2)
	for i, s := range series {
		c := colors[i%len(colors)]
		// The target holds over each window, up to the window's end: a
		// step where it changes.
		var path strings.Builder
		cur := s.Points[0].Target
		fmt.Fprintf(&path, "M%.1f,%.1f", x(0), y(cur))
		for j, p := range s.Points[1:] {
			if p.Target != cur {
				cur = p.Target
				fmt.Fprintf(&path, " H%.1f V%.1f", x(s.Points[j].T), y(cur))
			}
		}
		fmt.Fprintf(&path, " H%.1f", x(s.Points[len(s.Points)-1].T))
		fmt.Fprintf(b, `<path class="target" d="%s" fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", path.String(), c)
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.T), y(p.Achieved)))
		}
		fmt.Fprintf(b, `<polyline class="achieved" points="%s" fill="none" stroke="%s" stroke-width="2"><title>%s</title></polyline>`+"\n",
			strings.Join(pts, " "), c, escape(s.Tenant))
		ly := top + 10 + i*36
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`, width-right+15, ly, width-right+40, ly, c)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s achieved</text>`+"\n", width-right+46, ly+4, escape(s.Tenant))
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`, width-right+15, ly+16, width-right+40, ly+16, c)
		fmt.Fprintf(b, `<text x="%d" y="%d">target</text>`+"\n", width-right+46, ly+20)
	}
	b.WriteString("</svg>\n")
	return b.Flush()
}

// tickStep is a round step giving 4 to 10 ticks over [0, tmax].
func tickStep(tmax float64) float64 {
	step := 1e-3
	for tmax/step > 10 {
		switch {
		case tmax/(step*2) <= 10:
			return step * 2
		case tmax/(step*5) <= 10:
			return step * 5
		}
		step *= 10
	}
	return step
}
