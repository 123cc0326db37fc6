package webui

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// filter is what the jobs table shows: the query of /ui/jobs.
type filter struct {
	States []jobstore.State
	Kind   string
	Queue  string
	// Tag keeps the jobs with this tag.
	Tag string
	// Key keeps the jobs whose key contains it.
	Key string
	// Prefix keeps the jobs whose ID starts with it (upper case).
	Prefix string
	// Text keeps the jobs whose command line (an exec job's), last error
	// or payload contains it, in any case.
	Text string
	// IDs, when set, are the only jobs the filter keeps (those of them
	// the rest of the filter keeps), in this order: rows selected in the
	// table, for the bulk actions.
	IDs   []string
	Order jobstore.Order
}

// maxSelected is the most jobs a filter of IDs may name.
const maxSelected = 500

// parseFilter reads a filter from the query: state (repeatable), kind,
// queue, tag, key, id (a prefix), text and order (newest or oldest).
func parseFilter(q url.Values) (filter, error) {
	var f filter
	for _, s := range q["state"] {
		if s == "" {
			continue
		}
		st, err := jobstore.ParseState(s)
		if err != nil {
			return f, errors.New("unknown state: pick one of the list")
		}
		if !slices.Contains(f.States, st) {
			f.States = append(f.States, st)
		}
	}
	f.Kind = strings.TrimSpace(q.Get("kind"))
	if f.Kind != "" {
		if err := jobstore.ValidateKind(f.Kind); err != nil {
			return f, errors.New("a kind has only letters, digits and ._:/-")
		}
	}
	f.Queue = strings.TrimSpace(q.Get("queue"))
	if f.Queue != "" {
		if err := jobstore.ValidateQueue(f.Queue); err != nil {
			return f, errors.New("a queue name has only letters, digits and ._:/-")
		}
	}
	f.Tag = strings.TrimSpace(q.Get("tag"))
	if f.Tag != "" {
		if err := jobstore.ValidateTag(f.Tag); err != nil {
			return f, errors.New("a tag has only letters, digits and ._:/-=")
		}
	}
	f.Key = q.Get("key")
	f.Text = strings.TrimSpace(q.Get("text"))
	for _, id := range q["job"] {
		if err := jobstore.ValidateID(id); err != nil {
			return f, errors.New("a selected job's ID is not one: select the jobs again")
		}
		if !slices.Contains(f.IDs, id) {
			f.IDs = append(f.IDs, id)
		}
	}
	if len(f.IDs) > maxSelected {
		return f, fmt.Errorf("at most %d jobs can be selected at once", maxSelected)
	}
	f.Prefix = strings.ToUpper(strings.TrimSpace(q.Get("id")))
	if len(f.Prefix) > 26 {
		return f, errors.New("an ID has 26 characters")
	}
	for i := 0; i < len(f.Prefix); i++ {
		if !strings.ContainsRune("0123456789ABCDEFGHJKMNPQRSTVWXYZ", rune(f.Prefix[i])) {
			return f, fmt.Errorf("an ID has only the characters 0-9 and A-Z but I, L, O and U; %q is not one", f.Prefix[i])
		}
	}
	switch q.Get("order") {
	case "", "newest":
	case "oldest":
		f.Order = jobstore.OldestFirst
	default:
		return f, errors.New("order is newest or oldest")
	}
	return f, nil
}

// query returns the filter as the query of /ui/jobs.
func (f filter) query() url.Values {
	q := url.Values{}
	for _, s := range f.States {
		q.Add("state", string(s))
	}
	if f.Kind != "" {
		q.Set("kind", f.Kind)
	}
	if f.Queue != "" {
		q.Set("queue", f.Queue)
	}
	if f.Tag != "" {
		q.Set("tag", f.Tag)
	}
	if f.Key != "" {
		q.Set("key", f.Key)
	}
	if f.Prefix != "" {
		q.Set("id", f.Prefix)
	}
	if f.Text != "" {
		q.Set("text", f.Text)
	}
	for _, id := range f.IDs {
		q.Add("job", id)
	}
	if f.Order == jobstore.OldestFirst {
		q.Set("order", "oldest")
	}
	return q
}

// maxListBytes bounds the size of the jobs one List call of a scan holds
// (see jobstore.ListOptions.MaxBytes), as the API's list route does.
const maxListBytes = 4 << 20

// readsAll reports whether scan reads every job in the cursor's order and
// filters them itself, within its budget, rather than have List filter:
// for a key or a text, which List cannot filter, and for a finished state. Finished
// jobs are most of a store's history, and to fill a page of a state that
// is rare among them (failed, say) List could read all of it; a store may
// not even keep them apart (filestore keeps succeeded and failed jobs in
// one directory). Queued and running jobs List filters.
func (f filter) readsAll() bool {
	return f.Key != "" || f.Text != "" || slices.ContainsFunc(f.States, jobstore.State.Terminal)
}

// keeps reports whether j passes the parts of f that List does not filter:
// the key and the text.
func (f filter) keeps(j jobstore.Job) bool {
	if f.Key != "" && !strings.Contains(j.Key, f.Key) {
		return false
	}
	if f.Text == "" {
		return true
	}
	text := strings.ToLower(f.Text)
	if argv, ok := execArgv(j); ok && strings.Contains(strings.ToLower(shellQuote(argv)), text) {
		return true
	}
	return strings.Contains(strings.ToLower(j.LastError), text) || strings.Contains(strings.ToLower(string(j.Payload)), text)
}

// crockford is the alphabet of IDs, in order.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// prefixBound returns the cursor just outside the IDs that start with
// prefix (shorter than an ID), on the side a listing starts from: newest
// first, the smallest ID after every one of them (the next prefix, padded
// with 0); oldest first, the largest ID before them (the previous prefix,
// padded with Z). It returns "" when there is no such ID: the listing
// starts at its beginning.
func prefixBound(prefix string, oldest bool) string {
	b := []byte(prefix)
	step, pad, edge := 1, byte('0'), byte('Z')
	if oldest {
		step, pad, edge = -1, 'Z', '0'
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == edge {
			continue
		}
		b[i] = crockford[strings.IndexByte(crockford, b[i])+step]
		id := string(b[:i+1]) + strings.Repeat(string(pad), 26-i-1)
		if jobstore.ValidateID(id) != nil {
			return "" // past the last ID there can be
		}
		return id
	}
	return ""
}

// errStop ends a scan early; scan reports it as no error.
var errStop = errors.New("stop")

// scan calls fn with each job that matches f, in f's order, after cursor
// (empty: from the start). It reads at most budget jobs from the store, in
// pages of at most batch, and returns the cursor to go on from: empty when
// every matching job was seen, else the ID of the last job read (fn's
// last, if fn stopped the scan by returning errStop). It never reads a job
// whose ID lies outside f.Prefix: IDs sort, so the prefix is a range of the
// store's cursor.
func (h *Handler) scan(ctx context.Context, f filter, cursor string, budget, batch int, fn func(jobstore.Job) error) (string, error) {
	opts := jobstore.ListOptions{States: f.States, Kind: f.Kind, Queue: f.Queue, Tag: f.Tag, Order: f.Order, Cursor: cursor, MaxBytes: maxListBytes}
	if len(f.IDs) > 0 {
		return "", h.scanIDs(ctx, f, opts, fn)
	}
	var states []jobstore.State // filtered here, not by List
	if f.readsAll() {
		states, opts.States = f.States, nil
	}
	if f.Prefix != "" && cursor == "" {
		if f.Prefix[0] > '7' {
			return "", nil // no ID starts so
		}
		if len(f.Prefix) == 26 {
			j, err := h.store.Get(ctx, f.Prefix)
			if errors.Is(err, jobstore.ErrNotFound) {
				return "", nil
			}
			if err != nil {
				return "", err
			}
			if j.MatchesList(opts) && f.keeps(j) {
				if err := fn(j); err != nil && !errors.Is(err, errStop) {
					return "", err
				}
			}
			return "", nil
		}
		// Just outside the range, at the end the order starts from: the
		// cursor is exclusive, and the prefix padded with Z (or 0) may be
		// an ID, so it is the neighbouring prefix's far end.
		opts.Cursor = prefixBound(f.Prefix, f.Order == jobstore.OldestFirst)
	}
	read := 0
	for {
		opts.Limit = min(batch, budget-read)
		page, err := h.store.List(ctx, opts)
		if err != nil {
			return "", err
		}
		for _, j := range page.Jobs {
			read++
			if !strings.HasPrefix(j.ID, f.Prefix) {
				return "", nil // past the prefix's range
			}
			if !f.keeps(j) || len(states) > 0 && !slices.Contains(states, j.State) {
				continue
			}
			if err := fn(j); err != nil {
				if errors.Is(err, errStop) {
					return j.ID, nil
				}
				return "", err
			}
		}
		if page.Next == "" {
			return "", nil
		}
		opts.Cursor = page.Next
		if read >= budget {
			return page.Next, nil
		}
	}
}

// scanIDs is scan for a filter of IDs: each job it names that is there
// and that the rest of f keeps, in the order named (with no cursor: a
// selection is one page).
func (h *Handler) scanIDs(ctx context.Context, f filter, opts jobstore.ListOptions, fn func(jobstore.Job) error) error {
	opts.Cursor = ""
	for _, id := range f.IDs {
		j, err := h.store.Get(ctx, id)
		if errors.Is(err, jobstore.ErrNotFound) {
			continue // pruned since it was selected
		}
		if err != nil {
			return err
		}
		if !j.MatchesList(opts) || !strings.HasPrefix(j.ID, f.Prefix) || !f.keeps(j) {
			continue
		}
		if err := fn(j); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

// jobRow is one line of the jobs table.
type jobRow struct {
	ID, Kind, Key, State, Words string
	// Tags are the job's tags, each a link to the jobs with it.
	Tags               []string
	Created, CreatedAt string
	// Command is an exec job's command line, clipped to rowCommandLen.
	Command string
	// Error is the last error of a job that failed, was canceled or
	// waits for a retry, clipped to rowErrorLen; empty for the others.
	Error string
}

// rowCommandLen and rowErrorLen are the most characters of a command line
// and of an error that a row of the jobs table shows; the job's page has
// them whole.
const (
	rowCommandLen = 80
	rowErrorLen   = 120
)

func rowOf(j jobstore.Job, now time.Time) jobRow {
	row := jobRow{ID: j.ID, Kind: j.Kind, Key: j.Key, Tags: j.Tags, State: string(j.State), Words: stateWords(j, now),
		Created: ago(now.Sub(j.CreatedAt)) + " ago", CreatedAt: j.CreatedAt.Format(time.RFC3339)}
	if argv, ok := execArgv(j); ok {
		row.Command = clip(shellQuote(argv), rowCommandLen)
	}
	if j.State == jobstore.StateFailed || j.State == jobstore.StateCanceled || j.State == jobstore.StateQueued && j.Attempt > 0 {
		row.Error = clip(j.LastError, rowErrorLen)
	}
	return row
}

// attemptText is "1 of 3": the attempts that counted against the job's
// limit and the limit as it was set, with the interrupted attempts said
// apart (see jobstore.Job.CountedAttempts).
func attemptText(j jobstore.Job) string {
	used, limit, interrupted := j.CountedAttempts()
	if interrupted == 0 {
		return fmt.Sprintf("%d of %d", used, limit)
	}
	return fmt.Sprintf("%d of %d (and %d interrupted, not counted)", used, limit, interrupted)
}

// execArgv returns the command line of an exec job.
func execArgv(j jobstore.Job) ([]string, bool) {
	if j.Kind != "exec" {
		return nil, false
	}
	var p struct {
		Argv []string `json:"argv"`
	}
	if json.Unmarshal(j.Payload, &p) != nil || len(p.Argv) == 0 {
		return nil, false
	}
	return p.Argv, true
}

// clip cuts s to at most n characters, the last of them an ellipsis when
// it cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

type stateOption struct {
	Value    string
	Selected bool
}

// jobsPage is the data of the jobs table.
type jobsPage struct {
	Kind, Queue, Tag, Key, Prefix, Text string
	Oldest                              bool
	States                              []stateOption
	Rows                                []jobRow
	// Next is the URL of the next page; empty on the last.
	Next string
	// First is the URL of the first page, when this is not it; Prev the
	// URL of the page before this one.
	First, Prev string
	// Total is how many jobs the filter matches, when the store's counts
	// say (a filter of states and a kind only); HasTotal says it is known.
	Total    int
	HasTotal bool
	// Partial says the page ended early because ScanBudget jobs were read
	// (a key or a finished state filters them).
	Partial bool
	// Budget is ScanBudget, for the page's words.
	Budget int
	// Query is the filter's query, for the bulk actions.
	Query string
	// CanDelete says the store deletes finished jobs one by one.
	CanDelete bool
	Error     string
}

func (h *Handler) handleJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, ferr := parseFilter(q)
	data := jobsPage{Kind: f.Kind, Queue: f.Queue, Tag: f.Tag, Key: f.Key, Prefix: f.Prefix, Text: f.Text, Oldest: f.Order == jobstore.OldestFirst, Query: f.query().Encode(), Budget: ScanBudget}
	_, data.CanDelete = h.store.(jobstore.Deleter)
	for _, s := range jobstore.States() {
		data.States = append(data.States, stateOption{Value: string(s), Selected: slices.Contains(f.States, s)})
	}
	status := http.StatusOK
	cursor := q.Get("cursor")
	if cursor != "" {
		if err := jobstore.ValidateID(cursor); err != nil {
			ferr = errors.New("the page link is broken: go back to the first page")
		}
	}
	if ferr != nil {
		data.Error = ferr.Error()
		status = http.StatusBadRequest
	} else {
		now := time.Now()
		// A filter that skips jobs after List reads a whole budget at
		// once rather than a page per List call.
		batch := PageSize
		if f.readsAll() {
			batch = ScanBudget
		}
		deps := newDepStates(h.store)
		next, err := h.scan(r.Context(), f, cursor, ScanBudget, batch, func(j jobstore.Job) error {
			row := rowOf(j, now)
			if j.State == jobstore.StateWaiting {
				words, err := deps.words(r.Context(), j)
				if err != nil {
					return err
				}
				row.Words = words
			}
			data.Rows = append(data.Rows, row)
			if len(data.Rows) == PageSize {
				return errStop
			}
			return nil
		})
		if err != nil {
			h.storeError(w, r, err)
			return
		}
		if next != "" {
			nq := f.query()
			nq.Set("cursor", next)
			data.Next = Prefix + "jobs?" + nq.Encode()
			data.Partial = len(data.Rows) < PageSize
		}
		if cursor != "" {
			data.First = Prefix + "jobs?" + f.query().Encode()
			prev, err := h.prevPage(r.Context(), f, data.Rows)
			if err != nil {
				h.storeError(w, r, err)
				return
			}
			data.Prev = prev
		}
		if f.Key == "" && f.Text == "" && f.Prefix == "" && f.Queue == "" && f.Tag == "" && len(f.IDs) == 0 {
			st, err := h.store.Stats(r.Context())
			if err != nil {
				h.storeError(w, r, err)
				return
			}
			data.Total, data.HasTotal = st.Matching(f.Kind, f.States), true
		}
	}
	h.render(w, r, status, "jobs", "Jobs", data)
}

// prevPage returns the URL of the page before the one that starts with
// rows (of a page that is not the first): the PageSize jobs that f keeps
// just before rows' first, read in the other order. Its cursor is the job
// read after those, or none (the first page) when there are not more.
func (h *Handler) prevPage(ctx context.Context, f filter, rows []jobRow) (string, error) {
	if len(rows) == 0 {
		return Prefix + "jobs?" + f.query().Encode(), nil
	}
	back := f
	back.Order = jobstore.NewestFirst
	if f.Order == jobstore.NewestFirst {
		back.Order = jobstore.OldestFirst
	}
	var before []string
	_, err := h.scan(ctx, back, rows[0].ID, ScanBudget, PageSize+1, func(j jobstore.Job) error {
		before = append(before, j.ID)
		if len(before) == PageSize+1 {
			return errStop
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	q := f.query()
	if len(before) == PageSize+1 {
		q.Set("cursor", before[PageSize])
	}
	return Prefix + "jobs?" + q.Encode(), nil
}

// field is one line of a job's field table.
type field struct{ Name, Value string }

// attemptRow is one attempt of a job's history.
type attemptRow struct {
	Attempt                  int
	Worker, End, Error       string
	Started, StartedAt, Took string
}

// jobPage is the data of a job's page.
type jobPage struct {
	ID, Kind, State, Words string
	Fields                 []field
	// Tags are the job's tags; Meta its metadata, by key.
	Tags                []string
	Meta                []field
	Payload, Result     string
	LastError           string
	History             []attemptRow
	Command             string
	Dir                 string
	Env                 []string
	IsExec              bool
	CanCancel, CanRetry bool
	CanRerun            bool
	RerunRefused        string
	LogURL              string
	Terminal            bool
	CancelRequested     bool
	// Links are the job's dependencies, dependents and batch.
	Links jobLinks
}

// prettyJSON indents a JSON value for reading; anything else is shown as
// it is.
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

func timeField(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	rel := ago(now.Sub(t)) + " ago"
	if t.After(now) {
		rel = "in " + ago(t.Sub(now))
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC") + " (" + rel + ")"
}

func (h *Handler) handleJob(w http.ResponseWriter, r *http.Request) {
	j, err := h.store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	now := time.Now()
	d := jobPage{ID: j.ID, Kind: j.Kind, State: string(j.State), Words: stateWords(j, now),
		Payload: prettyJSON(j.Payload), Result: prettyJSON(j.Result), LastError: j.LastError,
		CanCancel: j.State == jobstore.StateWaiting || j.State == jobstore.StateQueued || j.State == jobstore.StateRunning && !j.CancelRequested,
		CanRetry:  j.State == jobstore.StateFailed || j.State == jobstore.StateCanceled,
		CanRerun:  h.kindAllowed(j.Kind), Terminal: j.State.Terminal(), CancelRequested: j.CancelRequested}
	if !d.CanRerun {
		d.RerunRefused = fmt.Sprintf("This server does not submit jobs of kind %q, so it cannot re-run this one.", j.Kind)
	}
	timeout := "none"
	if j.Timeout > 0 {
		timeout = j.Timeout.String()
	}
	d.Fields = []field{
		{"ID", j.ID}, {"Kind", j.Kind}, {"Queue", jobstore.QueueOf(j.Queue)}, {"Key", j.Key}, {"State", string(j.State)},
		{"Attempt", attemptText(j)}, {"Priority", fmt.Sprint(j.Priority)},
		{"Timeout", timeout}, {"Worker", j.Worker}, {"Cancel requested", fmt.Sprint(j.CancelRequested)},
		{"Created", timeField(j.CreatedAt, now)}, {"Run at", timeField(j.RunAt, now)},
		{"Started", timeField(j.StartedAt, now)}, {"Finished", timeField(j.FinishedAt, now)},
		{"Updated", timeField(j.UpdatedAt, now)},
	}
	if j.Partition != "" {
		d.Fields = slices.Insert(d.Fields, 3, field{"Partition", j.Partition})
	}
	if d.Links, err = h.links(r.Context(), j, now); err != nil {
		h.storeError(w, r, err)
		return
	}
	if d.Links.Waiting != "" {
		d.Words = d.Links.Waiting
	}
	if j.Batch != "" {
		d.Fields = append(d.Fields, field{"Batch", cmp.Or(d.Links.Batch, j.Batch)})
	}
	if j.AfterBatch != "" {
		d.Fields = append(d.Fields, field{"Callback of batch", cmp.Or(d.Links.CallbackOf, j.AfterBatch)})
	}
	if len(j.After) > 0 {
		anyText := "no: canceled as soon as a dependency fails or is canceled"
		if j.AfterAny {
			anyText = "yes: runs once its dependencies ended, whatever their outcomes"
		}
		d.Fields = append(d.Fields, field{"After any", anyText})
	}
	d.Tags = j.Tags
	for _, k := range slices.Sorted(maps.Keys(j.Meta)) {
		d.Meta = append(d.Meta, field{k, j.Meta[k]})
	}
	for _, a := range j.History {
		d.History = append(d.History, attemptRow{Attempt: a.Attempt, Worker: a.Worker, End: string(a.End), Error: a.Error,
			Started: timeField(a.StartedAt, now), StartedAt: a.StartedAt.Format(time.RFC3339), Took: a.FinishedAt.Sub(a.StartedAt).Round(time.Millisecond).String()})
	}
	if j.Kind == "exec" {
		var p struct {
			Argv []string `json:"argv"`
			Dir  string   `json:"dir"`
			Env  []string `json:"env"`
		}
		if json.Unmarshal(j.Payload, &p) == nil {
			d.IsExec, d.Command, d.Dir, d.Env = true, shellQuote(p.Argv), p.Dir, p.Env
		}
		if h.opts.Log != nil {
			d.LogURL = Prefix + "jobs/" + j.ID + "/log"
		}
	}
	h.render(w, r, http.StatusOK, "job", j.Kind+" "+j.ID, d)
}

// handleLog forwards to the API's log route, following the log until the
// job ends, with the session's token.
func (h *Handler) handleLog(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if h.opts.Log == nil {
		h.refuse(w, r, http.StatusNotFound, "this server keeps no job logs")
		return
	}
	if err := jobstore.ValidateID(id); err != nil {
		h.refuse(w, r, http.StatusBadRequest, "that is not a job ID")
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL = &url.URL{Path: "/v1/jobs/" + id + "/log", RawQuery: "follow=1"}
	r2.RequestURI = r2.URL.RequestURI()
	r2.Header = http.Header{}
	if s := sessionOf(r); s != nil {
		r2.Header.Set("Authorization", "Bearer "+s.token)
	}
	h.opts.Log.ServeHTTP(w, r2)
}

// actionResult is the JSON answer of an action.
type actionResult struct {
	Message  string `json:"message"`
	Location string `json:"location,omitempty"`
}

// handleAction cancels, retries or re-runs one job.
func (h *Handler) handleAction(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var (
		res actionResult
		err error
		j   jobstore.Job
	)
	switch r.PathValue("action") {
	case "cancel":
		j, err = h.store.Cancel(r.Context(), id)
		res.Message = "Canceled."
		if err == nil && j.State == jobstore.StateRunning {
			res.Message = "Cancel requested: the worker is stopping the job."
		}
	case "retry":
		j, err = h.store.Retry(r.Context(), id)
		res.Message = "Queued again."
		if err == nil && j.State == jobstore.StateWaiting {
			res.Message = "Retried: it waits for its dependencies again."
		}
	case "rerun":
		j, err = h.store.Get(r.Context(), id)
		if err == nil && !h.kindAllowed(j.Kind) {
			h.refuse(w, r, http.StatusForbidden, fmt.Sprintf("this server does not submit jobs of kind %q", j.Kind))
			return
		}
		if err == nil {
			j, _, err = h.store.Submit(r.Context(), j.RerunSpec())
		}
		res.Message = "Submitted a new job with the same kind and payload: " + j.ID + "."
		res.Location = Prefix + "jobs/" + j.ID
	default:
		h.refuse(w, r, http.StatusNotFound, "no such action: cancel, retry or rerun")
		return
	}
	loc := res.Location
	if loc == "" {
		loc = Prefix + "jobs/" + id
	}
	h.answerAction(w, r, res, err, loc)
}

// answerAction answers an action that ended with err: the store's error,
// or res as JSON to the pages' script, or a redirect to loc for a plain
// form.
func (h *Handler) answerAction(w http.ResponseWriter, r *http.Request, res actionResult, err error, loc string) {
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, res)
		return
	}
	http.Redirect(w, r, loc, http.StatusSeeOther)
}

// bulkStates returns the states of f that action applies to, and false if
// the action is unknown.
func bulkStates(action string, f filter) ([]jobstore.State, bool) {
	var from []jobstore.State
	switch action {
	case "cancel":
		from = []jobstore.State{jobstore.StateWaiting, jobstore.StateQueued, jobstore.StateRunning}
	case "retry":
		from = []jobstore.State{jobstore.StateFailed, jobstore.StateCanceled}
	case "delete":
		from = []jobstore.State{jobstore.StateSucceeded, jobstore.StateFailed, jobstore.StateCanceled}
	default:
		return nil, false
	}
	if len(f.States) == 0 {
		return from, true
	}
	var both []jobstore.State
	for _, s := range f.States {
		if slices.Contains(from, s) {
			both = append(both, s)
		}
	}
	return both, true
}

// bulkCount is the answer of GET /ui/bulk.
type bulkCount struct {
	Count int `json:"count"`
	// More says the count stopped after reading MaxBulk jobs (matching
	// ones, or any, for a filter List cannot apply): the action stops
	// there too, and can be repeated.
	More bool `json:"more"`
}

// bulkFilter reads the filter and action of a bulk request and narrows the
// filter to the states the action applies to.
func bulkFilter(q url.Values) (filter, string, error) {
	f, err := parseFilter(q)
	if err != nil {
		return f, "", err
	}
	action := q.Get("action")
	states, ok := bulkStates(action, f)
	if !ok {
		return f, "", errors.New("the action is cancel, retry or delete")
	}
	f.States = states
	return f, action, nil
}

// handleBulkCount counts the jobs a bulk action would touch.
func (h *Handler) handleBulkCount(w http.ResponseWriter, r *http.Request) {
	f, _, err := bulkFilter(r.URL.Query())
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, err.Error())
		return
	}
	var c bulkCount
	if len(f.States) > 0 {
		// The same scan as the action's, so the count is what it will do.
		next, err := h.scan(r.Context(), f, "", MaxBulk, jobstore.MaxListLimit, func(jobstore.Job) error {
			c.Count++
			return nil
		})
		if err != nil {
			h.storeError(w, r, err)
			return
		}
		c.More = next != ""
	}
	writeJSON(w, http.StatusOK, c)
}

// bulkResult is the answer of POST /ui/bulk.
type bulkResult struct {
	Message string `json:"message"`
	Done    int    `json:"done"`
	// Skipped counts jobs that changed state between the count and the
	// action, so the action did not apply to them.
	Skipped int `json:"skipped"`
	// Refused counts the jobs the store would not act on because of
	// other jobs: a retry of a job whose dependency is still failed or
	// canceled, a delete of a job that a waiting job depends on.
	Refused int `json:"refused,omitempty"`
}

// handleBulk cancels or retries every job the filter matches among the
// first MaxBulk it reads, a page of the store at a time.
func (h *Handler) handleBulk(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		h.refuse(w, r, http.StatusBadRequest, "the form could not be read")
		return
	}
	f, action, err := bulkFilter(r.PostForm)
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, err.Error())
		return
	}
	var res bulkResult
	if len(f.States) > 0 {
		op := h.store.Cancel
		switch action {
		case "retry":
			op = h.store.Retry
		case "delete":
			d, ok := h.store.(jobstore.Deleter)
			if !ok {
				h.refuse(w, r, http.StatusBadRequest, "this store cannot delete jobs one by one: prune them (jobdir prune)")
				return
			}
			op = func(ctx context.Context, id string) (jobstore.Job, error) {
				if err := d.Delete(ctx, id); err != nil {
					return jobstore.Job{}, err
				}
				h.deleted(ctx, id)
				return jobstore.Job{}, nil
			}
		}
		// Acting on a job moves it out of the filter's states but not
		// out of the cursor's order, so the scan neither skips nor
		// repeats a job.
		_, err = h.scan(r.Context(), f, "", MaxBulk, jobstore.MaxListLimit, func(j jobstore.Job) error {
			if _, err := op(r.Context(), j.ID); err != nil {
				if errors.Is(err, jobstore.ErrDependencyFailed) || errors.Is(err, jobstore.ErrDependedOn) {
					res.Refused++
					return nil
				}
				if errors.Is(err, jobstore.ErrInvalidTransition) || errors.Is(err, jobstore.ErrNotFound) {
					res.Skipped++
					return nil
				}
				return err
			}
			res.Done++
			return nil
		})
		if err != nil {
			h.storeError(w, r, err)
			return
		}
	}
	verb := map[string]string{"cancel": "Canceled", "retry": "Queued again", "delete": "Deleted"}[action]
	res.Message = fmt.Sprintf("%s %d jobs.", verb, res.Done)
	if res.Skipped > 0 {
		res.Message += fmt.Sprintf(" %d had changed state meanwhile and were left alone.", res.Skipped)
	}
	switch {
	case res.Refused > 0 && action == "retry":
		res.Message += fmt.Sprintf(" %d were not retried: a job they depend on failed or was canceled and is still so; retry those first.", res.Refused)
	case res.Refused > 0:
		res.Message += fmt.Sprintf(" %d were kept: jobs that wait depend on them.", res.Refused)
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, res)
		return
	}
	http.Redirect(w, r, Prefix+"jobs?"+f.query().Encode(), http.StatusSeeOther)
}

// deleted calls Options.Deleted for the deleted job id, logging its error.
func (h *Handler) deleted(ctx context.Context, id string) {
	if h.opts.Deleted == nil {
		return
	}
	if err := h.opts.Deleted(ctx, id); err != nil {
		h.log.LogAttrs(ctx, slog.LevelError, "cleaning up after a deleted job", slog.String("job", id), slog.String("error", err.Error()))
	}
}

// shellQuote writes argv as a shell would read it back: each argument
// alone, single-quoted when it holds anything but plain characters.
func shellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		plain := a != ""
		for _, c := range a {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./=:,+@%", c)) {
				plain = false
				break
			}
		}
		if plain {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
