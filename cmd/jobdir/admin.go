package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/internal/humantime"
	"github.com/jobdir/jobdir/jobstore"
)

func (a *app) statsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count jobs by state",
		Long: `Say which store this is, count the jobs in each state, say how long the
oldest due job has been waiting in the queue (a growing wait means the
workers do not keep up), and count the jobs of each kind by state, with the
wait of each kind's oldest due job; the same for each queue when jobs are in
queues other than the default one, or a queue is paused. Then name the paused
queues (see "jobdir queue") and the kinds whose queued jobs no live worker
runs (see "jobdir workers").`,
		Example: `  jobdir stats
  jobdir stats --json | jq .counts.queued`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				s, err := st.Stats(cmd.Context())
				if err != nil {
					return err
				}
				unserved, err := unservedKinds(cmd.Context(), st.Store, s)
				if err != nil {
					return err
				}
				paused, err := pausedQueues(cmd.Context(), st.Store)
				if err != nil {
					return err
				}
				now := time.Now()
				if asJSON {
					out := struct {
						Store string `json:"store"`
						jobstore.Stats
						OldestQueuedAgeSeconds float64  `json:"oldest_queued_age_seconds"`
						UnservedKinds          []string `json:"unserved_kinds"`
						PausedQueues           []string `json:"paused_queues"`
					}{Store: st.name, Stats: s, UnservedKinds: unserved, PausedQueues: paused}
					if !s.OldestQueuedAt.IsZero() {
						out.OldestQueuedAgeSeconds = now.Sub(s.OldestQueuedAt).Seconds()
					}
					return writeJSON(a.stdout, out)
				}
				return printStats(a.stdout, st.name, s, unserved, paused, now)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the counts as JSON")
	return cmd
}

// unservedKinds returns the kinds of s that have queued jobs and no live
// worker of store (see jobstore.UnservedKinds), never nil; none if the
// store keeps no list of workers.
func unservedKinds(ctx context.Context, store jobstore.Store, s jobstore.Stats) ([]string, error) {
	reg, ok := store.(jobstore.WorkerRegistry)
	if !ok {
		return []string{}, nil
	}
	ws, err := reg.Workers(ctx)
	if err != nil {
		return nil, err
	}
	return jobstore.UnservedKinds(s, ws), nil
}

// pausedQueues returns the paused queues of store, sorted, never nil; none
// if the store keeps no queue settings.
func pausedQueues(ctx context.Context, store jobstore.Store) ([]string, error) {
	qc, ok := store.(jobstore.QueueController)
	if !ok {
		return []string{}, nil
	}
	qs, err := qc.Queues(ctx)
	if err != nil {
		return nil, err
	}
	paused := []string{}
	for _, q := range qs {
		if q.Paused {
			paused = append(paused, q.Queue)
		}
	}
	return paused, nil
}

// printStats writes the stats of the store in dir for people, with the
// paused queues and the kinds no live worker runs.
func printStats(w io.Writer, dir string, s jobstore.Stats, unserved, paused []string, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "store\t%s\n", dir)
	for _, state := range jobstore.States() {
		fmt.Fprintf(tw, "%s\t%d\n", state, s.Counts[state])
	}
	var oldest string
	switch queued := s.Counts[jobstore.StateQueued]; {
	case !s.OldestQueuedAt.IsZero():
		oldest = "waiting " + humantime.Duration(now.Sub(s.OldestQueuedAt)) +
			" (due since " + s.OldestQueuedAt.Local().Format("2006-01-02 15:04:05") + ")"
	case queued > 0:
		oldest = "none: the queued job waits for its time or a retry"
		if queued > 1 {
			oldest = fmt.Sprintf("none: the %d queued jobs wait for their time or a retry", queued)
		}
	default:
		oldest = "none: no job is queued"
	}
	fmt.Fprintf(tw, "oldest due job\t%s\n", oldest)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Kinds) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	if err := printCounts(w, "KIND", s.Kinds, s.OldestQueuedByKind, now); err != nil {
		return err
	}
	_, others := s.Queues[jobstore.DefaultQueue]
	others = len(s.Queues) > 1 || (len(s.Queues) == 1 && !others)
	if others || len(paused) > 0 {
		fmt.Fprintln(w)
		if err := printCounts(w, "QUEUE", s.Queues, s.OldestQueuedByQueue, now); err != nil {
			return err
		}
	}
	if len(paused) > 0 {
		fmt.Fprintf(w, "\nPaused queues, whose jobs no worker starts until \"jobdir queue resume\": %s\n", strings.Join(paused, ", "))
	}
	printUnserved(w, unserved)
	return nil
}

// printCounts writes a table of the jobs of each kind or queue (what
// heads its first column) by state, with the wait of its oldest due job.
func printCounts(w io.Writer, what string, counts map[string]map[jobstore.State]int, oldestDue map[string]time.Time, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, what)
	for _, state := range jobstore.States() {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(string(state)))
	}
	fmt.Fprintln(tw, "\tOLDEST DUE")
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprint(tw, name)
		for _, state := range jobstore.States() {
			fmt.Fprintf(tw, "\t%d", counts[name][state])
		}
		oldest := "-"
		if at, ok := oldestDue[name]; ok {
			oldest = "waiting " + humantime.Duration(now.Sub(at))
		}
		fmt.Fprintf(tw, "\t%s\n", oldest)
	}
	return tw.Flush()
}

func (a *app) pruneCommand() *cobra.Command {
	var (
		olderThan time.Duration
		states    []string
	)
	cmd := &cobra.Command{
		Use:   "prune --older-than DURATION [--state STATE]",
		Short: "Delete finished jobs older than a given age",
		Long: `Delete the jobs that finished (succeeded, failed or canceled) more than
--older-than ago, with their logs. Their idempotency keys become free again.
Waiting, queued and running jobs are never pruned, nor a finished job that a
waiting job depends on (jobdir submit --after) until that job no longer waits. --state prunes only the finished
jobs in the given states (repeat it, or separate states with commas).`,
		Example: `  jobdir prune --older-than 1w     # 7d, 168h
  jobdir prune --older-than 0       # every finished job
  jobdir prune --older-than 1d --state succeeded   # keep failures for a look`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("older-than") {
				return usagef("prune needs --older-than, for example --older-than 7d")
			}
			if olderThan < 0 {
				return usagef("--older-than must not be negative")
			}
			var only []jobstore.State
			for _, s := range states {
				for _, name := range strings.Split(s, ",") {
					st, err := jobstore.ParseState(strings.TrimSpace(name))
					if err != nil {
						return usagef("--state: %v", err)
					}
					if !st.Terminal() {
						return usagef("--state %s: only succeeded, failed or canceled jobs are pruned", st)
					}
					only = append(only, st)
				}
			}
			ctx := cmd.Context()
			return a.withStore(ctx, func(st *cliStore) error {
				var n int
				var err error
				if sp, ok := st.Store.(jobstore.StatePruner); ok {
					n, err = sp.PruneStates(ctx, olderThan, only)
				} else if len(only) > 0 {
					return errors.New("this store cannot prune by state")
				} else {
					n, err = st.Prune(ctx, olderThan)
				}
				if err != nil {
					return err
				}
				if st.file == nil {
					// PostgreSQL deletes a job's log with the job.
					_, err = fmt.Fprintf(a.stdout, "pruned %d jobs\n", n)
					return err
				}
				logs, err := pruneLogs(ctx, st)
				fmt.Fprintf(a.stdout, "pruned %s and %s\n", plural(int64(n), "job"), plural(int64(logs), "log"))
				return err
			})
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "prune only finished jobs in this `STATE` (repeatable, or comma-separated)")
	durationVar(cmd.Flags(), &olderThan, "older-than", 0, "prune jobs that finished longer ago than this, e.g. 72h, 7d or 2w")
	return cmd
}

// pruneLogs removes the logs of jobs that no longer exist and returns how
// many it removed.
func pruneLogs(ctx context.Context, st *cliStore) (int, error) {
	dir := st.logDir()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("prune logs: %w", err)
	}
	n := 0
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || jobstore.ValidateID(id) != nil || !e.Type().IsRegular() {
			continue
		}
		if _, err := st.Get(ctx, id); !errors.Is(err, jobstore.ErrNotFound) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err == nil {
			n++
		} else if !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("prune logs: %w", err)
		}
	}
	return n, nil
}

func (a *app) fsckCommand() *cobra.Command {
	var repair bool
	cmd := &cobra.Command{
		Use:   "fsck",
		Short: "Check the store, and repair it with --repair",
		Long: `Check every record, key file and temporary file of the store and list the
problems found: what a crash leaves behind (temporary files, stale copies,
dangling keys, jobs of dead workers, and records a power cut left empty or
cut short, which --repair moves into the store's quarantine/ directory),
misplaced records and missing key files, which --repair fixes as opening the
store does; and corrupt records and unexpected files, which are only
reported, with their paths, for a person to look at. It is safe to run while
other processes use the store.

Exits 0 when nothing is wrong or everything found was repaired, and 1
otherwise.

fsck checks only a file store: on a PostgreSQL store, which the database
keeps consistent, it says so and exits 1.`,
		Example: `  jobdir fsck
  jobdir fsck --repair`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				if st.file == nil {
					return fmt.Errorf("fsck checks the files of a file store; %s is a PostgreSQL store, which the database keeps consistent "+
						"(its constraints and transactions), so there is nothing for fsck to check", st.name)
				}
				r, err := st.file.Fsck(cmd.Context(), repair)
				for _, p := range r.Problems {
					fmt.Fprintln(a.stdout, p.String())
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "checked %d records: %d problems", r.Records, len(r.Problems))
				repaired := 0
				for _, p := range r.Problems {
					if p.Repaired {
						repaired++
					}
				}
				if repair {
					fmt.Fprintf(a.stdout, ", %d repaired", repaired)
				}
				fmt.Fprintln(a.stdout)
				if r.OK() {
					return nil
				}
				hint := "run jobdir fsck --repair to fix what can be fixed"
				if repair {
					hint = "corrupt records and unexpected files are never removed automatically: inspect and remove them by hand"
				}
				return &exitStatusError{code: exitError, err: fmt.Errorf("%d problems left; %s", len(r.Problems)-repaired, hint)}
			})
		},
	}
	cmd.Flags().BoolVar(&repair, "repair", false, "fix what can be fixed safely")
	return cmd
}
