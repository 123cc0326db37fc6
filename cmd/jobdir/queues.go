package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/internal/humantime"
	"github.com/jobdir/jobdir/jobstore"
)

func (a *app) queueCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "List, pause and resume queues",
		Long: `Every job is in a queue: the one its submit named (--queue), or the queue
named default. A queue exists once a job or a setting names it.

"jobdir queue list" shows each queue, whether it is paused, and how many of its
jobs wait and run. "jobdir queue pause Q" stops every worker, in every process
on the store, from starting jobs of Q: once the command returns, no job of Q
starts until "jobdir queue resume Q". Jobs of Q that run go on, and submits to
Q are accepted; they wait. After a resume, waiting workers start Q's due jobs
at once.

A pause is kept in the store: it holds across restarts, and every process sees
it, including those that start later.`,
		Example: `  jobdir queue list
  jobdir queue pause emails     # the mail provider is down
  jobdir queue resume emails
  jobdir queue list --json | jq '.[] | select(.paused) | .queue'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(a.queueListCommand(), a.queuePauseCommand(true), a.queuePauseCommand(false))
	return cmd
}

func (a *app) queueListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the queues, with their settings and jobs",
		Long: `List every queue that has jobs or settings: its name, whether it is paused,
how many of its jobs are queued and running, and how long its longest-waiting
due job has waited. With --json, an array of objects with the fields queue,
paused, queued, running and oldest_due_at (as GET /v1/queues sends them).`,
		Example: `  jobdir queue list
  jobdir queue list --json | jq -r '.[] | select(.paused) | .queue'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				qc, err := queueController(st)
				if err != nil {
					return err
				}
				qs, err := qc.Queues(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(a.stdout, httpapi.QueuesResponse{Queues: qs}.Queues)
				}
				return printQueues(a.stdout, qs, time.Now())
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the queues as JSON")
	return cmd
}

func (a *app) queuePauseCommand(pause bool) *cobra.Command {
	use, short, done := "resume QUEUE", "Let the workers start a queue's jobs again", "resumed"
	long := `Let the workers of every process start the jobs of a paused queue again. The
workers that wait for work start its due jobs at once. Resuming a queue that
is not paused changes nothing.`
	example := `  jobdir queue resume emails`
	if pause {
		use, short, done = "pause QUEUE", "Stop the workers, in every process, from starting a queue's jobs", "paused"
		long = `Stop every worker, in every process on the store, from starting jobs of
QUEUE: once this command returns, none starts until "jobdir queue resume".
Jobs of QUEUE that run go on, and submits to it are accepted: they wait. The
pause is kept in the store, for the workers that start later too. Any queue
name may be paused, whether or not a job names it yet.`
		example = `  jobdir queue pause emails
  jobdir queue pause deploys && ./maintenance.sh; jobdir queue resume deploys`
	}
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("%s needs one QUEUE, the name of the queue", cmd.Name())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := jobstore.ValidateQueue(q); err != nil {
				return usagef("%v", err)
			}
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				qc, err := queueController(st)
				if err != nil {
					return err
				}
				change := qc.ResumeQueue
				if pause {
					change = qc.PauseQueue
				}
				if err := change(cmd.Context(), q); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "queue %s %s\n", q, done)
				return nil
			})
		},
	}
}

// queueController returns the store's queue settings, or says in plain
// words that it keeps none.
func queueController(st *cliStore) (jobstore.QueueController, error) {
	qc, ok := st.Store.(jobstore.QueueController)
	if !ok {
		return nil, fmt.Errorf("the store %s keeps no queue settings", st.name)
	}
	return qc, nil
}

// printQueues writes qs for people.
func printQueues(w io.Writer, qs []jobstore.QueueInfo, now time.Time) error {
	if len(qs) == 0 {
		_, err := fmt.Fprintln(w, `No queues yet: a queue exists once a job is submitted to it ("jobdir submit --queue Q").`)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tSTATE\tQUEUED\tRUNNING\tOLDEST WAIT")
	for _, q := range qs {
		state := "running"
		if q.Paused {
			state = "paused"
		}
		oldest := "-"
		if !q.OldestDueAt.IsZero() {
			oldest = humantime.Duration(max(now.Sub(q.OldestDueAt), 0))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", q.Queue, state, q.Queued, q.Running, oldest)
	}
	return tw.Flush()
}
