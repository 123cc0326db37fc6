package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/internal/humantime"
	"github.com/jobdir/jobdir/jobstore"
)

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// writeJobJSON writes j as the HTTP API sends it (httpapi.Job), so that a
// script reads one shape for a job from the command and from the API, not
// the store's record form.
func writeJobJSON(w io.Writer, j jobstore.Job) error {
	return writeJSON(w, httpapi.FromJob(j))
}

// apiJobs returns jobs as the HTTP API sends them, never nil, so that no
// jobs encode as an empty array.
func apiJobs(jobs []jobstore.Job) []httpapi.Job {
	out := make([]httpapi.Job, len(jobs))
	for i, j := range jobs {
		out[i] = httpapi.FromJob(j)
	}
	return out
}

// shellQuote renders argv so that a POSIX shell would read it back as the
// same words.
func shellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/:=@%+") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// describeWork returns what a job does, for people: the command line of an
// exec job, else its payload.
func describeWork(j jobstore.Job) string {
	if j.Kind == execjob.Kind {
		if p, err := execjob.ParsePayload(j.Payload); err == nil {
			return shellQuote(p.Argv)
		}
	}
	return string(j.Payload)
}

// ago renders the time from t to now, rounded for people: "3s ago",
// "in 2m10s".
func ago(t, now time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		return "in " + human(-d)
	}
	return human(d) + " ago"
}

// agoCoarse is ago in whole seconds or more, for tables.
func agoCoarse(t, now time.Time) string {
	d := now.Sub(t)
	if d < time.Second && d > -time.Second {
		return "just now"
	}
	if d < 0 {
		return "in " + humantime.Duration(d)
	}
	return humantime.Duration(d) + " ago"
}

// human writes a length of time for people: below a minute as precisely
// as roundDuration keeps it ("2.5s", "340ms"), from a minute on in the two
// largest units, as the dashboard writes it (humantime: "5m 3s", "5h 22m").
func human(d time.Duration) string {
	if d < time.Minute && d > -time.Minute {
		return roundDuration(d).String()
	}
	return humantime.Duration(d)
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	case d < time.Hour:
		return d.Round(time.Second)
	}
	return d.Round(time.Minute)
}

func stamp(t, now time.Time) string {
	return t.Local().Format("2006-01-02 15:04:05") + " (" + ago(t, now) + ")"
}

// stateText is the job's state, with a pending cancel spelled out.
func stateText(j jobstore.Job) string {
	if j.State == jobstore.StateRunning && j.CancelRequested {
		return "running (cancel requested)"
	}
	return string(j.State)
}

// attemptText is "1 of 3": the attempts that counted against the job's
// limit, and the limit as it was set, with the interrupted attempts (a
// worker shut down during them) said apart.
func attemptText(j jobstore.Job) string {
	used, limit, interrupted := j.CountedAttempts()
	if interrupted == 0 {
		return fmt.Sprintf("%d of %d", used, limit)
	}
	return fmt.Sprintf("%d of %d (and %d interrupted, not counted)", used, limit, interrupted)
}

// stateAt is the job's state as a person needs it at now: a queued job
// that is not due yet is "scheduled (in 5m)", or "retrying (in 30s,
// attempt 2/3)" when it waits for a retry.
func stateAt(j jobstore.Job, now time.Time) string {
	if j.State != jobstore.StateQueued || !j.RunAt.After(now) {
		return stateText(j)
	}
	in := "in " + humantime.Duration(j.RunAt.Sub(now))
	if j.RunAt.Sub(now) < time.Second {
		in = "in <1s"
	}
	if j.Attempt > 0 {
		used, limit, _ := j.CountedAttempts()
		return fmt.Sprintf("retrying (%s, attempt %d/%d)", in, used+1, limit)
	}
	return "scheduled (" + in + ")"
}

// runTime is how long the job's latest attempt ran (or runs, at now), or
// "-".
func runTime(j jobstore.Job, now time.Time) string {
	switch {
	case j.StartedAt.IsZero():
		return "-"
	case j.State == jobstore.StateRunning:
		return human(now.Sub(j.StartedAt))
	case !j.FinishedAt.IsZero() && !j.FinishedAt.Before(j.StartedAt):
		return human(j.FinishedAt.Sub(j.StartedAt))
	}
	if n := len(j.History); n > 0 {
		a := j.History[n-1]
		return human(a.FinishedAt.Sub(a.StartedAt))
	}
	return "-"
}

// orDash is s, or "-" if it is empty, so that a table's columns line up.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printJob writes a job for people, one field a line, with what links
// says of its dependencies, dependents and batch.
func printJob(w io.Writer, j jobstore.Job, logPath string, links jobLinks, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("ID", j.ID)
	if links.waiting != "" {
		row("State", links.waiting)
	} else {
		row("State", stateText(j))
	}
	row("Kind", j.Kind)
	if q := jobstore.QueueOf(j.Queue); q != jobstore.DefaultQueue {
		row("Queue", q)
	}
	if j.Partition != "" {
		row("Partition", j.Partition)
	}
	if j.Key != "" {
		row("Key", j.Key)
	}
	if len(j.Tags) > 0 {
		row("Tags", strings.Join(j.Tags, ", "))
	}
	if j.Batch != "" {
		row("Batch", batchLine(j.Batch, links.batch))
	}
	if j.AfterBatch != "" {
		row("Callback of", "batch "+batchLine(j.AfterBatch, links.callbackOf))
	}
	if len(j.After) > 0 {
		if j.AfterAny {
			row("After any", "yes: runs once its dependencies ended, whatever their outcomes")
		} else {
			row("After any", "no: canceled if a dependency fails or is canceled")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(j.Meta)) {
		row("Meta", k+"="+oneLine(j.Meta[k], 200))
	}
	if p, err := execjob.ParsePayload(j.Payload); j.Kind == execjob.Kind && err == nil {
		row("Command", shellQuote(p.Argv))
		row("Directory", p.Dir)
		for _, e := range p.Env {
			row("Environment", e)
		}
	} else if len(j.Payload) > 0 {
		row("Payload", string(j.Payload))
	}
	row("Attempt", attemptText(j))
	if j.Priority != 0 {
		row("Priority", fmt.Sprint(j.Priority))
	}
	if j.Timeout > 0 {
		row("Timeout", j.Timeout.String())
	}
	row("Created", stamp(j.CreatedAt, now))
	if j.State == jobstore.StateQueued {
		row("Runs at", stamp(j.RunAt, now))
	}
	if !j.StartedAt.IsZero() {
		row("Started", stamp(j.StartedAt, now))
	}
	if !j.FinishedAt.IsZero() {
		row("Finished", stamp(j.FinishedAt, now))
	}
	if j.Worker != "" {
		row("Worker", j.Worker)
	}
	if len(j.Result) > 0 {
		row("Result", string(j.Result))
	}
	if logPath != "" {
		row("Log", logPath)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printLinks(w, links, now); err != nil {
		return err
	}
	if len(j.History) > 0 {
		fmt.Fprintln(w, "Attempts:")
		hw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, a := range j.History {
			end := string(a.End)
			if !a.End.Counted() {
				end += " (not counted)"
			}
			fmt.Fprintf(hw, "  %d\t%s\t%s\tafter %s\t%s\n", a.Attempt, end, a.Worker,
				human(a.FinishedAt.Sub(a.StartedAt)), oneLine(plainMessage(a.Error), 60))
		}
		if err := hw.Flush(); err != nil {
			return err
		}
	}
	if j.LastError != "" {
		_, err := fmt.Fprintf(w, "Last error:\n  %s\n", strings.ReplaceAll(strings.TrimRight(plainMessage(j.LastError), "\n"), "\n", "\n  "))
		return err
	}
	return nil
}

// printTable writes jobs as a table for people; wide adds the worker, the
// run time and the start of the last error. waits holds, for each waiting
// job, how many of its dependencies have not ended of all ("3/5", see
// waitCounts).
func printTable(w io.Writer, jobs []jobstore.Job, waits map[string]string, now time.Time, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// The queue column only when a job is in a queue other than the
	// default one.
	queues := slices.ContainsFunc(jobs, func(j jobstore.Job) bool { return jobstore.QueueOf(j.Queue) != jobstore.DefaultQueue })
	head := "ID\tSTATE\tKIND\t"
	if queues {
		head += "QUEUE\t"
	}
	head += "PRI\tKEY\tATTEMPT\tCREATED\t"
	tags := wide && slices.ContainsFunc(jobs, func(j jobstore.Job) bool { return len(j.Tags) > 0 })
	if wide {
		head += "WORKER\tDURATION\tLAST ERROR\t"
	}
	if tags {
		head += "TAGS\t"
	}
	fmt.Fprintln(tw, head+"COMMAND")
	for _, j := range jobs {
		used, limit, _ := j.CountedAttempts()
		state := stateAt(j, now)
		if n, ok := waits[j.ID]; ok && j.State == jobstore.StateWaiting {
			state += " (" + n + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t", j.ID, state, j.Kind)
		if queues {
			fmt.Fprintf(tw, "%s\t", jobstore.QueueOf(j.Queue))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d/%d\t%s\t", j.Priority, orDash(oneLine(j.Key, 24)),
			used, limit, agoCoarse(j.CreatedAt, now))
		if wide {
			fmt.Fprintf(tw, "%s\t%s\t%s\t", orDash(j.Worker), runTime(j, now), orDash(oneLine(plainMessage(j.LastError), 40)))
		}
		if tags {
			fmt.Fprintf(tw, "%s\t", orDash(oneLine(strings.Join(j.Tags, ","), 40)))
		}
		fmt.Fprintln(tw, orDash(oneLine(describeWork(j), 60)))
	}
	return tw.Flush()
}
