package webui

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// overviewTTL is how long the overview's scan of the newest jobs is
// reused while the counts by state stay the same: pages polling every few
// seconds share one scan.
const overviewTTL = 2 * time.Second

// Chart geometry, in SVG user units: every range has chartBars bars.
const (
	chartBars = 60
	chartBarW = 8
	chartH    = 100
)

// chartRange is a span of time that the overview's chart and its counts by
// kind cover, ending now, in chartBars bars of Span/chartBars each.
type chartRange struct {
	// Name is the value of the query parameter range.
	Name string
	Span time.Duration
	// Words name the span ("the last hour") and a bar's ("minute");
	// Label is the range's link ("Last hour").
	Words, Bar, Label string
}

// chartRanges are the overview's ranges; the first is the default.
var chartRanges = []chartRange{
	{Name: "1h", Span: time.Hour, Words: "the last hour", Bar: "minute", Label: "Last hour"},
	{Name: "24h", Span: 24 * time.Hour, Words: "the last 24 hours", Bar: "24 minutes", Label: "24 hours"},
	{Name: "7d", Span: 7 * 24 * time.Hour, Words: "the last 7 days", Bar: "2 h 48 m", Label: "7 days"},
}

// rangeLink is a link to the overview of a range.
type rangeLink struct {
	Name, Label string
	Current     bool
}

type stateCount struct {
	State string
	Count int
}

type kindCount struct {
	Kind   string
	Counts []int // in the order of jobstore.States
	Total  int
}

// bar is one minute of the chart.
type bar struct {
	X                   int
	Succeeded, Failed   int
	SucceededY, FailedY int
	SucceededH, FailedH int
	Label               string
}

type runningRow struct {
	ID, Kind, Worker, RunTime, Attempt string
	// Key is the job's key; Command an exec job's command line, clipped
	// as in the jobs table.
	Key, Command    string
	CancelRequested bool
}

// overviewData is the data of the overview page.
type overviewData struct {
	at time.Time
	// Range is what the chart and the counts by kind cover; Ranges link
	// to each.
	Range      chartRange
	Ranges     []rangeLink
	counts     map[jobstore.State]int
	States     []stateCount
	StateNames []string
	Total      int
	OldestWait string
	Kinds      []kindCount
	// Scanned is how many of the newest jobs the kinds and the chart
	// read; Truncated says OverviewBudget stopped the scan before the
	// hour did.
	Scanned   int
	Truncated bool
	Bars      []bar
	Finished  int
	Failed    int
	PeakLabel string
	ChartW    int
	ChartH    int
	Running   []runningRow
	// MoreRunning says more jobs run than the list shows.
	MoreRunning bool
	// Due, Scheduled and Retrying split the queued jobs: due now, waiting
	// for their time, waiting to retry; among the oldest
	// queuedSplitBudget of them, when SplitPartial.
	Due, Scheduled, Retrying int
	SplitPartial             bool
	SplitBudget              int
	// Workers counts the live workers, when WorkersKnown (the store keeps
	// a list of them); Unserved are the kinds whose queued jobs none of
	// them runs.
	WorkersKnown bool
	Workers      int
	Unserved     []string
}

// queuedSplitBudget is how many queued jobs, the oldest first, the
// overview reads to split them into due, scheduled and retrying.
const queuedSplitBudget = 500

func (h *Handler) handleOverview(w http.ResponseWriter, r *http.Request) {
	rng := chartRanges[0]
	if name := r.URL.Query().Get("range"); name != "" {
		i := slices.IndexFunc(chartRanges, func(c chartRange) bool { return c.Name == name })
		if i < 0 {
			h.refuse(w, r, http.StatusBadRequest, "the range is 1h, 24h or 7d")
			return
		}
		rng = chartRanges[i]
	}
	d, err := h.overview(r.Context(), rng)
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "overview", "Overview", d)
}

// overview gathers the overview: the store's counts, the running jobs, and
// a scan of the newest jobs of rng (reused for overviewTTL).
func (h *Handler) overview(ctx context.Context, rng chartRange) (*overviewData, error) {
	now := time.Now()
	st, err := h.store.Stats(ctx)
	if err != nil {
		return nil, err
	}
	d := &overviewData{at: now, counts: st.Counts, OldestWait: "no job is due", ChartW: chartBars * chartBarW, ChartH: chartH, Range: rng}
	for _, c := range chartRanges {
		d.Ranges = append(d.Ranges, rangeLink{Name: c.Name, Label: c.Label, Current: c.Name == rng.Name})
	}
	for _, s := range jobstore.States() {
		d.States = append(d.States, stateCount{State: string(s), Count: st.Counts[s]})
		d.StateNames = append(d.StateNames, string(s))
		d.Total += st.Counts[s]
	}
	if !st.OldestQueuedAt.IsZero() {
		d.OldestWait = ago(now.Sub(st.OldestQueuedAt))
	}
	if reg, ok := h.store.(jobstore.WorkerRegistry); ok {
		ws, err := reg.Workers(ctx)
		if err != nil {
			return nil, err
		}
		d.WorkersKnown, d.Workers, d.Unserved = true, len(ws), jobstore.UnservedKinds(st, ws)
	}
	page, err := h.store.List(ctx, jobstore.ListOptions{States: []jobstore.State{jobstore.StateRunning}, Limit: 50, Order: jobstore.OldestFirst})
	if err != nil {
		return nil, err
	}
	for _, j := range page.Jobs {
		row := runningRow{ID: j.ID, Kind: j.Kind, Worker: j.Worker, RunTime: ago(now.Sub(j.StartedAt)),
			Key: j.Key, CancelRequested: j.CancelRequested}
		used, limit, _ := j.CountedAttempts()
		row.Attempt = fmt.Sprintf("%d/%d", used, limit)
		if argv, ok := execArgv(j); ok {
			row.Command = clip(shellQuote(argv), rowCommandLen)
		}
		d.Running = append(d.Running, row)
	}
	d.MoreRunning = page.Next != ""

	h.overviewMu.Lock()
	defer h.overviewMu.Unlock()
	if c := h.overviewCache[rng.Name]; c != nil && now.Sub(c.at) < overviewTTL && !now.Before(c.at) && maps.Equal(c.counts, d.counts) {
		d.Kinds, d.Scanned, d.Truncated, d.Bars, d.Finished, d.Failed, d.PeakLabel =
			c.Kinds, c.Scanned, c.Truncated, c.Bars, c.Finished, c.Failed, c.PeakLabel
		d.Due, d.Scheduled, d.Retrying, d.SplitPartial = c.Due, c.Scheduled, c.Retrying, c.SplitPartial
		return d, nil
	}
	if err := h.recent(ctx, d, now); err != nil {
		return nil, err
	}
	if err := h.splitQueued(ctx, d, now); err != nil {
		return nil, err
	}
	if h.overviewCache == nil {
		h.overviewCache = make(map[string]*overviewData, len(chartRanges))
	}
	h.overviewCache[rng.Name] = d
	return d, nil
}

// splitQueued counts the queued jobs that are due at now, that wait for
// their time and that wait to retry, among the oldest queuedSplitBudget.
func (h *Handler) splitQueued(ctx context.Context, d *overviewData, now time.Time) error {
	d.SplitBudget = queuedSplitBudget
	if d.counts[jobstore.StateQueued] == 0 {
		return nil
	}
	read := 0
	next, err := h.scan(ctx, filter{States: []jobstore.State{jobstore.StateQueued}, Order: jobstore.OldestFirst}, "", queuedSplitBudget, queuedSplitBudget,
		func(j jobstore.Job) error {
			read++
			switch {
			case !j.RunAt.After(now):
				d.Due++
			case j.Attempt > 0:
				d.Retrying++
			default:
				d.Scheduled++
			}
			return nil
		})
	if err != nil {
		return err
	}
	d.SplitPartial = next != "" && read >= queuedSplitBudget
	return nil
}

// recent fills the counts by kind and the chart from the jobs created in
// the last hour, newest first, at most OverviewBudget of them.
func (h *Handler) recent(ctx context.Context, d *overviewData, now time.Time) error {
	since := now.Add(-d.Range.Span)
	bucket := d.Range.Span / chartBars
	kinds := map[string]*kindCount{}
	succeeded := make([]int, chartBars)
	failed := make([]int, chartBars)
	states := jobstore.States()
	next, err := h.scan(ctx, filter{}, "", OverviewBudget, jobstore.MaxListLimit, func(j jobstore.Job) error {
		if j.CreatedAt.Before(since) {
			return errStop
		}
		d.Scanned++
		k := kinds[j.Kind]
		if k == nil {
			k = &kindCount{Kind: j.Kind, Counts: make([]int, len(states))}
			kinds[j.Kind] = k
		}
		k.Counts[slices.Index(states, j.State)]++
		k.Total++
		if j.State.Terminal() && !j.FinishedAt.Before(since) && !j.FinishedAt.After(now) {
			m := int(j.FinishedAt.Sub(since) / bucket)
			m = min(m, chartBars-1)
			switch j.State {
			case jobstore.StateSucceeded:
				succeeded[m]++
			case jobstore.StateFailed:
				failed[m]++
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The scan stopped at the hour's edge (errStop, with the ID of an
	// older job) or ran out of budget inside the hour.
	d.Truncated = next != "" && d.Scanned >= OverviewBudget
	for _, k := range kinds {
		d.Kinds = append(d.Kinds, *k)
	}
	slices.SortFunc(d.Kinds, func(a, b kindCount) int {
		if a.Total != b.Total {
			return b.Total - a.Total
		}
		if a.Kind < b.Kind {
			return -1
		}
		return 1
	})
	peak, peakAt := 0, 0
	for i := range chartBars {
		if n := succeeded[i] + failed[i]; n > peak {
			peak, peakAt = n, i
		}
		d.Finished += succeeded[i]
		d.Failed += failed[i]
	}
	scale := max(peak, 1)
	for i := range chartBars {
		b := bar{X: i * chartBarW, Succeeded: succeeded[i], Failed: failed[i]}
		// A minute with any job shows at least a sliver.
		b.SucceededH = max(succeeded[i]*chartH/scale, min(succeeded[i], 1))
		b.FailedH = max(failed[i]*chartH/scale, min(failed[i], 1))
		b.SucceededY = chartH - b.SucceededH
		b.FailedY = b.SucceededY - b.FailedH
		b.Label = fmt.Sprintf("%s: %d succeeded, %d failed", barWhen(d.Range, i), succeeded[i], failed[i])
		d.Bars = append(d.Bars, b)
	}
	if peak > 0 {
		jobs := "jobs"
		if peak == 1 {
			jobs = "job"
		}
		d.PeakLabel = fmt.Sprintf("busiest %s: %d %s, %s", d.Range.Bar, peak, jobs, barWhen(d.Range, peakAt))
	}
	return nil
}

// barWhen says when bar i of rng's chart was: "5 to 4 minutes ago" for
// the hour's minutes, "from 2h 24m to 2h ago" for longer bars.
func barWhen(rng chartRange, i int) string {
	bucket := rng.Span / chartBars
	from, to := rng.Span-time.Duration(i)*bucket, rng.Span-time.Duration(i+1)*bucket
	if bucket == time.Minute {
		return fmt.Sprintf("%d to %d minutes ago", from/time.Minute, to/time.Minute)
	}
	if to == 0 {
		return "from " + ago(from) + " ago to now"
	}
	return "from " + ago(from) + " to " + ago(to) + " ago"
}
