package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

// logsDirName is the directory, inside the store directory, that holds the
// output of exec jobs, one <ID>.log file per job.
const logsDirName = "logs"

// openStore opens the selected store and explains a failure in terms a
// person can act on.
func (a *app) openStore(ctx context.Context) (*filestore.Store, error) {
	dir, err := a.storeDir()
	if err != nil {
		return nil, err
	}
	st, err := filestore.Open(ctx, dir, &filestore.Options{AllowUnsafeFilesystem: a.allowUnsafeFS, GroupAccess: a.groupAccess, SyncFS: a.syncFS, Logger: a.logger(slog.LevelWarn)})
	if err != nil {
		return nil, explainOpen(dir, err)
	}
	return st, nil
}

func explainOpen(dir string, err error) error {
	wrapped := fmt.Errorf("cannot open the store in %s: %w", dir, err)
	switch {
	case errors.Is(err, filestore.ErrUnsupportedFilesystem):
		return withHint(wrapped, "jobdir relies on flock, rename and inotify behaving as on a local disk, which this filesystem does not guarantee.\n"+
			"Put the store on a local filesystem, or pass --allow-unsafe-filesystem if you accept the risk (for example, one machine only).")
	case errors.Is(err, filestore.ErrFormatTooNew):
		return withHint(wrapped, "It was written by a newer jobdir; use that version, or upgrade this one.")
	case errors.Is(err, filestore.ErrNotStore):
		return withHint(wrapped, "Choose another directory with --dir or $JOBDIR_DIR.")
	case errors.Is(err, fs.ErrPermission):
		return withHint(wrapped, "Check that this user may read and write the directory and its files, or choose another with --dir or $JOBDIR_DIR.")
	case errors.Is(err, context.Canceled):
		return err
	}
	return wrapped
}

// hintError is an error followed, for a person, by what to do about it.
type hintError struct {
	err  error
	hint string
}

func withHint(err error, hint string) error { return &hintError{err: err, hint: hint} }

func (e *hintError) Error() string { return e.err.Error() + "\n" + e.hint }
func (e *hintError) Unwrap() error { return e.err }

// logger returns a logger that writes records of level or above to stderr,
// without timestamps: a person reads them as the command runs.
func (a *app) logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, attr slog.Attr) slog.Attr {
			if len(groups) == 0 && attr.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return attr
		},
	}))
}

// withStore opens the store (see openCLIStore), runs f, and closes the
// store.
func (a *app) withStore(ctx context.Context, f func(st *cliStore) error) error {
	st, err := a.openCLIStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	return f(st)
}

// explainJob rewrites the errors of operations on job id for a person.
func explainJob(id string, err error) error {
	var te *jobstore.TransitionError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jobstore.ErrInvalidID):
		return fmt.Errorf("%q is not a job ID (an ID is 26 characters such as 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB; see jobdir list)", id)
	case errors.Is(err, jobstore.ErrNotFound):
		return fmt.Errorf("no job %s in this store (it never existed here, or was pruned)", id)
	case errors.As(err, &te):
		return fmt.Errorf("job %s is %s: it cannot become %s", id, te.From, te.To)
	}
	return err
}
