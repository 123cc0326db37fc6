package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/jobstore"
)

func (a *app) logsCommand() *cobra.Command {
	var (
		opts joblog.Options
		ja   jobArg
	)
	cmd := &cobra.Command{
		Use:   "logs ID | --key KEY",
		Short: "Print a job's output",
		Long: `Print the output (stdout and stderr) of an exec job. Each attempt appends to
the job's log after a header line, and a footer line gives its exit status;
these lines of jobdir's start with "--- jobdir: ". Logs are bounded (10 MiB by
default): an attempt whose output does not fit keeps its beginning and its end,
where errors are, with a line saying how many bytes were dropped between them
(the end appears when the attempt ends). With a store in PostgreSQL the
output is kept in the database, written while the job runs: any machine reads
it, --follow included.

--raw prints only the program's output, without jobdir's lines. --tail N
starts with the last N lines. --follow keeps printing new output until the
job has finished, through its retries, and then exits as "jobdir wait" does:
0 if it succeeded, 3 if it failed, 4 if it was canceled.`,
		Example: `  jobdir logs 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB
  jobdir logs --tail 20 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB
  jobdir logs --follow --raw "$(jobdir submit -- ./long-build.sh)" > build.log`,
		Args: ja.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Tail < 0 {
				return usagef("--tail must not be negative")
			}
			ctx := cmd.Context()
			return a.withStore(ctx, func(st *cliStore) error {
				id, err := ja.resolve(ctx, a, st, args)
				if err != nil {
					return err
				}
				out := &countingWriter{w: a.stdout}
				j, err := joblog.CopyLogs(ctx, out, st.Store, st.logs(), id, opts)
				switch {
				case errors.Is(err, joblog.ErrNotRegular):
					return fmt.Errorf("%w: jobdir reads only a regular file there; remove it", err)
				case err != nil:
					return a.explainJob(id, err)
				case opts.Follow:
					return jobResult(j)
				}
				if out.n == 0 && j.Kind == execjob.Kind {
					fmt.Fprintf(a.stderr, "jobdir: job %s has no output yet (%s)\n", j.ID, stateText(j))
				}
				if out.n == 0 && j.Kind != execjob.Kind {
					// Only exec jobs have a log: saying nothing and
					// exiting 0 read as "the program printed nothing".
					return fmt.Errorf("job %s is of kind %q, whose handler keeps no log: only exec jobs (jobdir submit -- PROGRAM) have one", j.ID, j.Kind)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&opts.Follow, "follow", "f", false, "keep printing output until the job has finished, then exit with its result")
	f.BoolVar(&opts.Raw, "raw", false, "print only the program's output, without jobdir's header, footer and marker lines")
	f.IntVarP(&opts.Tail, "tail", "n", 0, "start with the last `N` lines (default: all)")
	ja.register(cmd)
	return cmd
}

// jobResult returns nil for a succeeded job, and for a failed or canceled
// one the error that exits with the status "jobdir wait" documents.
func jobResult(j jobstore.Job) error {
	switch j.State {
	case jobstore.StateFailed:
		return &exitStatusError{code: exitFailed, err: fmt.Errorf("job %s failed after %s: %s", j.ID, plural(int64(j.Attempt), "attempt"), plainMessage(j.LastError))}
	case jobstore.StateCanceled:
		return &exitStatusError{code: exitCanceled, silent: true}
	}
	return nil
}

// countingWriter counts what it passes on.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
