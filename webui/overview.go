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

// Chart geometry, in SVG user units.
const (
	chartMinutes = 60
	chartBarW    = 8
	chartH       = 100
)

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
	at         time.Time
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
}

// queuedSplitBudget is how many queued jobs, the oldest first, the
// overview reads to split them into due, scheduled and retrying.
const queuedSplitBudget = 500

func (h *Handler) handleOverview(w http.ResponseWriter, r *http.Request) {
	d, err := h.overview(r.Context())
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "overview", "Overview", d)
}

// overview gathers the overview: the store's counts, the running jobs, and
// a scan of the newest jobs of the last hour (reused for overviewTTL).
func (h *Handler) overview(ctx context.Context) (*overviewData, error) {
	now := time.Now()
	st, err := h.store.Stats(ctx)
	if err != nil {
		return nil, err
	}
	d := &overviewData{at: now, counts: st.Counts, OldestWait: "no job is due", ChartW: chartMinutes * chartBarW, ChartH: chartH}
	for _, s := range jobstore.States() {
		d.States = append(d.States, stateCount{State: string(s), Count: st.Counts[s]})
		d.StateNames = append(d.StateNames, string(s))
		d.Total += st.Counts[s]
	}
	if !st.OldestQueuedAt.IsZero() {
		d.OldestWait = ago(now.Sub(st.OldestQueuedAt))
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
	if c := h.overviewCache; c != nil && now.Sub(c.at) < overviewTTL && !now.Before(c.at) && maps.Equal(c.counts, d.counts) {
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
	h.overviewCache = d
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
	since := now.Add(-chartMinutes * time.Minute)
	kinds := map[string]*kindCount{}
	succeeded := make([]int, chartMinutes)
	failed := make([]int, chartMinutes)
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
			m := int(j.FinishedAt.Sub(since) / time.Minute)
			m = min(m, chartMinutes-1)
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
	for i := range chartMinutes {
		if n := succeeded[i] + failed[i]; n > peak {
			peak, peakAt = n, i
		}
		d.Finished += succeeded[i]
		d.Failed += failed[i]
	}
	scale := max(peak, 1)
	for i := range chartMinutes {
		b := bar{X: i * chartBarW, Succeeded: succeeded[i], Failed: failed[i]}
		// A minute with any job shows at least a sliver.
		b.SucceededH = max(succeeded[i]*chartH/scale, min(succeeded[i], 1))
		b.FailedH = max(failed[i]*chartH/scale, min(failed[i], 1))
		b.SucceededY = chartH - b.SucceededH
		b.FailedY = b.SucceededY - b.FailedH
		minutesAgo := chartMinutes - i
		b.Label = fmt.Sprintf("%d to %d minutes ago: %d succeeded, %d failed", minutesAgo, minutesAgo-1, succeeded[i], failed[i])
		d.Bars = append(d.Bars, b)
	}
	if peak > 0 {
		d.PeakLabel = fmt.Sprintf("busiest minute: %d jobs, %d to %d minutes ago", peak, chartMinutes-peakAt, chartMinutes-peakAt-1)
	}
	return nil
}
