package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// The cli figures time jobdir's own commands, each a whole process (start,
// open the store, one operation, close, exit), on stores of CLISizes jobs:
// every command opens the store, so a cost of opening that grows with the
// store shows here however quick the operation.

// cliRuns is how many times each command runs per round; the figure of a
// round is their median.
const cliRuns = 5

// cliSamples is how many finished jobs (with a log) and queued jobs a
// seeded store sets aside for the commands: cancel needs a queued job of
// its own for every run of every round.
const cliSamples = 5

// cliCommands are the commands timed, in the order of the table.
var cliCommands = []string{"get", "cancel", "wait", "logs", "submit"}

func cliMetric(cmd string, n int) metric {
	order := (slices.Index(cliCommands, cmd)+1)*1_000_000_000 + n
	return metric{ID: "cli-" + cmd + "-" + sizeLabel(n), Title: "jobdir " + cmd + " (whole process), " + sizeLabel(n) + " jobs in store", Unit: "ms", Group: "scale", Order: order}
}

// cliStore is a seeded store the commands run on.
type cliStore struct {
	system string
	n      int
	// arg is what --store names it by.
	arg string
	// dir is its directory (a PostgreSQL store's only names its schema).
	dir string
	// done are succeeded jobs with a log; queued are queued jobs, for
	// cancel, cliRuns of them per round.
	done, queued []string
	next         int
}

// cliSystem reports whether s gets the cli figures: the default durable
// file store and pgstore (the other file store variants open the same
// way).
func cliSystem(s *system) bool {
	return s.name == defaultFileSystem || s.name == pgstoreSystemName
}

// seedCLI builds a store of n jobs for s: every job has a key (a key file
// each, in the file store), a tenth stay queued and the rest are finished,
// and cliSamples jobs succeeded with a log. It writes without fsync (the
// format is the same; only the build is faster).
func seedCLI(ctx context.Context, c *config, s *system, n int) (st *cliStore, err error) {
	dir := c.scratch(fmt.Sprintf("jobdir-bench-cli-%s-%d", s.name, n))
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	st = &cliStore{system: s.name, n: n, dir: dir}
	var (
		store jobstore.Store
		logs  joblog.Logs
	)
	if s.pg {
		if err := dropSchema(ctx, dir); err != nil {
			return nil, err
		}
		pool, err := pgPool(ctx)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		ps, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: pgSchema(dir)})
		if err != nil {
			return nil, err
		}
		defer ps.Close()
		store, logs = ps, ps.Logs()
		if st.arg, err = pgStoreURL(pgDSN(), pgSchema(dir)); err != nil {
			return nil, err
		}
	} else {
		fs, err := filestore.Open(ctx, dir, &filestore.Options{NoSync: true})
		if err != nil {
			return nil, err
		}
		defer fs.Close()
		store, logs = fs, joblog.Dir{Path: filepath.Join(dir, "logs")}
		st.arg = dir
	}
	queued := max(cliSamples*c.Rounds, n/10)
	for done := 0; done < n; {
		k := min(seedChunk, n-done)
		specs := make([]jobstore.Spec, k)
		for i := range specs {
			specs[i] = benchSpec(0)
			specs[i].Key = fmt.Sprintf("cli-%d", done+i)
		}
		out, err := store.SubmitBatch(ctx, specs)
		if err != nil {
			return nil, fmt.Errorf("seed %d: %w", n, err)
		}
		// The first jobs stay queued, the rest are finished chunk by
		// chunk, so the queue never holds more than queued jobs.
		var finish []jobstore.Job
		for i, r := range out {
			if done+i < queued {
				if len(st.queued) < cliSamples*c.Rounds {
					st.queued = append(st.queued, r.Job.ID)
				}
				continue
			}
			finish = append(finish, r.Job)
		}
		if err := cancelAll(ctx, store, finish, 8); err != nil {
			return nil, fmt.Errorf("seed %d: finish jobs: %w", n, err)
		}
		done += k
		if done%(20*seedChunk) == 0 {
			c.logf("  %d of %d jobs", done, n)
		}
	}
	if s.pg {
		// A table just filled is vacuumed and analyzed by autovacuum a
		// moment later, in the middle of the timed runs; one in use has
		// long been.
		if err := vacuumSchema(ctx, pgSchema(dir)); err != nil {
			return nil, err
		}
	}
	// The jobs with a log run first: a higher priority than the queue's.
	req := jobstore.ClaimRequest{Worker: "bench-seed"}
	for i := range cliSamples {
		sp := benchSpec(0)
		sp.Priority = 1000
		if _, _, err := store.Submit(ctx, sp); err != nil {
			return nil, err
		}
		j, err := store.Claim(ctx, req)
		if err != nil {
			return nil, err
		}
		a, err := logs.Append(ctx, j.ID)
		if err != nil {
			return nil, err
		}
		_, err = fmt.Fprintf(a, "line 1 of job %d\nline 2\n", i)
		if err2 := a.Close(); err == nil {
			err = err2
		}
		if err != nil {
			return nil, err
		}
		if _, err := store.Complete(ctx, j.Lease(), jobstore.Succeeded(nil)); err != nil {
			return nil, err
		}
		st.done = append(st.done, j.ID)
	}
	return st, nil
}

// pgStoreURL is the postgres:// URL, with the schema parameter, that
// --store takes for the server dsn names (a URL or key=value pairs).
func pgStoreURL(dsn, schema string) (string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	q := url.Values{"schema": {schema}}
	host := cfg.Host
	if strings.HasPrefix(host, "/") {
		q.Set("host", host)
		host = ""
	} else if cfg.Port != 0 {
		host = fmt.Sprintf("%s:%d", host, cfg.Port)
	}
	u := url.URL{Scheme: "postgres", Host: host, Path: "/" + cfg.Database, RawQuery: q.Encode()}
	if cfg.User != "" {
		u.User = url.User(cfg.User)
		if cfg.Password != "" {
			u.User = url.UserPassword(cfg.User, cfg.Password)
		}
	}
	return u.String(), nil
}

// teardownCLI removes a seeded store.
func teardownCLI(ctx context.Context, c *config, st *cliStore) {
	if st.system == pgstoreSystemName {
		_ = dropSchema(ctx, st.dir)
		return
	}
	c.discard(st.dir)
}

// jobdirBinary is the jobdir command the cli figures run: -jobdir, or
// built once from the module the bench uses.
type jobdirBinary struct {
	once sync.Once
	path string
	err  error
}

func (b *jobdirBinary) get(ctx context.Context, c *config) (string, error) {
	b.once.Do(func() {
		if c.JobdirBin != "" {
			b.path = c.JobdirBin
			return
		}
		root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/jobdir/jobdir").Output()
		if err != nil {
			b.err = fmt.Errorf("find the jobdir module: %w", err)
			return
		}
		dir, err := os.MkdirTemp("", "jobdir-bench-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "jobdir")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.path, "./cmd/jobdir")
		cmd.Dir = strings.TrimSpace(string(root))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build jobdir: %w: %s", err, out)
		}
	})
	return b.path, b.err
}

// runCLI times each command cliRuns times on st and records the medians.
func runCLI(ctx context.Context, c *config, r *results, st *cliStore) error {
	bin, err := c.jobdir.get(ctx, c)
	if err != nil {
		return err
	}
	run := func(args ...string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"--store", st.arg}, args...)...)
		cmd.Stdout = io.Discard
		var stderr strings.Builder
		cmd.Stderr = &stderr
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		if err != nil {
			return d, fmt.Errorf("jobdir %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return d, nil
	}
	// One run first, not counted, so that every counted one finds the
	// binary and the store in the page cache.
	if _, err := run("get", st.done[0]); err != nil {
		return err
	}
	var line []string
	for _, name := range cliCommands {
		var ds []time.Duration
		for i := range cliRuns {
			var args []string
			switch name {
			case "cancel":
				if st.next >= len(st.queued) {
					return errors.New("no queued job left to cancel")
				}
				args = []string{"cancel", st.queued[st.next]}
				st.next++
			case "submit":
				args = []string{"submit", "--", "true"}
			default:
				args = []string{name, st.done[i%len(st.done)]}
			}
			d, err := run(args...)
			if err != nil {
				return err
			}
			ds = append(ds, d)
		}
		slices.Sort(ds)
		med := float64(ds[len(ds)/2].Microseconds()) / 1000
		r.add(cliMetric(name, st.n), st.system, med)
		line = append(line, fmt.Sprintf("%s %.1f", name, med))
	}
	c.logf("%-20s cli %6d: %s ms", st.system, st.n, strings.Join(line, ", "))
	return nil
}

// vacuumSchema runs VACUUM (ANALYZE) on every table of schema.
func vacuumSchema(ctx context.Context, schema string) error {
	conn, err := pgx.Connect(ctx, pgDSN())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1`, schema)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) `+pgx.Identifier{schema, t}.Sanitize()); err != nil {
			return fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	return nil
}
