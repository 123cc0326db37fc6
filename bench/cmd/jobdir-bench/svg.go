package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// palette colours the systems in table order.
var palette = []string{"#1f77b4", "#17becf", "#2ca02c", "#d62728", "#ff9896", "#9467bd", "#c5b0d5", "#8c564b"}

// writeSVG draws the median work-off throughput against the worker count,
// one line per system and process count (solid: 1 process, dashed: 2).
func (rp *report) writeSVG(w io.Writer) {
	const (
		width, height = 860, 480
		left, right   = 80, 250
		top, bottom   = 40, 60
	)
	workers := rp.cfg.Workers
	plotW := float64(width - left - right)
	plotH := float64(height - top - bottom)
	// A logarithmic y axis: the in-memory store is tens of times faster
	// than the rest, which would otherwise lie flat along the bottom.
	minY, maxY := math.Inf(1), 0.0
	for _, s := range rp.systems {
		for _, p := range []int{1, 2} {
			for _, wk := range workers {
				if v, ok := rp.median(workoffMetric(p, wk).ID, s.name); ok && v > 0 {
					maxY = math.Max(maxY, v)
					minY = math.Min(minY, v)
				}
			}
		}
	}
	if maxY == 0 {
		minY, maxY = 1, 10
	}
	lo := math.Floor(math.Log10(minY))
	hi := math.Max(math.Ceil(math.Log10(maxY)), lo+1)
	x := func(i int) float64 {
		if len(workers) == 1 {
			return float64(left) + plotW/2
		}
		return float64(left) + plotW*float64(i)/float64(len(workers)-1)
	}
	y := func(v float64) float64 { return float64(top) + plotH*(1-(math.Log10(v)-lo)/(hi-lo)) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">Work-off throughput of %s no-op jobs (median of %d rounds)</text>`+"\n", left, thousands(int64(rp.cfg.Jobs)), rp.cfg.Rounds)
	// Axes and grid: a labelled line at each power of ten, faint ones at
	// 2 and 5 times it.
	for e := lo; e <= hi; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if e == hi && m > 1 {
				break
			}
			colour := "#eee"
			if m == 1 {
				colour = "#ccc"
			}
			fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, float64(left)+plotW, y(v), y(v), colour)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(v)+4, fmtNum(v))
		}
	}
	for i, wk := range workers {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x(i), height-bottom+18, wk)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">workers per process</text>`+"\n", float64(left)+plotW/2, height-bottom+40)
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">jobs/s (log scale)</text>`+"\n", float64(top)+plotH/2)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%.1f" stroke="black"/>`+"\n", left, left, top, float64(top)+plotH)
	fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, float64(left)+plotW, float64(top)+plotH, float64(top)+plotH)
	// Lines.
	legendY := top
	for si, s := range rp.systems {
		colour := palette[si%len(palette)]
		for _, p := range []int{1, 2} {
			var pts []string
			for i, wk := range workers {
				if v, ok := rp.median(workoffMetric(p, wk).ID, s.name); ok {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
				}
			}
			if len(pts) == 0 {
				continue
			}
			dash := ""
			if p == 2 {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), colour, dash)
			for _, pt := range pts {
				xy := strings.Split(pt, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], colour)
			}
			lx := width - right + 16
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", lx, lx+24, legendY, legendY, colour, dash)
			fmt.Fprintf(&b, `<text x="%d" y="%d">%s, %d proc</text>`+"\n", lx+30, legendY+4, html.EscapeString(s.label), p)
			legendY += 18
		}
	}
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}
