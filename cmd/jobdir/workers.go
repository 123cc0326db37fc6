package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
)

func (a *app) workersCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List the live workers and what they run",
		Long: `List the workers that serve the store now, in every process on it ("jobdir
work", "jobdir serve --work", and programs that embed a runner): each one's
name, host, process ID, the kinds it runs, the queues it takes, how many jobs it runs of how many
it may run at once, since when, and its version. Then name the kinds that have
queued jobs but no live worker to run them.

A worker is listed while its process lives: one that was killed is gone at
once on a file store, and within its lease on PostgreSQL. A process that is
stopped (SIGSTOP) but alive stays listed on a file store. The workers that
ended in the last 15 minutes (stopped, or found dead) are listed after, with
when; "jobdir submit" counts them as serving their kinds, so that a job
submitted while its only worker restarts gets no warning.`,
		Example: `  jobdir workers
  jobdir workers --json | jq '.workers[].id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				// The body of GET /v1/workers.
				v, err := httpapi.Workers(cmd.Context(), st.Store)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(a.stdout, v)
				}
				return printWorkers(a.stdout, v, time.Now())
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the workers as JSON")
	return cmd
}

// jobServed reports whether a live or recent worker of store (see
// jobstore.RecentWorkers) runs jobs of kind in queue; true if the store
// keeps no list of workers, which cannot tell.
func jobServed(ctx context.Context, store jobstore.Store, queue, kind string) (bool, error) {
	reg, ok := store.(jobstore.WorkerRegistry)
	if !ok {
		return true, nil
	}
	ws, err := jobstore.RecentWorkers(ctx, reg, time.Now())
	if err != nil {
		return false, err
	}
	return jobstore.AnyServesJob(ws, queue, kind), nil
}

// printWorkers writes v for people.
func printWorkers(w io.Writer, v httpapi.WorkersResponse, now time.Time) error {
	if len(v.Workers) == 0 {
		fmt.Fprintln(w, `No live workers. Start one with "jobdir work".`)
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKER\tHOST\tPID\tKINDS\tQUEUES\tRUNNING\tSTARTED\tVERSION")
		for _, wk := range v.Workers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", wk.ID, dash(wk.Host), dash(pidText(wk.PID)),
				kindsText(wk.Kinds), kindsText(wk.Queues), len(wk.Running), wk.Concurrency, agoCoarse(wk.StartedAt, now), dash(wk.Version))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(v.Ended) > 0 {
		fmt.Fprintln(w, "\nEnded in the last 15 minutes:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKER\tHOST\tPID\tKINDS\tQUEUES\tSTARTED\tENDED\tVERSION")
		for _, wk := range v.Ended {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", wk.ID, dash(wk.Host), dash(pidText(wk.PID)),
				kindsText(wk.Kinds), kindsText(wk.Queues), agoCoarse(wk.StartedAt, now), agoCoarse(wk.EndedAt, now), dash(wk.Version))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	printUnserved(w, v.UnservedKinds)
	if len(v.UnservedQueues) > 0 {
		fmt.Fprintf(w, "\nNo live worker takes these queues, whose queued jobs wait: %s (\"jobdir work --queue\")\n", strings.Join(v.UnservedQueues, ", "))
	}
	return nil
}

// printUnserved names, after a blank line, the kinds whose queued jobs no
// live worker runs, if there are any.
func printUnserved(w io.Writer, kinds []string) {
	if len(kinds) > 0 {
		fmt.Fprintf(w, "\nNo live worker runs these kinds, whose queued jobs wait: %s\n", strings.Join(kinds, ", "))
	}
}

// kindsText lists a worker's kinds (or queues) for a table: "any" for
// every kind.
func kindsText(kinds []string) string {
	if len(kinds) == 0 {
		return "any"
	}
	return strings.Join(kinds, ",")
}

func pidText(pid int) string {
	if pid == 0 {
		return ""
	}
	return strconv.Itoa(pid)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
