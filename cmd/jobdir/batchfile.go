package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/jobstore"
)

// This file reads and submits the file of jobdir submit --batch: one exec
// job a line, as a JSON object, whose jobs may wait for earlier ones of
// the file (after_specs, after_keys). The file is submitted with one
// SubmitBatch, all of it or none.

// maxFileLine is the longest line a batch file may hold: room for a job
// of the largest payload a store takes by default.
const maxFileLine = 4 << 20

// fileJob is one line of a batch file. A field left out takes the value
// of the command's flag, if one was given.
type fileJob struct {
	Argv        []string          `json:"argv"`
	Dir         *string           `json:"dir"`
	Env         []string          `json:"env"`
	Key         string            `json:"key"`
	Queue       *string           `json:"queue"`
	Partition   *string           `json:"partition"`
	Tags        []string          `json:"tags"`
	Meta        map[string]string `json:"meta"`
	Priority    *int              `json:"priority"`
	MaxAttempts *int              `json:"max_attempts"`
	Timeout     *string           `json:"timeout"`
	After       []string          `json:"after"`
	AfterKeys   []string          `json:"after_keys"`
	AfterSpecs  []int             `json:"after_specs"`
	AfterAny    *bool             `json:"after_any"`
	Batch       *string           `json:"batch"`
	AfterBatch  *string           `json:"after_batch"`
}

// readBatchFile reads the jobs of a batch file from r: their specs, with
// the flags' values where a line gives none, and the line each came
// from. wd is the directory of a job without "dir". Every error names
// its line and is a usage error.
func readBatchFile(r io.Reader, name string, wd string, base jobstore.Spec, env []string) ([]jobstore.Spec, []int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxFileLine)
	var (
		specs []jobstore.Spec
		lines []int
	)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if len(specs) == jobstore.MaxBatch {
			return nil, nil, usagef("%s holds more than %d jobs, the most submitted at once: split it into several files", name, jobstore.MaxBatch)
		}
		spec, err := fileSpec(line, len(specs), wd, base, env)
		if err != nil {
			return nil, nil, usagef("%s, line %d: %v", name, n, err)
		}
		specs = append(specs, spec)
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, nil, usagef("%s: a line is longer than %d MiB", name, maxFileLine>>20)
		}
		return nil, nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(specs) == 0 {
		return nil, nil, usagef("%s holds no job: write one JSON object a line, such as {\"argv\": [\"make\", \"test\"]}", name)
	}
	return specs, lines, nil
}

// fileSpec returns the spec of one line of a batch file, the job at
// index i of the file.
func fileSpec(line []byte, i int, wd string, base jobstore.Spec, env []string) (jobstore.Spec, error) {
	var fj fileJob
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fj); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return jobstore.Spec{}, fmt.Errorf("%s is %s, which is not what it takes", te.Field, te.Value)
		}
		return jobstore.Spec{}, fmt.Errorf("not a JSON object of a job, such as {\"argv\": [\"make\", \"test\"]}: %v", err)
	}
	if dec.More() {
		return jobstore.Spec{}, errors.New("holds more than one JSON value: write one job a line")
	}
	if len(fj.Argv) == 0 {
		return jobstore.Spec{}, errors.New(`no "argv": give the program and its arguments, such as "argv": ["make", "test"]`)
	}
	p := execjob.Payload{Argv: fj.Argv, Dir: wd, Env: env}
	if fj.Dir != nil {
		p.Dir = *fj.Dir
	}
	if fj.Env != nil {
		p.Env = fj.Env
	}
	spec, err := execjob.NewSpec(p)
	if err != nil {
		return jobstore.Spec{}, err
	}
	spec.Key = fj.Key
	spec.Queue, spec.Partition, spec.Tags, spec.Meta = base.Queue, base.Partition, base.Tags, base.Meta
	spec.Priority, spec.MaxAttempts, spec.Timeout, spec.RunAt = base.Priority, base.MaxAttempts, base.Timeout, base.RunAt
	spec.After, spec.AfterKeys, spec.AfterAny = base.After, base.AfterKeys, base.AfterAny
	spec.Batch, spec.AfterBatch = base.Batch, base.AfterBatch
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&spec.Queue, fj.Queue)
	set(&spec.Partition, fj.Partition)
	set(&spec.Batch, fj.Batch)
	set(&spec.AfterBatch, fj.AfterBatch)
	if fj.Tags != nil {
		spec.Tags = fj.Tags
	}
	if fj.Meta != nil {
		spec.Meta = fj.Meta
	}
	if fj.Priority != nil {
		spec.Priority = *fj.Priority
	}
	if fj.MaxAttempts != nil {
		if *fj.MaxAttempts < 1 {
			return jobstore.Spec{}, fmt.Errorf("max_attempts %d: a job needs at least 1 attempt", *fj.MaxAttempts)
		}
		spec.MaxAttempts = *fj.MaxAttempts
	}
	if fj.Timeout != nil {
		d, err := parseDuration(*fj.Timeout)
		if err != nil {
			return jobstore.Spec{}, fmt.Errorf("timeout %q: %v", *fj.Timeout, err)
		}
		spec.Timeout = d
	}
	if fj.After != nil {
		spec.After = fj.After
	}
	if fj.AfterKeys != nil {
		spec.AfterKeys = fj.AfterKeys
	}
	if fj.AfterAny != nil {
		spec.AfterAny = *fj.AfterAny
	}
	for _, k := range fj.AfterSpecs {
		switch {
		case i == 0:
			return jobstore.Spec{}, fmt.Errorf("after_specs %d: the first job of the file has no earlier job to wait for", k)
		case k < 0 || k >= i:
			return jobstore.Spec{}, fmt.Errorf("after_specs %d: a job waits only for earlier jobs of the file, 0 (the first) to %d (the one before it)", k, i-1)
		}
	}
	spec.AfterSpecs = fj.AfterSpecs
	if err := validateNamed(spec); err != nil {
		return jobstore.Spec{}, err
	}
	return spec, nil
}

// storeSpec matches the "spec N: " by which a store's error about one
// spec of a batch names it.
var storeSpec = regexp.MustCompile(`^spec (\d+): `)

// submitFile submits the jobs of the batch file name ("-" for stdin), with
// the flags' values where a line gives none, and prints their IDs, or
// the jobs as JSON.
func (a *app) submitFile(cmd *cobra.Command, name string, jf *jobFlags, df *depFlags, runAt time.Time, asJSON, needWorker bool) error {
	var base jobstore.Spec
	if err := jf.fill(cmd, &base); err != nil {
		return err
	}
	df.fill(&base)
	base.RunAt = runAt
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	var r io.Reader = a.stdin
	label := "stdin"
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return &plainError{err: err, msg: fmt.Sprintf("cannot read the batch file: %v", err)}
		}
		defer f.Close()
		r, label = f, name
	}
	specs, lines, err := readBatchFile(r, label, wd, base, jf.env)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	return a.withStore(ctx, func(st *cliStore) error {
		resolved := make(map[string]string)
		for i := range specs {
			if len(specs[i].After) == 0 {
				continue
			}
			specs[i].After = append([]string(nil), specs[i].After...)
			if err := a.resolveAfter(ctx, st, &specs[i], resolved); err != nil {
				return &plainError{err: err, msg: fmt.Sprintf("%s, line %d: %s", label, lines[i], strings.TrimPrefix(err.Error(), "--"))}
			}
		}
		served, err := jobServed(ctx, st.Store, base.Queue, execjob.Kind)
		if err != nil {
			return err
		}
		if !served && needWorker {
			return fmt.Errorf("no worker runs exec jobs on this store, or did in the last 15 minutes, so the jobs were not submitted: start one with \"jobdir work\", or submit without --require-worker")
		}
		subs, err := st.SubmitBatch(ctx, specs)
		if err != nil {
			err = submitError(err)
			var pe *plainError
			if errors.As(err, &pe) {
				// The store names a spec by its index; a person, by its line.
				if m := storeSpec.FindStringSubmatch(pe.msg); m != nil {
					if i, _ := strconv.Atoi(m[1]); i < len(lines) {
						pe.msg = fmt.Sprintf("%s, line %d: %s", label, lines[i], pe.msg[len(m[0]):])
					}
				}
			}
			return err
		}
		created := 0
		for i, s := range subs {
			if s.Created {
				created++
				continue
			}
			fmt.Fprintf(a.stderr, "jobdir: %s, line %d: job %s already exists for key %q (%s); not submitted again\n", label, lines[i], s.Job.ID, s.Job.Key, s.Job.State)
		}
		if !served && created > 0 {
			fmt.Fprintln(a.stderr, "jobdir: no worker runs exec jobs on this store, or did in the last 15 minutes; the jobs wait until one starts (\"jobdir work\")")
		}
		if asJSON {
			jobs := make([]jobstore.Job, len(subs))
			for i, s := range subs {
				jobs[i] = s.Job
			}
			return writeJSON(a.stdout, apiJobs(jobs))
		}
		for _, s := range subs {
			if _, err := fmt.Fprintln(a.stdout, s.Job.ID); err != nil {
				return err
			}
		}
		return nil
	})
}
