package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/jobstore"
)

func (a *app) batchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "Look at batches of jobs",
		Long: `A batch is a named group of jobs: jobdir submit --batch-id NAME adds a job to
it, and jobdir submit --after-batch NAME submits its callback, a job that runs
once every job of the batch ended, however they ended. Submitting a callback
closes the batch: no job may join it after that. A batch exists from its first
job until all its jobs are pruned.`,
		Example: `  jobdir submit --batch-id nightly -- ./export.sh part-1
  jobdir submit --batch-id nightly -- ./export.sh part-2
  jobdir submit --after-batch nightly -- ./merge-exports.sh
  jobdir batch status nightly`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(a.batchStatusCommand())
	return cmd
}

func (a *app) batchStatusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Count a batch's jobs by state",
		Long: `Say how many jobs batch NAME has, how many of them are in each state and how
many ended, whether a callback closed it, and its callbacks with their states.

With --json, print the batch as GET /v1/batches/NAME sends it:
{"batch": NAME, "total": N, "states": {STATE: N, ...}, "closed": true|false,
"callbacks": [ID, ...]}, a state without jobs, and callbacks when there are
none, left out.

A batch no job was ever submitted to (or whose jobs were all pruned) is an
error: exit status 1.`,
		Example: `  jobdir batch status nightly
  jobdir batch status nightly --json | jq .states.failed`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("batch status needs exactly one batch NAME, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := jobstore.ValidateBatchName(name); err != nil {
				return usagef("%v", err)
			}
			ctx := cmd.Context()
			return a.withStore(ctx, func(st *cliStore) error {
				dr, ok := st.Store.(jobstore.DependencyReader)
				if !ok {
					return fmt.Errorf("the store %s keeps no batches", st.name)
				}
				b, err := dr.Batch(ctx, name)
				if errors.Is(err, jobstore.ErrNotFound) {
					return &plainError{err: err, msg: fmt.Sprintf("no batch %q in the store %s: no job was ever submitted to it, or all of them were pruned", name, st.name),
						hint: "jobdir submit --batch-id " + name + " adds a job to it."}
				}
				if err != nil {
					return err
				}
				if b.States == nil {
					b.States = map[jobstore.State]int{}
				}
				if asJSON {
					return writeJSON(a.stdout, b)
				}
				callbacks := make([]jobstore.Job, 0, len(b.Callbacks))
				for _, id := range b.Callbacks {
					j, err := st.Get(ctx, id)
					switch {
					case errors.Is(err, jobstore.ErrNotFound):
						j = jobstore.Job{ID: id}
					case err != nil:
						return err
					}
					callbacks = append(callbacks, j)
				}
				return printBatch(a.stdout, b, callbacks)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the batch as JSON, as the HTTP API sends it")
	return cmd
}

// printBatch writes batch b for people, with its callbacks as they are
// now (one that no longer exists has only its ID).
func printBatch(w io.Writer, b jobstore.BatchInfo, callbacks []jobstore.Job) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "batch\t%s\n", b.Name)
	fmt.Fprintf(tw, "jobs\t%d, %d of them ended\n", b.Total, endedJobs(b))
	for _, st := range jobstore.States() {
		fmt.Fprintf(tw, "%s\t%d\n", st, b.States[st])
	}
	if b.Closed {
		fmt.Fprintf(tw, "closed\tyes: its callback was submitted, no job may join\n")
	} else {
		fmt.Fprintf(tw, "closed\tno: jobs may join (jobdir submit --batch-id %s), until a callback is submitted (jobdir submit --after-batch %s)\n", b.Name, b.Name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(callbacks) == 0 {
		return nil
	}
	fmt.Fprintln(w, "Callbacks:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, j := range callbacks {
		state := "gone (pruned or deleted)"
		if j.State != "" {
			state = string(j.State)
		}
		if work := oneLine(describeWork(j), 50); work != "" {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", j.ID, state, work)
		} else {
			fmt.Fprintf(tw, "  %s\t%s\n", j.ID, state)
		}
	}
	return tw.Flush()
}
