package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

// followPoll is how often logs --follow looks for new output.
const followPoll = 100 * time.Millisecond

func (a *app) logsCommand() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a job's output",
		Long: `Print the output (stdout and stderr) of an exec job. Each attempt appends to
the job's log after a header line, and a footer line gives its exit status.
Logs are bounded (10 MiB by default); output past the limit is dropped with a
note saying so.

With --follow, keep printing new output until the job has finished.`,
		Example: `  jobdir logs 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB
  jobdir logs --follow "$(jobdir submit -- ./long-build.sh)"`,
		Args: idArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			ctx := cmd.Context()
			return a.withStore(ctx, func(st *filestore.Store) error {
				j, err := st.Get(ctx, id)
				if err != nil {
					return explainJob(id, err)
				}
				path, err := execjob.LogPath(logDir(st), j.ID)
				if err != nil {
					return err
				}
				if !follow {
					n, err := copyFrom(a.stdout, path, 0)
					if n == 0 && err == nil && j.Kind == execjob.Kind {
						fmt.Fprintf(a.stderr, "jobdir: job %s has no output yet (%s)\n", j.ID, stateText(j))
					}
					return err
				}
				return followLog(ctx, st, j.ID, path, a.stdout)
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing output until the job has finished")
	return cmd
}

// followLog copies the log at path to w as it grows, until the job is
// terminal and its log is read to the end.
func followLog(ctx context.Context, st jobstore.Store, id, path string, w io.Writer) error {
	waitCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		_, err := st.Wait(waitCtx, id)
		done <- err
	}()
	var off int64
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		n, err := copyFrom(w, path, off)
		off += n
		if err != nil {
			return err
		}
		select {
		case err := <-done:
			if err != nil {
				return explainJob(id, err)
			}
			// The worker writes the log before it records the outcome, so
			// the log is complete now.
			_, err = copyFrom(w, path, off)
			return err
		case <-tick.C:
		}
	}
}

// copyFrom copies the file at path from offset off to w and returns how many
// bytes it copied. A missing file is empty.
func copyFrom(w io.Writer, path string, off int64) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, fmt.Errorf("read log: %w", err)
	}
	n, err := io.Copy(w, f)
	if err != nil {
		return n, fmt.Errorf("read log: %w", err)
	}
	return n, nil
}
