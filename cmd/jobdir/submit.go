package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/internal/humantime"
	"github.com/jobdir/jobdir/jobstore"
)

func (a *app) submitCommand() *cobra.Command {
	var (
		key        string
		jf         = jobFlags{traced: true}
		df         depFlags
		batchFile  string
		delay      time.Duration
		at         string
		asJSON     bool
		needWorker bool
	)
	cmd := &cobra.Command{
		Use:         "submit [flags] [--] PROGRAM [ARG...]",
		Annotations: map[string]string{createsStore: "yes"},
		Short:       "Submit a job that runs a program",
		Long: `Submit a job of kind "exec" that runs PROGRAM with its ARGs, without a shell,
in the current working directory, and print its ID.

PROGRAM is looked up in the worker's PATH when it has no slash. The program
gets JOBDIR_JOB_ID and JOBDIR_ATTEMPT in its environment; exit status 0 makes
the job succeeded, anything else fails the attempt, and failed attempts are
retried with backoff up to --max-attempts.

Flags go before PROGRAM; everything from PROGRAM on belongs to the job. Write
-- before PROGRAM to make that explicit.

--env adds variables to the program's environment on top of the worker's.
They are stored in the job's record, readable by whoever can read the store:
do not pass secrets this way.

--tag labels the job ("jobdir list --tag T" finds it) and --meta carries
KEY=VALUE metadata with it; both are shown by "jobdir get". When the
environment has TRACEPARENT (and TRACESTATE), as a traced script's does, they
go into the job's metadata as traceparent and tracestate, so that the job's
attempts are traced as children of the script's span ("jobdir work --otel").

With --key, the job is submitted only if no job with that key exists. If one
does (in any state, until it is pruned), its ID is printed instead, a note
says so on stderr, and the exit status is still 0.

--after makes the job wait for other jobs, named by ID (or a unique prefix of
one, or "last"), and --after-key for the jobs with those keys; the two
combine. The job is "waiting" until every one of them ended, and then runs if
they all succeeded; if one fails or is canceled, the job is canceled too, and
its last error says which. With --after-any it runs once they ended, however
they ended. Each job named must exist, so no cycle can be made.

--batch-id NAME adds the job to a batch, a named group of jobs. --after-batch
NAME submits the batch's callback: a job that waits for every job of the batch
and runs once all of them ended, however they ended. Submitting it closes the
batch: no job may join it after that. "jobdir batch status NAME" counts the
batch's jobs by state.

--batch FILE submits every job of FILE at once ("-" reads stdin), all or none,
and prints their IDs in order, one a line. FILE holds one job a line, a JSON
object: {"argv": ["make", "test"]} and any of "key", "after" (IDs),
"after_keys", "after_specs" (the jobs of the file it waits for, by their
index: 0 is the first job of the file), "after_any", "batch", "after_batch",
"dir" (default: the working directory), "env", "queue", "partition", "tags",
"meta", "priority", "max_attempts" and "timeout" ("10m"). A job names only
earlier jobs of the file, by index or by key. Empty lines and lines that start
with # are skipped. The other flags apply to every job of the file that does
not set the same field itself. For example:

  {"argv": ["make", "build"], "key": "build-42"}
  {"argv": ["make", "test"], "after_specs": [0]}
  {"argv": ["make", "lint"], "after_keys": ["build-42"]}
  {"argv": ["./deploy.sh"], "after_specs": [1, 2]}

If no worker runs exec jobs on the store, or did in the last 15 minutes (see
"jobdir workers"), a note on stderr says that the job waits for one; with
--require-worker the job is not submitted and the exit status is 1. A worker
that is restarting does not count as missing.`,
		Example: `  jobdir submit -- make test
  jobdir submit --key deploy-42 --max-attempts 1 -- ./deploy.sh v42
  jobdir submit --queue emails -- ./send-digest.sh
  jobdir submit --queue emails --partition customer-42 -- ./send-digest.sh 42
  jobdir submit --tag nightly --tag team=billing --meta ticket=OPS-7 -- ./export.sh
  jobdir submit --delay 10m --timeout 1h -- backup --full /srv
  jobdir submit --at 'tomorrow 03:00' -- ./nightly.sh
  jobdir submit --json -- sh -c 'date; sleep 5'
  id=$(jobdir submit -- ./build.sh) && jobdir wait "$id"
  build=$(jobdir submit --key build-42 -- make build)
  jobdir submit --after "$build" -- make test
  jobdir submit --after-key build-42 --after-any -- ./notify.sh
  jobdir submit --batch-id nightly -- ./export.sh part-1
  jobdir submit --batch-id nightly -- ./export.sh part-2
  jobdir submit --after-batch nightly -- ./merge-exports.sh
  jobdir submit --batch pipeline.jsonl`,
		Args: func(cmd *cobra.Command, args []string) error {
			if batchFile != "" {
				if len(args) > 0 {
					return fmt.Errorf("submit takes a PROGRAM or --batch FILE, not both")
				}
				return nil
			}
			if len(args) == 0 {
				return fmt.Errorf("submit needs a PROGRAM to run")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("delay") && cmd.Flags().Changed("at") {
				return usagef("--delay and --at cannot be used together")
			}
			if delay < 0 {
				return usagef("--delay must not be negative")
			}
			if err := df.check(); err != nil {
				return err
			}
			var runAt time.Time
			if delay > 0 {
				runAt = time.Now().Add(delay)
			}
			if at != "" {
				now := time.Now()
				t, err := parseAt(at, now)
				if err != nil {
					return usagef("--at %q: %v", at, err)
				}
				if t.Before(now) {
					fmt.Fprintf(a.stderr, "jobdir: --at %s is %s in the past: the job is due at once\n", at, humantime.Duration(now.Sub(t)))
				}
				runAt = t
			}
			if batchFile != "" {
				if key != "" {
					return usagef("--key names one job: with --batch, give each job its key in the file")
				}
				return a.submitFile(cmd, batchFile, &jf, &df, runAt, asJSON, needWorker)
			}
			spec, err := jf.execSpec(cmd, args)
			if err != nil {
				return err
			}
			spec.Key = key
			spec.RunAt = runAt
			df.fill(&spec)
			if err := validateNamed(spec); err != nil {
				return usagef("%v", err)
			}
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				if err := a.resolveAfter(cmd.Context(), st, &spec, nil); err != nil {
					return err
				}
				served, err := jobServed(cmd.Context(), st.Store, spec.Queue, spec.Kind)
				if err != nil {
					return err
				}
				what, start := spec.Kind+" jobs", "jobdir work"
				if q := jobstore.QueueOf(spec.Queue); q != jobstore.DefaultQueue {
					what, start = spec.Kind+" jobs of queue "+q, "jobdir work --queue "+q
				}
				if !served && needWorker {
					return fmt.Errorf("no worker runs %s on this store, or did in the last 15 minutes, so the job was not submitted: start one with \"%s\", or submit without --require-worker", what, start)
				}
				job, created, err := st.Submit(cmd.Context(), spec)
				if err != nil {
					return submitError(err)
				}
				if !served && created {
					fmt.Fprintf(a.stderr, "jobdir: no worker runs %s on this store, or did in the last 15 minutes; the job waits until one starts (\"%s\")\n", what, start)
				}
				if !created {
					fmt.Fprintf(a.stderr, "jobdir: job %s already exists for key %q (%s); not submitted again\n", job.ID, key, job.State)
				}
				if asJSON {
					return writeJobJSON(a.stdout, job)
				}
				_, err = fmt.Fprintln(a.stdout, job.ID)
				return err
			})
		},
	}
	cmd.Flags().SetInterspersed(false)
	f := cmd.Flags()
	f.StringVar(&key, "key", "", "idempotency key: submit only if no job has this `KEY`")
	jf.register(f)
	durationVar(f, &delay, "delay", 0, "run no sooner than this long from now, e.g. 90s, 2h or 1d")
	f.StringVar(&at, "at", "", "run no sooner than `TIME`: 18:30 (the next one), tomorrow 09:00, 2026-11-29 18:30 (local time) or RFC 3339")
	f.BoolVar(&asJSON, "json", false, "print the job as JSON (as the HTTP API sends it) instead of its ID")
	f.BoolVar(&needWorker, "require-worker", false, "submit only if a live worker runs exec jobs on the store")
	df.register(f)
	f.StringVar(&batchFile, "batch", "", "submit every job of `FILE`, one JSON object a line, at once (- for stdin); a job may wait for earlier ones of the file (see above)")
	return cmd
}

// jobFlags are the flags of a job's spec that submit and schedule add
// share: an exec job's program is the command's arguments.
type jobFlags struct {
	maxAttempts int
	priority    int
	queue       string
	partition   string
	timeout     time.Duration
	env         []string
	tags        []string
	meta        []string
	// traced takes the trace context of the environment into the
	// metadata (see metaFlags): for a submit, not for a schedule's jobs.
	traced bool
}

// register adds the flags to f.
func (jf *jobFlags) register(f *pflag.FlagSet) {
	f.IntVar(&jf.maxAttempts, "max-attempts", 0, "`N` attempts before the job fails for good (default 3: an attempt also ends when its worker dies, and running the job again elsewhere is then the point; give 1 for a program that must never run twice)")
	f.IntVar(&jf.priority, "priority", 0, "priority `P`: higher runs first, from -1000 to 1000")
	f.StringVar(&jf.queue, "queue", "", "put the job in this `QUEUE` (default: the queue named default); workers choose their queues with jobdir work --queue, and jobdir queue pauses one")
	f.StringVar(&jf.partition, "partition", "", "put the job in this `PARTITION` of its queue, a customer's ID say: jobdir queue limit QUEUE --per-partition M runs at most M jobs of each partition at once")
	durationVar(f, &jf.timeout, "timeout", 0, "stop an attempt that runs longer than this (default: no limit)")
	f.StringArrayVar(&jf.env, "env", nil, "add `KEY=VALUE` to the program's environment (repeatable)")
	f.StringSliceVar(&jf.tags, "tag", nil, "label the job with `TAG` (repeatable, or comma-separated): letters, digits and ._:/-= such as nightly or team=billing")
	f.StringArrayVar(&jf.meta, "meta", nil, "carry `KEY=VALUE` metadata with the job (repeatable); shown by jobdir get, never read by jobdir")
}

// execSpec returns the spec of an exec job that runs argv in the working
// directory, with the flags' fields; a bad flag is a usage error.
func (jf *jobFlags) execSpec(cmd *cobra.Command, argv []string) (jobstore.Spec, error) {
	wd, err := os.Getwd()
	if err != nil {
		return jobstore.Spec{}, fmt.Errorf("working directory: %w", err)
	}
	spec, err := execjob.NewSpec(execjob.Payload{Argv: argv, Dir: wd, Env: jf.env})
	if err != nil {
		return jobstore.Spec{}, usagef("%v", err)
	}
	return spec, jf.fill(cmd, &spec)
}

// fill sets the flags' fields of spec; a bad flag is a usage error.
func (jf *jobFlags) fill(cmd *cobra.Command, spec *jobstore.Spec) error {
	if cmd.Flags().Changed("max-attempts") && jf.maxAttempts < 1 {
		return usagef("--max-attempts %d: a job needs at least 1 attempt", jf.maxAttempts)
	}
	if jf.partition != "" {
		if err := jobstore.ValidatePartition(jf.partition); err != nil {
			return usagef("--partition: %v", err)
		}
	}
	if err := jobstore.ValidateTags(jf.tags); err != nil {
		return usagef("--tag: %v", err)
	}
	meta, err := metaFlags(jf.meta, jf.traced)
	if err != nil {
		return err
	}
	spec.MaxAttempts, spec.Priority, spec.Timeout, spec.Queue = jf.maxAttempts, jf.priority, jf.timeout, jf.queue
	spec.Partition, spec.Tags, spec.Meta = jf.partition, jf.tags, meta
	return nil
}

// metaFlags returns the metadata of --meta KEY=VALUE flags, with, if
// traced, the trace context of the environment (TRACEPARENT, TRACESTATE)
// added as traceparent and tracestate unless a flag gave them; nil for
// none. A bad flag is a usage error that names it.
func metaFlags(flags []string, traced bool) (map[string]string, error) {
	meta := map[string]string{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, usagef("--meta %q: want KEY=VALUE", f)
		}
		if _, dup := meta[k]; dup {
			return nil, usagef("--meta %s is given twice", k)
		}
		meta[k] = v
	}
	for env, k := range map[string]string{"TRACEPARENT": "traceparent", "TRACESTATE": "tracestate"} {
		if v := os.Getenv(env); v != "" && traced {
			if _, given := meta[k]; !given {
				meta[k] = v
			}
		}
	}
	if err := jobstore.ValidateMeta(meta); err != nil {
		return nil, usagef("--meta: %v", err)
	}
	if len(meta) == 0 {
		return nil, nil
	}
	return meta, nil
}

// depFlags are submit's flags of dependencies and batches.
type depFlags struct {
	after      []string // IDs, unique prefixes or "last"
	afterKeys  []string
	afterAny   bool
	batch      string
	afterBatch string
}

// register adds the flags to f.
func (df *depFlags) register(f *pflag.FlagSet) {
	f.StringSliceVar(&df.after, "after", nil, "run only after the job with this `ID` ended (or a unique prefix of it, or last); repeatable, or comma-separated")
	f.StringSliceVar(&df.afterKeys, "after-key", nil, "run only after the job with this `KEY` ended; repeatable, or comma-separated, and combines with --after")
	f.BoolVar(&df.afterAny, "after-any", false, "run once the jobs of --after and --after-key ended, however they ended (without it, one that fails or is canceled cancels this job)")
	f.StringVar(&df.batch, "batch-id", "", "add the job to the batch `NAME`, which a callback (--after-batch) waits for")
	f.StringVar(&df.afterBatch, "after-batch", "", "make the job the callback of batch `NAME`: it runs once every job of the batch ended, however they ended, and no job may join the batch after it")
}

// check refuses flags that cannot make a spec, as usage errors.
func (df *depFlags) check() error {
	for _, name := range []struct{ flag, v string }{{"--batch-id", df.batch}, {"--after-batch", df.afterBatch}} {
		if name.v == "" {
			continue
		}
		if err := jobstore.ValidateBatchName(name.v); err != nil {
			return usagef("%s: %v", name.flag, err)
		}
	}
	if df.batch != "" && df.batch == df.afterBatch {
		return usagef("--batch-id and --after-batch name the same batch: a job cannot be both in a batch and its callback")
	}
	for _, k := range df.afterKeys {
		if err := jobstore.ValidateLookupKey(k); err != nil {
			return usagef("--after-key: %v", err)
		}
	}
	return nil
}

// fill sets the flags' fields of spec; --after's names are resolved
// later, by resolveAfter.
func (df *depFlags) fill(spec *jobstore.Spec) {
	spec.After = df.after
	spec.AfterKeys = df.afterKeys
	spec.AfterAny = df.afterAny
	spec.Batch = df.batch
	spec.AfterBatch = df.afterBatch
}

// validateNamed validates spec as the store will once resolveAfter has
// turned the names of its After (prefixes, "last") into IDs.
func validateNamed(spec jobstore.Spec) error {
	spec.After = nil
	return spec.Validate(0)
}

// resolveAfter turns the names of spec.After, as a person gives them (an
// ID in either case, a unique prefix, "last"), into IDs, looking each up
// once in resolved (nil: no memory of earlier lookups).
func (a *app) resolveAfter(ctx context.Context, st jobstore.Client, spec *jobstore.Spec, resolved map[string]string) error {
	for i, name := range spec.After {
		id, ok := resolved[name]
		if !ok {
			var err error
			if id, err = a.resolveID(ctx, st, name); err != nil {
				return &plainError{err: err, msg: "--after " + name + ": " + err.Error()}
			}
			if resolved != nil {
				resolved[name] = id
			}
		}
		spec.After[i] = id
	}
	return nil
}

// submitError says in plain words why the store refused a submit: a
// dependency that does not exist, a closed batch, a callback of an
// unknown batch.
func submitError(err error) error {
	switch {
	case errors.Is(err, jobstore.ErrBatchClosed):
		return &plainError{err: err, msg: storeMessage(err),
			hint: "A batch takes no more jobs once its callback was submitted (see jobdir batch status NAME); use another batch name."}
	case errors.Is(err, jobstore.ErrInvalidInput):
		return &plainError{err: err, msg: storeMessage(err)}
	}
	return err
}
