package main

import (
	"slices"
	"sort"
	"sync"
)

// metric describes one measured figure.
type metric struct {
	// ID identifies the figure in JSON, e.g. "insert-16".
	ID string `json:"id"`
	// Title is its row heading in the table.
	Title string `json:"title"`
	// Unit is what the values count: jobs/s, ms, µs, MiB or files/s.
	Unit string `json:"unit"`
	// Higher is true when a larger value is better.
	Higher bool `json:"higher_is_better"`
	// Group is the table the figure appears in.
	Group string `json:"group"`
	// Order sorts the rows within a group.
	Order int `json:"-"`
}

// series is every round's value of one metric for one system.
type series struct {
	Metric string    `json:"metric"`
	System string    `json:"system"`
	Values []float64 `json:"values"`
	// Notes says how a value was obtained where it matters (for example,
	// a work-off stopped at its time limit).
	Notes []string `json:"notes,omitempty"`
}

// results collects the figures of one invocation. It is safe for
// concurrent use.
type results struct {
	mu      sync.Mutex
	metrics map[string]metric
	series  map[[2]string]*series
	notes   []string
}

func newResults() *results {
	return &results{metrics: map[string]metric{}, series: map[[2]string]*series{}}
}

// empty reports whether no figure was recorded.
func (r *results) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.series) == 0
}

// add records one value of m for system.
func (r *results) add(m metric, system string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics[m.ID] = m
	k := [2]string{m.ID, system}
	s := r.series[k]
	if s == nil {
		s = &series{Metric: m.ID, System: system}
		r.series[k] = s
	}
	s.Values = append(s.Values, v)
}

// note attaches a remark to the series of m for system.
func (r *results) note(m metric, system, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics[m.ID] = m
	k := [2]string{m.ID, system}
	s := r.series[k]
	if s == nil {
		s = &series{Metric: m.ID, System: system}
		r.series[k] = s
	}
	if !slices.Contains(s.Notes, text) {
		s.Notes = append(s.Notes, text)
	}
}

// remark records a note about the whole run.
func (r *results) remark(text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, text)
}

// get returns the series of metric id for system, or nil.
func (r *results) get(id, system string) *series {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.series[[2]string{id, system}]
}

// sortedMetrics returns the metrics of group in table order.
func (r *results) sortedMetrics(group string) []metric {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ms []metric
	for _, m := range r.metrics {
		if m.Group == group {
			ms = append(ms, m)
		}
	}
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].Order != ms[j].Order {
			return ms[i].Order < ms[j].Order
		}
		return ms[i].ID < ms[j].ID
	})
	return ms
}

// summary is the median and spread of a series.
type summary struct {
	N        int
	Median   float64
	Min, Max float64
}

func summarize(vs []float64) summary {
	if len(vs) == 0 {
		return summary{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return summary{N: len(s), Median: med, Min: s[0], Max: s[len(s)-1]}
}

// percentile returns the p-th percentile (0 < p <= 100) of vs by the
// nearest-rank method.
func percentile(vs []float64, p float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	rank = max(0, min(rank, len(s)-1))
	return s[rank]
}
