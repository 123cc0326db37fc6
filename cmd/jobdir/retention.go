package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/internal/humantime"
	"github.com/jobdir/jobdir/jobstore"
)

func (a *app) retentionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "retention",
		Short: "Show, or set, how long the store keeps finished jobs",
		Long: `Show the store's retention policy: how long it keeps succeeded, failed and
canceled jobs after they finished. Every "jobdir work" and "jobdir serve"
process (unless --no-schedules) prunes, at its start and every minute, the
finished jobs the policy no longer keeps, with their logs, so that no outside
cron is needed to keep the store small. "jobdir retention set" changes it;
"jobdir prune" stays for a prune now. With --json: succeeded, failed and
canceled, each a duration such as "168h0m0s", or null when kept forever.`,
		Example: `  jobdir retention
  jobdir retention set --succeeded 7d --failed 30d --canceled 7d
  jobdir retention set --failed 0      # keep failed jobs forever`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				rk, err := retentionKeeper(st)
				if err != nil {
					return err
				}
				r, err := rk.Retention(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(a.stdout, retentionView(r))
				}
				return printRetention(a.stdout, r)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the policy as JSON")
	cmd.AddCommand(a.retentionSetCommand())
	return cmd
}

func (a *app) retentionSetCommand() *cobra.Command {
	var succeeded, failed, canceled time.Duration
	cmd := &cobra.Command{
		Use:   "set [--succeeded D] [--failed D] [--canceled D]",
		Short: "Set how long the store keeps finished jobs of each end state",
		Long: `Set how long the store keeps the jobs of each end state after they finished:
the workers and servers of the store prune the older ones, with their logs.
Only the states given change; 0 keeps that state's jobs forever. A duration is
at least 1m, such as 12h, 7d or 2w.`,
		Example: `  jobdir retention set --succeeded 7d --failed 30d --canceled 7d
  jobdir retention set --succeeded 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			if !f.Changed("succeeded") && !f.Changed("failed") && !f.Changed("canceled") {
				return usagef("retention set needs --succeeded, --failed or --canceled (0 keeps those jobs forever)")
			}
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				rk, err := retentionKeeper(st)
				if err != nil {
					return err
				}
				r, err := rk.Retention(cmd.Context())
				if err != nil {
					return err
				}
				if f.Changed("succeeded") {
					r.Succeeded = succeeded
				}
				if f.Changed("failed") {
					r.Failed = failed
				}
				if f.Changed("canceled") {
					r.Canceled = canceled
				}
				if err := r.Validate(); err != nil {
					return usagef("%v", err)
				}
				if err := rk.SetRetention(cmd.Context(), r); err != nil {
					return err
				}
				return printRetention(a.stdout, r)
			})
		},
	}
	f := cmd.Flags()
	durationVar(f, &succeeded, "succeeded", 0, "keep succeeded jobs this long after they finished, e.g. 7d (0: forever)")
	durationVar(f, &failed, "failed", 0, "keep failed jobs this long after they finished, e.g. 30d (0: forever)")
	durationVar(f, &canceled, "canceled", 0, "keep canceled jobs this long after they finished, e.g. 7d (0: forever)")
	return cmd
}

// retentionKeeper returns st as a jobstore.RetentionKeeper.
func retentionKeeper(st *cliStore) (jobstore.RetentionKeeper, error) {
	rk, ok := st.Store.(jobstore.RetentionKeeper)
	if !ok {
		return nil, fmt.Errorf("the store %s keeps no retention policy", st.name)
	}
	return rk, nil
}

// retentionView is the policy as retention --json prints it.
func retentionView(r jobstore.Retention) map[string]*string {
	v := map[string]*string{}
	for _, st := range []jobstore.State{jobstore.StateSucceeded, jobstore.StateFailed, jobstore.StateCanceled} {
		v[string(st)] = nil
		if d := r.Of(st); d > 0 {
			s := d.String()
			v[string(st)] = &s
		}
	}
	return v
}

// printRetention writes the policy for people.
func printRetention(w io.Writer, r jobstore.Retention) error {
	for _, st := range []jobstore.State{jobstore.StateSucceeded, jobstore.StateFailed, jobstore.StateCanceled} {
		keep := "forever"
		if d := r.Of(st); d > 0 {
			keep = humantime.Duration(d) + " after they finished"
		}
		if _, err := fmt.Fprintf(w, "%-9s jobs are kept %s\n", st, keep); err != nil {
			return err
		}
	}
	return nil
}

// logPruner removes the logs of the jobs a retention pass pruned, one pass
// at a time, off the runner's goroutine.
type logPruner struct {
	st      *cliStore
	running sync.Mutex
}

// pruned starts removing the logs of jobs that are gone, unless a pass
// is under way.
func (p *logPruner) pruned(ctx context.Context) {
	if !p.running.TryLock() {
		return
	}
	go func() {
		defer p.running.Unlock()
		_, _ = pruneLogs(ctx, p.st)
	}()
}
