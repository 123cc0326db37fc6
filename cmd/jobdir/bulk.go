package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/jobstore"
)

// bulkFilter selects the jobs a bulk cancel, retry or delete acts on.
type bulkFilter struct {
	states []string
	kind   string
	yes    bool
	// done is what the command does to a job, "canceled", for its words.
	done string
}

// register adds --state, --kind and --yes to cmd.
func (bf *bulkFilter) register(cmd *cobra.Command, verb string) {
	bf.done = map[string]string{"cancel": "canceled", "retry": "retried", "delete": "deleted"}[verb]
	f := cmd.Flags()
	f.StringSliceVar(&bf.states, "state", nil, "instead of one job, "+verb+" every job in this `STATE` (repeatable, or comma-separated; queued is the jobs due now, scheduled and retrying those waiting for their time)")
	f.StringVar(&bf.kind, "kind", "", "instead of one job, "+verb+" every job of this `KIND` (with --state, of both)")
	f.BoolVarP(&bf.yes, "yes", "y", false, "do not ask before acting on many jobs (for scripts)")
}

// set reports whether the command acts on jobs by filter.
func (bf *bulkFilter) set() bool { return len(bf.states) > 0 || bf.kind != "" }

// options returns the list options of the filter and the --state words
// it selects; states, when no --state is given, are the states the
// operation applies to (all of them, queued ones not due yet included).
func (bf *bulkFilter) options(allowed []jobstore.State) (jobstore.ListOptions, stateFilter, error) {
	opts := jobstore.ListOptions{Kind: bf.kind, Order: jobstore.OldestFirst}
	if bf.kind != "" {
		if err := jobstore.ValidateKind(bf.kind); err != nil {
			return opts, stateFilter{}, usagef("--kind: %v", err)
		}
	}
	f, err := parseStates(bf.states, allowed, bf.done)
	if err != nil {
		return opts, stateFilter{}, usagef("--state %v", err)
	}
	opts.States = f.states
	if len(opts.States) == 0 {
		opts.States = allowed // every job in them: f selects no words
	}
	return opts, f, nil
}

// describe says which jobs the filter selects, for people: "queued or
// running jobs of kind x".
func describeFilter(opts jobstore.ListOptions, words []string, n int) string {
	s := plural(int64(n), "job")
	if len(words) == 0 {
		for _, st := range opts.States {
			words = append(words, string(st))
		}
	}
	if len(words) > 0 {
		s = fmt.Sprintf("%d %s %s", n, eitherOf(words), strings.TrimPrefix(plural(int64(n), "job"), fmt.Sprint(n)+" "))
	}
	if opts.Kind != "" {
		s += " of kind " + opts.Kind
	}
	return s
}

// eitherOf joins words as a person lists alternatives: "a", "a or b",
// "a, b or c".
func eitherOf(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// errNotConfirmed is returned when a person did not confirm a bulk
// operation.
var errNotConfirmed = errors.New("not confirmed")

// confirm asks on stderr whether to go on, and reads the answer from
// stdin. Anything but y or yes, or no answer at all (stdin is not a
// terminal, or empty), is a no.
func (a *app) confirm(question string) error {
	fmt.Fprintf(a.stderr, "%s [y/N] ", question)
	line, _ := bufio.NewReader(a.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	fmt.Fprintln(a.stderr)
	return &plainError{err: errNotConfirmed, msg: "nothing done: not confirmed (pass --yes to skip the question)"}
}

// bulk applies op to every job of st that opts selects, after asking (unless
// bf.yes), and says how many it changed. verb is "cancel", "retry" or
// "delete", done "canceled", "queued again" or "deleted".
func (a *app) bulk(ctx context.Context, st jobstore.Client, bf *bulkFilter, opts jobstore.ListOptions, f stateFilter, verb, done string,
	op func(context.Context, string) (jobstore.Job, error)) error {
	jobs, _, err := listJobs(ctx, st, opts, f.keep(), 0, func(error) {})
	if err != nil {
		return err
	}
	what := describeFilter(opts, f.words, len(jobs))
	if len(jobs) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no %s in the store %s: nothing to %s\n", strings.TrimPrefix(what, "0 "), a.storeName, verb)
		return err
	}
	if !bf.yes {
		if err := a.confirm(fmt.Sprintf("%s %s in the store %s?", strings.ToUpper(verb[:1])+verb[1:], what, a.storeName)); err != nil {
			return err
		}
	}
	changed, moved, refused := 0, 0, 0
	for _, j := range jobs {
		_, err := op(ctx, j.ID)
		var te *jobstore.TransitionError
		switch {
		case err == nil:
			changed++
		case errors.Is(err, jobstore.ErrDependencyFailed), errors.Is(err, jobstore.ErrDependedOn):
			refused++ // because of other jobs, said below
		case errors.As(err, &te), errors.Is(err, jobstore.ErrInvalidTransition), errors.Is(err, jobstore.ErrNotFound):
			moved++ // it finished, or was retried, canceled, pruned or deleted, since it was listed
		default:
			return fmt.Errorf("%s after %d of %s: %w", verb, changed, plural(int64(len(jobs)), "job"), err)
		}
	}
	msg := fmt.Sprintf("%s %s", done, plural(int64(changed), "job"))
	if moved > 0 {
		msg += fmt.Sprintf(" (%d changed state or went away meanwhile)", moved)
	}
	switch {
	case refused > 0 && verb == "retry":
		msg += fmt.Sprintf("; %s not retried: a job each depends on failed or was canceled and is still so (retry that one first)", plural(int64(refused), "job"))
	case refused > 0:
		msg += fmt.Sprintf("; %s kept: jobs that wait depend on them", plural(int64(refused), "job"))
	}
	_, err = fmt.Fprintln(a.stdout, msg)
	return err
}

// bulkArgs checks the arguments of a command that takes one job or, with
// a filter, none.
func bulkArgs(bf *bulkFilter, ja *jobArg) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if !bf.set() {
			return ja.args(cmd, args)
		}
		if len(args) > 0 || ja.key != "" {
			return fmt.Errorf("%s takes an ID, or --state and --kind, not both", cmd.Name())
		}
		return nil
	}
}

func (a *app) rerunCommand() *cobra.Command {
	var (
		asJSON bool
		ja     jobArg
	)
	cmd := &cobra.Command{
		Use:   "rerun ID | --key KEY",
		Short: "Submit a new job that copies another one",
		Long: `Submit a new job with the kind, payload (the command, its directory and
environment), priority, attempts and timeout of another job, in whatever
state it is, and print the new job's ID. The copy has no key, is due now,
and the job it copies is left as it is. Use it to run again a job that
succeeded; "jobdir retry" queues a failed or canceled job itself again.`,
		Example: `  jobdir rerun 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB
  jobdir wait "$(jobdir rerun --key nightly-report)"`,
		Args: ja.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.withStore(ctx, func(st *cliStore) error {
				id, err := ja.resolve(ctx, a, st, args)
				if err != nil {
					return err
				}
				j, err := st.Get(ctx, id)
				if err != nil {
					return a.explainJob(id, err)
				}
				nj, _, err := st.Submit(ctx, j.RerunSpec())
				if err != nil {
					return err
				}
				if asJSON {
					return writeJobJSON(a.stdout, nj)
				}
				_, err = fmt.Fprintln(a.stdout, nj.ID)
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the new job as JSON (as the HTTP API sends it) instead of its ID")
	ja.register(cmd)
	return cmd
}
