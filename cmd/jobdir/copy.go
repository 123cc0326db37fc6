package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

func (a *app) copyCommand() *cobra.Command {
	var (
		from, to    string
		skipRunning bool
	)
	cmd := &cobra.Command{
		Use:   "copy --from STORE --to STORE",
		Short: "Copy every job from one store to another",
		Long: `Copy every job of the store --from into the store --to, each as it is: its
ID, key, state, attempts, times, payload, result, errors and history, and
the output of exec jobs (the log files of a directory, the logs table of
PostgreSQL). A queue paused in --from is paused in --to too, and a queue's
limits are set in --to too, before any job is copied; if --to cannot keep a
limit, nothing is copied. The schedules of --from that --to lacks are added to
it, with their latest tick fired (a schedule of the same name defined
otherwise stops the copy). A store is a directory (a path or file:///path) or
postgres://USER@HOST/DB?schema=NAME, in either direction: to move from a
directory to PostgreSQL, or back.

It is safe to run again: a job already in --to (by its ID) is left as it
is, and of a log only what --to lacks is copied, so an interrupted copy is
finished by running it again, and nothing is ever copied twice. A job whose key names another job in --to stops the copy
with an error.

Stop the workers of --from first: a job that runs cannot be copied (its
worker holds it, and its outcome would be lost), so copy refuses while one
does. With --skip-running it copies every other job and says how many it
left; copy again once they have finished. A job claimed while the copy runs
may be copied as queued and run in both stores: stop the workers.

After the copy, point every jobdir command, worker and server at --to
(--store or $JOBDIR_STORE).`,
		Example: `  jobdir copy --from /var/lib/jobdir --to 'postgres://jobdir@db.internal/app'
  jobdir copy --from 'postgres://jobdir@db.internal/app?schema=jobdir' --to ./rollback
  jobdir copy --from ./.jobdir --to 'postgres:///test?host=/var/run/postgresql' --skip-running`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" || to == "" {
				return usagef("copy needs --from STORE and --to STORE")
			}
			src, err := parseStoreURL(from)
			if err != nil {
				return usagef("--from: %v", err)
			}
			dst, err := parseStoreURL(to)
			if err != nil {
				return usagef("--to: %v", err)
			}
			if same, err := sameStore(src, dst); err != nil {
				return err
			} else if same {
				return usagef("--from and --to name the same store")
			}
			if src.Kind == fileStore {
				// Opening would make an empty store there.
				if ok, err := filestore.IsStore(src.Dir); err == nil && !ok {
					return fmt.Errorf("--from %s: there is no store there", src.Dir)
				}
			}
			ctx := cmd.Context()
			in, err := a.openAt(ctx, src, true)
			switch {
			case errors.Is(err, pgstore.ErrNoSchema):
				return withHint(fmt.Errorf("--from %s: there is no store there", src.String()),
					"Check the database and the schema parameter of the URL (schema=NAME).")
			case errors.Is(err, pgstore.ErrSchemaTooOld):
				return withHint(fmt.Errorf("--from %s: the store was written by an older jobdir, and copy does not upgrade the store it reads", src.String()),
					"Run another command on it first, such as jobdir stats, which upgrades it; then copy again.")
			case err != nil:
				return err
			}
			defer in.Close()
			out, err := a.openAt(ctx, dst, false)
			if err != nil {
				return err
			}
			defer out.Close()
			return a.copyJobs(ctx, in, out, skipRunning)
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "copy from the store at `STORE` (a directory or a postgres:// URL)")
	f.StringVar(&to, "to", "", "copy into the store at `STORE` (a directory or a postgres:// URL)")
	f.BoolVar(&skipRunning, "skip-running", false, "copy every job but the running ones, instead of refusing while a job runs")
	return cmd
}

// sameStore reports whether two locations name one store.
func sameStore(a, b location) (bool, error) {
	if a.Kind != b.Kind {
		return false, nil
	}
	if a.Kind == postgresStore {
		return a.DSN == b.DSN && cmp.Or(a.Schema, pgstore.DefaultSchema) == cmp.Or(b.Schema, pgstore.DefaultSchema), nil
	}
	x, err := filepath.Abs(a.Dir)
	if err != nil {
		return false, err
	}
	y, err := filepath.Abs(b.Dir)
	if err != nil {
		return false, err
	}
	return x == y, nil
}

// openAt opens the store at loc, as the global flags say for a file
// store. With mustExist, a PostgreSQL store is neither created nor
// upgraded: a schema without a store is refused with an error wrapping
// pgstore.ErrNoSchema, one of an older version with pgstore.ErrSchemaTooOld. (A file store to read from is
// checked with filestore.IsStore first, since Open would make one.)
func (a *app) openAt(ctx context.Context, loc location, mustExist bool) (*cliStore, error) {
	if loc.Kind == postgresStore {
		st, err := pgstore.OpenDSN(ctx, loc.DSN, &pgstore.Options{Schema: loc.Schema, MustExist: mustExist, Logger: a.logger(slog.LevelWarn)})
		if errors.Is(err, pgstore.ErrNoSchema) || errors.Is(err, pgstore.ErrSchemaTooOld) {
			return nil, err
		}
		if err != nil {
			return nil, explainOpenPG(loc, err)
		}
		return &cliStore{Store: st, pg: st, name: loc.String()}, nil
	}
	dir, err := filepath.Abs(loc.Dir)
	if err != nil {
		return nil, fmt.Errorf("store directory %q: %w", loc.Dir, err)
	}
	st, err := filestore.Open(ctx, dir, &filestore.Options{AllowUnsafeFilesystem: a.allowUnsafeFS, GroupAccess: a.groupAccess,
		SyncFS: a.syncFS, Logger: a.logger(slog.LevelWarn)})
	if err != nil {
		return nil, explainOpen(dir, err)
	}
	return &cliStore{Store: st, file: st, name: st.Dir()}, nil
}

// copyJobs copies every job of in that out lacks, oldest first, in
// batches of at most jobstore.MaxImport.
func (a *app) copyJobs(ctx context.Context, in, out *cliStore, skipRunning bool) error {
	im, ok := out.Store.(jobstore.Importer)
	if !ok {
		return fmt.Errorf("the store %s cannot take in jobs", out.name)
	}
	running, _, err := listJobs(ctx, in, jobstore.ListOptions{States: []jobstore.State{jobstore.StateRunning}}, nil, 0, func(error) {})
	if err != nil {
		return fmt.Errorf("read %s: %w", in.name, err)
	}
	if len(running) > 0 && !skipRunning {
		return withHint(fmt.Errorf("%d jobs run in %s (for example %s, by worker %s): nothing copied", len(running), in.name, running[0].ID, running[0].Worker),
			"Stop the workers of the store you copy from and run copy again once no job runs, or pass --skip-running to copy every other job now.")
	}
	settings, err := copySettings(ctx, in, out)
	if err != nil {
		return err
	}
	schedules, err := copySchedules(ctx, in, out)
	if err != nil {
		return err
	}
	var (
		seen, added, skipped, corrupt, logs int
		batch                               []jobstore.Job
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := im.Import(ctx, batch)
		added += n
		if err != nil {
			return fmt.Errorf("copy into %s: %w", out.name, err)
		}
		for _, j := range batch {
			copied, err := copyLog(ctx, in, out, j.ID)
			if err != nil {
				return err
			}
			if copied {
				logs++
			}
		}
		batch = batch[:0]
		return nil
	}
	opts := jobstore.ListOptions{Order: jobstore.OldestFirst, Limit: jobstore.MaxListLimit}
	for {
		page, err := in.List(ctx, opts)
		if err != nil {
			return fmt.Errorf("read %s: %w", in.name, err)
		}
		for _, e := range page.Errors {
			corrupt++
			fmt.Fprintf(a.stderr, "jobdir: not copied: %v\n", e)
		}
		for _, j := range page.Jobs {
			seen++
			if j.State == jobstore.StateRunning {
				skipped++
				continue
			}
			batch = append(batch, j)
			if len(batch) == jobstore.MaxImport {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if page.Next == "" {
			break
		}
		opts.Cursor = page.Next
	}
	if err := flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "copied %d jobs and %d logs from %s to %s; %d jobs were there already\n", added, logs, in.name, out.name, seen-skipped-added)
	if len(settings.paused) > 0 {
		fmt.Fprintf(a.stdout, "paused in %s too: %s\n", out.name, strings.Join(settings.paused, ", "))
	}
	if len(settings.limited) > 0 {
		fmt.Fprintf(a.stdout, "limited in %s too: %s\n", out.name, strings.Join(settings.limited, ", "))
	}
	if len(schedules) > 0 {
		fmt.Fprintf(a.stdout, "schedules in %s too: %s\n", out.name, strings.Join(schedules, ", "))
	}
	if skipped > 0 {
		fmt.Fprintf(a.stdout, "not copied: %d running jobs; run copy again once they have finished\n", skipped)
	}
	if corrupt > 0 {
		return errors.New("some records of the source could not be read and were not copied (see above); run jobdir fsck on it")
	}
	return nil
}

// copiedSettings says which queue settings copySettings copied, for
// people: the paused queues and the limited ones, sorted.
type copiedSettings struct {
	paused, limited []string
}

// copySettings gives the queues of out the settings they have in in: it
// pauses every queue paused in in, and sets every limit, per-partition
// limit and rate set in in. It changes nothing in out if out cannot keep one of
// them.
func copySettings(ctx context.Context, in, out *cliStore) (copiedSettings, error) {
	var c copiedSettings
	src, ok := in.Store.(jobstore.QueueController)
	if !ok {
		return c, nil
	}
	qs, err := src.Queues(ctx)
	if err != nil {
		return c, fmt.Errorf("read %s: %w", in.name, err)
	}
	var limited []jobstore.QueueInfo
	for _, q := range qs {
		if q.Paused {
			c.paused = append(c.paused, q.Queue)
		}
		if q.Limit > 0 || q.PerPartition > 0 || !q.Rate.IsZero() {
			limited = append(limited, q)
			var words []string
			if q.Limit > 0 {
				words = append(words, fmt.Sprintf("at most %d", q.Limit))
			}
			if q.PerPartition > 0 {
				words = append(words, fmt.Sprintf("%d per partition", q.PerPartition))
			}
			if !q.Rate.IsZero() {
				words = append(words, "rate "+q.Rate.String())
			}
			c.limited = append(c.limited, q.Queue+" ("+strings.Join(words, ", ")+")")
		}
	}
	if len(c.paused) == 0 && len(limited) == 0 {
		return c, nil
	}
	dst, ok := out.Store.(jobstore.QueueController)
	if !ok {
		return c, fmt.Errorf("queues %s are paused in %s, and %s keeps no queue settings", strings.Join(c.paused, ", "), in.name, out.name)
	}
	lim, ok := out.Store.(jobstore.QueueLimiter)
	if !ok && len(limited) > 0 {
		return c, withHint(fmt.Errorf("queues %s have limits in %s, and %s keeps no limits: nothing copied", strings.Join(c.limited, ", "), in.name, out.name),
			"Remove the limits in the store you copy from (jobdir queue limit --unlimited Q --per-partition 0 --rate off), or copy into a file store.")
	}
	for _, q := range c.paused {
		if err := dst.PauseQueue(ctx, q); err != nil {
			return c, fmt.Errorf("copy into %s: %w", out.name, err)
		}
	}
	for _, q := range limited {
		if q.Limit > 0 {
			if err := lim.SetQueueLimit(ctx, q.Queue, q.Limit); err != nil {
				return c, fmt.Errorf("copy into %s: %w", out.name, err)
			}
		}
		if q.PerPartition > 0 {
			if err := lim.SetPartitionLimit(ctx, q.Queue, q.PerPartition); err != nil {
				return c, fmt.Errorf("copy into %s: %w", out.name, err)
			}
		}
		if !q.Rate.IsZero() {
			if err := lim.SetQueueRate(ctx, q.Queue, q.Rate); err != nil {
				return c, fmt.Errorf("copy into %s: %w", out.name, err)
			}
		}
	}
	return c, nil
}

// copySchedules adds to out every schedule of in that out lacks, with the
// latest tick it fired (so that out does not fire it again), and returns
// their names. A schedule of out with a name of in's and another
// definition is an error, and nothing is copied; one with the same is
// left as it is.
func copySchedules(ctx context.Context, in, out *cliStore) ([]string, error) {
	src, ok := in.Store.(jobstore.Scheduler)
	if !ok {
		return nil, nil
	}
	all, err := src.Schedules(ctx)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	dst, ok := out.Store.(jobstore.Scheduler)
	if !ok {
		return nil, fmt.Errorf("%s has schedules, and %s keeps none: nothing copied", in.name, out.name)
	}
	var missing []jobstore.ScheduleInfo
	for _, s := range all {
		there, err := dst.GetSchedule(ctx, s.Name)
		switch {
		case errors.Is(err, jobstore.ErrNotFound):
			missing = append(missing, s)
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", out.name, err)
		case !sameSchedule(s.Schedule, there.Schedule):
			return nil, withHint(fmt.Errorf("a schedule named %s is in both stores, defined differently: nothing copied", s.Name),
				"Remove or rename it in one of them (jobdir schedule rm, or schedule add --replace), then copy again.")
		}
	}
	var names []string
	for _, s := range missing {
		if _, err := dst.AddSchedule(ctx, s.Schedule, false); err != nil {
			return names, fmt.Errorf("copy into %s: %w", out.name, err)
		}
		if !s.LastTick.IsZero() {
			if err := dst.RecordTick(ctx, s.Name, s.LastTick, s.LastJob); err != nil {
				return names, fmt.Errorf("copy into %s: %w", out.name, err)
			}
		}
		names = append(names, s.Name)
	}
	return names, nil
}

// sameSchedule reports whether a and b define the same schedule, when
// they were made aside: the same fields, and payloads of the same JSON
// value (a store may keep them in another spelling).
func sameSchedule(a, b jobstore.Schedule) bool {
	a.CreatedAt, b.CreatedAt = time.Time{}, time.Time{}
	var va, vb any
	return jsonValue(a, &va) && jsonValue(b, &vb) && reflect.DeepEqual(va, vb)
}

// jsonValue sets *v to v's JSON as a generic value, and reports success.
func jsonValue(x any, v *any) bool {
	data, err := json.Marshal(x)
	return err == nil && json.Unmarshal(data, v) == nil
}

// copyLog copies what the log of job id in in has and its log in out lacks:
// all of it, or the end that an interrupted copy did not write, and
// reports whether it copied anything.
func copyLog(ctx context.Context, in, out *cliStore, id string) (bool, error) {
	want, err := in.logs().Size(ctx, id)
	if err != nil {
		return false, fmt.Errorf("read the log of job %s in %s: %w", id, in.name, err)
	}
	have, err := out.logs().Size(ctx, id)
	if err != nil {
		return false, fmt.Errorf("read the log of job %s in %s: %w", id, out.name, err)
	}
	if have >= want {
		return false, nil
	}
	w, err := out.logs().Append(ctx, id)
	if err != nil {
		return false, fmt.Errorf("write the log of job %s in %s: %w", id, out.name, err)
	}
	_, err = in.logs().CopyFrom(ctx, w, id, have)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("copy the log of job %s: %w", id, err)
	}
	return true, nil
}
