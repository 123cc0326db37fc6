package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/jobstore"
)

func (a *app) getCommand() *cobra.Command {
	var (
		asJSON bool
		ja     jobArg
	)
	cmd := &cobra.Command{
		Use:   "get ID | --key KEY",
		Short: "Show one job",
		Long: `Show everything known about one job: its state, command, attempts, times,
result or last error, and where its log is.

A job submitted with --after or --after-key lists its dependencies, each with
its ID, state and command, and a job that waits for them says for how many:
"waiting for 3 of 5 jobs" (those that have not ended, of all). A job that
other jobs wait for lists them as its dependents. A job of a batch (--batch-id)
says how many jobs the batch has and whether its callback closed it. A job
that a failed or canceled dependency canceled says which in its last error.

With --json, the job is printed as the HTTP API sends it (GET /v1/jobs/ID):
the same fields, times in RFC 3339 and the timeout as a duration string such
as "30s". Every command's --json prints a job in this one form.`,
		Example: `  jobdir get 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB
  jobdir get 01jcxz8z        # a unique prefix, in either case
  jobdir get last            # the newest job
  jobdir get --key nightly-report
  jobdir get --json 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB | jq -r .state`,
		Args: ja.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				id, err := ja.resolve(cmd.Context(), a, st, args)
				if err != nil {
					return err
				}
				j, err := st.Get(cmd.Context(), id)
				if err != nil {
					return a.explainJob(id, err)
				}
				if asJSON {
					return writeJobJSON(a.stdout, j)
				}
				logPath := ""
				switch {
				case j.Kind != execjob.Kind || j.Attempt == 0:
				case st.pg != nil:
					logPath = "in the database (jobdir logs " + j.ID + ")"
				default:
					logPath, _ = execjob.LogPath(st.logDir(), j.ID)
				}
				links, err := readLinks(cmd.Context(), st.Store, j)
				if err != nil {
					return err
				}
				return printJob(a.stdout, j, logPath, links, time.Now())
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as JSON, as the HTTP API sends it")
	ja.register(cmd)
	return cmd
}

func (a *app) listCommand() *cobra.Command {
	var (
		states []string
		kind   string
		queue  string
		tag    string
		limit  int
		oldest bool
		asJSON bool
		output string
		format string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first",
		Long: `List jobs, newest first (--oldest-first to reverse), as a table, as a JSON
array of jobs with --json (each in the form of jobdir get --json, which is
the HTTP API's), or as --format, a Go template applied to each job (its
fields are those of jobdir get --json, named as in Go: .ID, .State, .Kind,
.Key, .Priority, .Attempt, .MaxAttempts, .RunAt, .Timeout, .LastError,
.After, .Batch, ...).

The table gives each job's ID, state, kind, queue (when a job is in a queue
other than the default one), priority, key, attempts, age and command; -o
wide adds the worker, how long the latest attempt ran, and the
start of the last error. A queued job that is not due yet shows as
"scheduled (in 5m)", or "retrying (in 30s, attempt 2/3)" when it waits to be
tried again. A job that waits for other jobs (jobdir submit --after) shows as
"waiting (3/5)": 3 of its 5 dependencies have not ended yet.

--state keeps jobs in the given states: repeat it or separate states with
commas. The states are waiting (for other jobs to end), queued, running,
succeeded, failed and canceled; queued is the jobs due now, and scheduled
and retrying the queued jobs that wait for their time.
At most --limit jobs are listed (100 by default); when more match, a line on
stderr says how many more. --limit 0 lists every job.`,
		Example: `  jobdir list
  jobdir list --state queued,running -o wide
  jobdir list --state waiting
  jobdir list --format '{{.ID}} {{.State}} {{.Attempt}}'
  jobdir list --state failed --json | jq -r '.[].id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := jobstore.ListOptions{Kind: kind, Queue: queue, Tag: tag}
			if oldest {
				opts.Order = jobstore.OldestFirst
			}
			sf, err := parseStates(states, jobstore.States(), "listed")
			if err != nil {
				return usagef("--state %v", err)
			}
			opts.States = sf.states
			keep := sf.keep()
			if kind != "" {
				if err := jobstore.ValidateKind(kind); err != nil {
					return usagef("--kind: %v", err)
				}
			}
			if queue != "" {
				if err := jobstore.ValidateQueue(queue); err != nil {
					return usagef("--queue: %v", err)
				}
			}
			if tag != "" {
				if err := jobstore.ValidateTag(tag); err != nil {
					return usagef("--tag: %v", err)
				}
			}
			if limit < 0 {
				return usagef("--limit must not be negative")
			}
			if output != "" && output != "wide" {
				return usagef("-o %q: the only output is wide (or --json, --format)", output)
			}
			var tmpl *template.Template
			if format != "" {
				var err error
				if tmpl, err = template.New("format").Parse(format); err != nil {
					return usagef("--format: %v", strings.TrimPrefix(err.Error(), "template: format:"))
				}
			}
			if asJSON && format != "" {
				return usagef("--json and --format cannot be used together")
			}
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				jobs, more, err := listJobs(cmd.Context(), st, opts, keep, limit, func(err error) {
					fmt.Fprintf(a.stderr, "jobdir: skipped: %s\n", plainMessage(err.Error()))
				})
				if err != nil {
					return err
				}
				switch {
				case asJSON:
					err = writeJSON(a.stdout, apiJobs(jobs))
				case tmpl != nil:
					for _, j := range apiJobs(jobs) {
						if err = tmpl.Execute(a.stdout, j); err != nil {
							return fmt.Errorf("--format: %s", strings.TrimPrefix(err.Error(), "template: format:"))
						}
						fmt.Fprintln(a.stdout)
					}
				default:
					var waits map[string]string
					if waits, err = waitCounts(cmd.Context(), st.Store, jobs); err != nil {
						return err
					}
					err = printTable(a.stdout, jobs, waits, time.Now(), output == "wide")
				}
				if err != nil || !more {
					return err
				}
				fmt.Fprintln(a.stderr, moreLine(cmd.Context(), st, opts, keep != nil || queue != "" || tag != "", len(jobs)))
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "only jobs in this `STATE` (repeatable, or comma-separated): waiting (for other jobs), queued (due now), scheduled, retrying (waiting for their time), running, succeeded, failed, canceled")
	f.StringVar(&kind, "kind", "", "only jobs of this `KIND`")
	f.StringVar(&queue, "queue", "", "only jobs of this `QUEUE`")
	f.StringVar(&tag, "tag", "", "only jobs with this `TAG` (jobdir submit --tag)")
	f.IntVar(&limit, "limit", jobstore.DefaultListLimit, "at most `N` jobs (0: all)")
	f.BoolVar(&oldest, "oldest-first", false, "list the oldest jobs first")
	f.BoolVar(&asJSON, "json", false, "print a JSON array of jobs, each as the HTTP API sends it")
	f.StringVarP(&output, "output", "o", "", "wide: add the worker, duration and last error columns")
	f.StringVar(&format, "format", "", "print each job with this Go `TEMPLATE`, e.g. '{{.ID}} {{.State}}'")
	return cmd
}

// moreLine says how many jobs matching opts were left out of a list of
// shown, from the store's counts (by state, and by kind with --kind),
// which cannot tell queued jobs that are due from those that wait
// (filtered).
func moreLine(ctx context.Context, st jobstore.Client, opts jobstore.ListOptions, filtered bool, shown int) string {
	const more = "; use --limit 0 to list them all, or --limit N"
	if filtered {
		return "more jobs" + more
	}
	s, err := st.Stats(ctx)
	if err != nil {
		return "more jobs" + more
	}
	total := s.Matching(opts.Kind, opts.States)
	if total <= shown {
		return "more jobs" + more // counted while others submitted or pruned
	}
	return fmt.Sprintf("%d more%s", total-shown, more)
}

// listJobs pages through st until it has limit jobs (all if limit is 0)
// that keep accepts (nil: all), reporting records the store skipped to
// skipped, and says whether more jobs match. It never returns nil jobs.
func listJobs(ctx context.Context, st jobstore.Client, opts jobstore.ListOptions, keep func(jobstore.Job) bool, limit int, skipped func(error)) ([]jobstore.Job, bool, error) {
	jobs := []jobstore.Job{}
	for {
		opts.Limit = jobstore.MaxListLimit
		if limit > 0 && keep == nil {
			opts.Limit = min(limit-len(jobs), jobstore.MaxListLimit)
		}
		page, err := st.List(ctx, opts)
		if err != nil {
			return nil, false, err
		}
		for _, e := range page.Errors {
			skipped(e)
		}
		for _, j := range page.Jobs {
			if keep != nil && !keep(j) {
				continue
			}
			if limit > 0 && len(jobs) == limit {
				return jobs, true, nil // one more matches
			}
			jobs = append(jobs, j)
		}
		if page.Next == "" {
			return jobs, false, nil
		}
		if limit > 0 && len(jobs) >= limit && keep == nil {
			// A page that ends exactly at the last job still has a Next
			// in some stores: look.
			opts.Cursor, opts.Limit = page.Next, 1
			next, err := st.List(ctx, opts)
			if err != nil {
				return nil, false, err
			}
			return jobs, len(next.Jobs) > 0, nil
		}
		opts.Cursor = page.Next
	}
}

func (a *app) cancelCommand() *cobra.Command {
	var (
		ja jobArg
		bf bulkFilter
	)
	cmd := &cobra.Command{
		Use:   "cancel ID | --key KEY | --state STATE --kind KIND",
		Short: "Cancel a job",
		Long: `Cancel a job. A waiting or queued job is canceled at once and never runs. A
running job is marked for cancellation; its worker, in whatever process, sends
SIGTERM to every process of the job (those that left its process group too),
then SIGKILL after a grace period, and the job ends canceled. Canceling a
canceled job does nothing; a job that already succeeded or failed cannot be
canceled.

The jobs that wait for a canceled job (jobdir submit --after) are canceled too,
and the jobs that wait for those, unless they were submitted with --after-any.

With --state or --kind instead of an ID, cancel every waiting, queued or
running job in those states and of that kind: jobdir says how many, asks
before it goes on (--yes does not ask), then says how many it canceled.`,
		Example: `  jobdir cancel 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB
  jobdir cancel 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB && jobdir wait 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB
  jobdir cancel --key deploy-42
  jobdir cancel --state queued --kind exec --yes`,
		Args: bulkArgs(&bf, &ja),
		RunE: func(cmd *cobra.Command, args []string) error {
			if bf.set() {
				opts, f, err := bf.options([]jobstore.State{jobstore.StateWaiting, jobstore.StateQueued, jobstore.StateRunning})
				if err != nil {
					return err
				}
				return a.withStore(cmd.Context(), func(st *cliStore) error {
					return a.bulk(cmd.Context(), st, &bf, opts, f, "cancel", "canceled", st.Cancel)
				})
			}
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				id, err := ja.resolve(cmd.Context(), a, st, args)
				if err != nil {
					return err
				}
				j, err := st.Cancel(cmd.Context(), id)
				if err != nil {
					return a.explainJob(id, err)
				}
				msg := "canceled"
				if j.State == jobstore.StateRunning {
					msg = "cancel requested; its worker is stopping it"
				}
				_, err = fmt.Fprintf(a.stdout, "%s %s\n", j.ID, msg)
				return err
			})
		},
	}
	ja.register(cmd)
	bf.register(cmd, "cancel")
	return cmd
}

func (a *app) retryCommand() *cobra.Command {
	var (
		ja jobArg
		bf bulkFilter
	)
	cmd := &cobra.Command{
		Use:   "retry ID | --key KEY | --state STATE --kind KIND",
		Short: "Queue a failed or canceled job again",
		Long: `Queue a failed or canceled job again, due now. If its attempts are used up,
it gets one more. To run a job that succeeded again, see jobdir rerun.

A job with dependencies (jobdir submit --after) that have not all ended waits
for them again. A job that was canceled because a dependency failed or was
canceled cannot be retried while that dependency is still so: retry the
dependency first, then the job.

With --state or --kind instead of an ID, retry every failed or canceled job
in those states and of that kind: jobdir says how many, asks before it goes
on (--yes does not ask), then says how many it queued again.`,
		Example: `  jobdir retry 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB
  jobdir retry --key nightly-report
  jobdir retry --state failed --kind exec
  jobdir retry --state failed,canceled --yes`,
		Args: bulkArgs(&bf, &ja),
		RunE: func(cmd *cobra.Command, args []string) error {
			if bf.set() {
				opts, f, err := bf.options([]jobstore.State{jobstore.StateFailed, jobstore.StateCanceled})
				if err != nil {
					return err
				}
				return a.withStore(cmd.Context(), func(st *cliStore) error {
					return a.bulk(cmd.Context(), st, &bf, opts, f, "retry", "queued again", st.Retry)
				})
			}
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				id, err := ja.resolve(cmd.Context(), a, st, args)
				if err != nil {
					return err
				}
				j, err := st.Retry(cmd.Context(), id)
				if err != nil {
					return a.explainJob(id, err)
				}
				used, limit, _ := j.CountedAttempts()
				if j.State == jobstore.StateWaiting {
					_, err = fmt.Fprintf(a.stdout, "%s waits for its dependencies again (attempt %d of %d next)\n", j.ID, used+1, limit)
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "%s queued (attempt %d of %d next)\n", j.ID, used+1, limit)
				return err
			})
		},
	}
	bf.register(cmd, "retry")
	ja.register(cmd)
	return cmd
}

func (a *app) waitCommand() *cobra.Command {
	var (
		timeout time.Duration
		asJSON  bool
		ja      jobArg
	)
	cmd := &cobra.Command{
		Use:   "wait ID | --key KEY",
		Short: "Wait until a job has finished",
		Long: `Wait until a job has finished, wherever it runs, and print its final state
(the job as JSON with --json, in the form of jobdir get --json). The exit status says how it ended:

  0  the job succeeded
  1  an error (for example, no such job)
  3  the job failed (its last error is printed on stderr)
  4  the job was canceled
  5  --timeout passed before the job finished

While it waits, it says on stderr when the job waits for its time (scheduled, or
a retry) or for other jobs to end (jobdir submit --after), and when a due job
has stayed queued for 10s: no worker is taking it, because none runs on this
store, none takes its kind, or every one is busy.`,
		Example: `  jobdir wait 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB
  jobdir wait --timeout 10m "$(jobdir submit -- make release)" || echo "release did not succeed"`,
		Args: ja.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usagef("--timeout must not be negative")
			}
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				id, err := ja.resolve(cmd.Context(), a, st, args)
				if err != nil {
					return err
				}
				ctx := cmd.Context()
				if timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeoutCause(ctx, timeout, errWaitTimeout)
					defer cancel()
				}
				stopHint := a.hintUnclaimed(ctx, st, id)
				j, err := st.Wait(ctx, id)
				stopHint()
				if err != nil {
					if errors.Is(context.Cause(ctx), errWaitTimeout) && cmd.Context().Err() == nil {
						cur, gerr := st.Get(cmd.Context(), id)
						state := "not finished"
						if gerr == nil {
							state = "still " + stateText(cur)
						}
						return &exitStatusError{code: exitTimeout, err: fmt.Errorf("job %s: %s after %s", id, state, timeout)}
					}
					return a.explainJob(id, err)
				}
				if asJSON {
					err = writeJobJSON(a.stdout, j)
				} else {
					_, err = fmt.Fprintln(a.stdout, j.State)
				}
				if err != nil {
					return err
				}
				return jobResult(j)
			})
		},
	}
	durationVar(cmd.Flags(), &timeout, "timeout", 0, "give up after this long, with exit status 5 (default: wait forever)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the finished job as JSON, as the HTTP API sends it")
	ja.register(cmd)
	return cmd
}

var errWaitTimeout = errors.New("wait timeout")
