package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/jobstore"
)

// This file turns what a person types for a job into its ID: the full ID
// in either case, a unique prefix of it, "last", or --key. The lookups are
// built on jobstore.Client.List, so that they work on every store:
//   - a prefix costs one List call of a few jobs (IDs order jobs, and the
//     cursor starts the page just after the prefix's range);
//   - "last" costs one List call of one job;
//   - --key pages through every job until it finds the key, as no store
//     method looks a key up without submitting; on a store of many
//     thousands of jobs it takes as long as "jobdir list --limit 0".

// minPrefix is the shortest ID prefix accepted, and idLen the length of
// an ID.
const (
	minPrefix = 4
	idLen     = 26
)

// lastJob is the word that names the newest job wherever an ID is accepted.
// No ID can be spelled so: L is not a Crockford base32 digit.
const lastJob = "last"

// crockford is the alphabet of job IDs, in order.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// errNoMatch and errAmbiguous are returned by resolveID for a prefix that
// names no job, or several.
var (
	errNoMatch   = errors.New("no job with that ID prefix")
	errAmbiguous = errors.New("ambiguous job ID prefix")
)

// resolveID returns the ID of the job that arg names in st: an ID in any
// case, a unique prefix of at least minPrefix characters, or "last".
// Lookup errors are in plain words and name the store.
func (a *app) resolveID(ctx context.Context, st jobstore.Client, arg string) (string, error) {
	if strings.EqualFold(arg, lastJob) {
		page, err := st.List(ctx, jobstore.ListOptions{Limit: 1})
		if err != nil {
			return "", err
		}
		if len(page.Jobs) == 0 {
			return "", fmt.Errorf("no job in the store %s, so none is the last", a.storeName)
		}
		return page.Jobs[0].ID, nil
	}
	id := strings.ToUpper(arg)
	if jobstore.ValidateID(id) == nil {
		return id, nil
	}
	if !isIDPrefix(id) {
		return "", &plainError{err: jobstore.ErrInvalidID, msg: fmt.Sprintf("%q is not a job ID: an ID is %d characters such as 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB; give it whole, its first %d or more characters, or %q (see jobdir list)",
			arg, idLen, minPrefix, lastJob)}
	}
	if len(id) < minPrefix {
		return "", &plainError{err: jobstore.ErrInvalidID, msg: fmt.Sprintf("%q is too short to name a job: give at least %d characters of its ID", arg, minPrefix)}
	}
	opts := jobstore.ListOptions{Limit: 10}
	if next, ok := nextPrefix(id); ok {
		// The page starts at the newest ID below the first one past the
		// prefix: with the prefix's own IDs, if there are any.
		opts.Cursor = next + strings.Repeat("0", idLen-len(next))
	}
	page, err := st.List(ctx, opts)
	if err != nil {
		return "", err
	}
	var matches []jobstore.Job
	for _, j := range page.Jobs {
		if strings.HasPrefix(j.ID, id) {
			matches = append(matches, j)
		}
	}
	switch len(matches) {
	case 0:
		return "", &plainError{err: errNoMatch, msg: fmt.Sprintf("no job whose ID starts with %s in the store %s", id, a.storeName)}
	case 1:
		return matches[0].ID, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s starts the IDs of several jobs; give more of the one you mean:\n", id)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	now := time.Now()
	for _, j := range matches {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", j.ID, stateAt(j, now), oneLine(describeWork(j), 50))
	}
	_ = tw.Flush()
	if page.Next != "" && len(matches) == len(page.Jobs) {
		b.WriteString("  …\n")
	}
	return "", &plainError{err: errAmbiguous, msg: strings.TrimSuffix(b.String(), "\n")}
}

// isIDPrefix reports whether s could begin a job ID.
func isIDPrefix(s string) bool {
	if s == "" || len(s) > idLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(crockford, rune(s[i])) {
			return false
		}
	}
	return s[0] <= '7'
}

// nextPrefix returns the prefix that follows p in ID order, and false if
// none of a valid ID does.
func nextPrefix(p string) (string, bool) {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		k := strings.IndexByte(crockford, b[i])
		if k < len(crockford)-1 {
			b[i] = crockford[k+1]
			return string(b), b[0] <= '7'
		}
		b[i] = '0'
	}
	return "", false
}

// keyID returns the ID of the job with idempotency key key in st.
func (a *app) keyID(ctx context.Context, st jobstore.Client, key string) (string, error) {
	if err := jobstore.ValidateLookupKey(key); err != nil {
		return "", usagef("--key: %v", err)
	}
	j, err := st.GetByKey(ctx, key)
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		return "", &plainError{err: jobstore.ErrNotFound, msg: fmt.Sprintf("no job with key %q in the store %s (it never existed there, or was pruned)", key, a.storeName)}
	case err != nil:
		return "", err
	}
	return j.ID, nil
}

// jobArg is the job a command acts on: an ID argument, or --key.
type jobArg struct{ key string }

// register adds --key to cmd.
func (ja *jobArg) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&ja.key, "key", "", "the job with this idempotency `KEY` instead of an ID")
}

// args checks the arguments of a command that takes one job: an ID, or
// --key and none.
func (ja *jobArg) args(cmd *cobra.Command, args []string) error {
	if ja.key != "" {
		if len(args) != 0 {
			return fmt.Errorf("%s takes an ID or --key, not both", cmd.Name())
		}
		return nil
	}
	return idArg(cmd, args)
}

// resolve returns the ID of the job the arguments name in st.
func (ja *jobArg) resolve(ctx context.Context, a *app, st jobstore.Client, args []string) (string, error) {
	if ja.key != "" {
		return a.keyID(ctx, st, ja.key)
	}
	return a.resolveID(ctx, st, args[0])
}

// completionJobs is how many of the newest jobs completion offers.
const completionJobs = 50

// addCompletions makes the shell complete the job IDs, states and kinds
// of root's commands from the store the command line selects, which it
// never creates.
func (a *app) addCompletions(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.Args != nil && c.Use != "" && strings.Contains(c.Use, " ID") {
			c.ValidArgsFunction = a.completeIDs
		}
		if c.Flags().Lookup("state") != nil {
			_ = c.RegisterFlagCompletionFunc("state", completeStates)
		}
		if c.Flags().Lookup("kind") != nil {
			_ = c.RegisterFlagCompletionFunc("kind", a.completeKinds)
		}
	}
}

// completeStates offers the job states.
func completeStates(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, s := range jobstore.States() {
		out = append(out, string(s))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeIDs offers the IDs of the newest jobs, each with its state and
// what it runs, in the case the person started typing in.
func (a *app) completeIDs(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	jobs := a.completionJobs(cmd)
	lower := toComplete != strings.ToUpper(toComplete)
	var out []string
	for _, j := range jobs {
		id := j.ID
		if lower {
			id = strings.ToLower(id)
		}
		if strings.HasPrefix(id, toComplete) {
			out = append(out, id+"\t"+stateText(j)+": "+oneLine(describeWork(j), 60))
		}
	}
	if strings.HasPrefix(lastJob, toComplete) && len(jobs) > 0 {
		out = append(out, lastJob+"\tthe newest job")
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
}

// completeKinds offers the kinds of the newest jobs.
func (a *app) completeKinds(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	seen := map[string]bool{}
	var out []string
	for _, j := range a.completionJobs(cmd) {
		if !seen[j.Kind] {
			seen[j.Kind] = true
			out = append(out, j.Kind)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completionJobs returns the newest jobs of the store the command line
// selects, or none if it cannot be read.
func (a *app) completionJobs(cmd *cobra.Command) []jobstore.Job {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	var jobs []jobstore.Job
	_ = a.withStore(ctx, func(st *cliStore) error {
		page, err := st.List(ctx, jobstore.ListOptions{Limit: completionJobs})
		jobs = page.Jobs
		return err
	})
	return jobs
}
