package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

// logsDirName is the directory, inside the store directory, that holds the
// output of exec jobs, one <ID>.log file per job.
const logsDirName = "logs"

// createsStore is the annotation of the commands that create a store
// where they find none: submit, work and serve. Every other command only
// reads or changes an existing one.
const createsStore = "creates-store"

// errNoStore is what a command that does not create a store returns when
// it finds none.
var errNoStore = errors.New("no store")

// plainError is an error for people: its message stands alone, an
// optional hint follows it on the next line, and it unwraps to a sentinel
// for errors.Is.
type plainError struct {
	msg  string
	hint string
	err  error
}

func (e *plainError) Error() string {
	if e.hint == "" {
		return e.msg
	}
	return e.msg + "\n" + e.hint
}

func (e *plainError) Unwrap() error { return e.err }

// storeDir returns the absolute directory of the store the flags and the
// environment select, as git finds its repository: --dir DIR, else
// $JOBDIR_DIR, else the first .jobdir in the working directory or one of
// its parents. When none is found, a command that creates stores (see
// createsStore) gets ./.jobdir, and any other errNoStore. A directory that
// is neither a store nor empty is refused with filestore.ErrNotStore, so
// that a typo never turns a directory of other files into a store.
func (a *app) storeDir() (string, error) {
	named, source := a.dir, "--dir"
	if named == "" {
		named, source = os.Getenv("JOBDIR_DIR"), "$JOBDIR_DIR"
	}
	if named != "" {
		dir, err := filepath.Abs(named)
		if err != nil {
			return "", fmt.Errorf("store directory %q: %w", named, err)
		}
		return dir, a.checkStoreDir(dir, source)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cannot look for the store: working directory: %w", err)
	}
	for d := wd; ; {
		p := filepath.Join(d, defaultDirName)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return p, a.checkStoreDir(p, "")
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if !a.createStore {
		return "", &plainError{err: errNoStore,
			msg:  fmt.Sprintf("no store found: there is no %s in %s or a directory above it", defaultDirName, wd),
			hint: "jobdir submit, work and serve create one in the current directory; or name a store with --dir or $JOBDIR_DIR."}
	}
	return filepath.Join(wd, defaultDirName), nil
}

// checkStoreDir returns nil if dir holds a store, or may become one for
// this command; source names the flag or variable that named dir ("" if it
// was found).
func (a *app) checkStoreDir(dir, source string) error {
	isStore, err := filestore.IsStore(dir)
	if err != nil || isStore {
		return nil // Open says what is wrong in full
	}
	// Another process may be creating a store there at this moment:
	// OtherFiles tells its half-made layout from other files, by the
	// creation lock Open makes first, so this check and that creation
	// need no lock between them.
	names, err := filestore.OtherFiles(dir, 4)
	if err != nil {
		return nil // Open says what is wrong in full
	}
	if len(names) > 0 {
		if len(names) > 3 {
			names[3] = "…"
		}
		return &plainError{err: filestore.ErrNotStore,
			msg:  fmt.Sprintf("%s is not a jobdir store: it holds other files (%s) and no FORMAT file", dir, strings.Join(names, ", ")),
			hint: "Name a store, or an empty or new directory for a new one, with --dir or $JOBDIR_DIR."}
	}
	if a.createStore {
		return nil
	}
	what := "is empty"
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		what = "does not exist"
	}
	hint := "jobdir submit, work and serve create a store there."
	if source != "" {
		hint = "Check " + source + "; " + hint
	}
	return &plainError{err: errNoStore, msg: fmt.Sprintf("no store in %s: the directory %s", dir, what), hint: hint}
}

// openStore opens the selected store (see storeDir) and explains a failure
// in terms a person can act on. With -v, it says which store it opened.
func (a *app) openStore(ctx context.Context) (*filestore.Store, error) {
	dir, err := a.storeDir()
	if err != nil {
		return nil, err
	}
	st, err := filestore.Open(ctx, dir, &filestore.Options{AllowUnsafeFilesystem: a.allowUnsafeFS, GroupAccess: a.groupAccess, SyncFS: a.syncFS, Logger: a.logger(slog.LevelWarn)})
	if err != nil {
		return nil, explainOpen(dir, err)
	}
	a.storeName = st.Dir()
	if a.verbose {
		fmt.Fprintf(a.stderr, "jobdir: store %s\njobdir: durability: %s\n", a.storeName, st.Durability())
	}
	return st, nil
}

func explainOpen(dir string, err error) error {
	wrapped := fmt.Errorf("cannot open the store in %s: %w", dir, err)
	switch {
	case errors.Is(err, filestore.ErrUnsupportedFilesystem):
		return withHint(wrapped, "jobdir relies on flock, rename and inotify behaving as on a local disk, which this filesystem does not guarantee.\n"+
			"Put the store on a local filesystem, or pass --allow-unsafe-filesystem if only one jobdir process on one machine will use it.\n"+
			"Even then a power cut may lose changes jobdir acknowledged: it fsyncs each file and directory there (never syncfs), but only the filesystem can make an fsync reach the disk.")
	case errors.Is(err, filestore.ErrFormatTooNew):
		return withHint(wrapped, "It was written by a newer jobdir; use that version, or upgrade this one.")
	case errors.Is(err, filestore.ErrNotStore):
		return withHint(wrapped, "Choose another directory with --dir or $JOBDIR_DIR.")
	case errors.Is(err, fs.ErrPermission):
		return withHint(wrapped, "Check that this user may read and write the directory and its files, or choose another with --dir or $JOBDIR_DIR.")
	case errors.Is(err, syscall.ENOTDIR):
		return withHint(fmt.Errorf("cannot open the store in %s: it is a file, not a directory", dir),
			"Give the directory the store is in (or one to make it in) with --dir or $JOBDIR_DIR.")
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

// explainJob rewrites the errors of operations on job id in the open
// store for a person.
func (a *app) explainJob(id string, err error) error {
	var te *jobstore.TransitionError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jobstore.ErrDependencyFailed):
		msg := fmt.Sprintf("job %s cannot be retried: a job it depends on failed or was canceled, and is still so; retry that job first", id)
		hint := ""
		var de *jobstore.DependencyError
		if errors.As(err, &de) {
			msg = de.Error()
			hint = fmt.Sprintf("Run jobdir retry %s, then jobdir retry %s.", de.Other, id)
		}
		return &plainError{err: err, msg: msg, hint: hint}
	case errors.Is(err, jobstore.ErrDependedOn):
		msg := fmt.Sprintf("job %s cannot be deleted: a waiting job depends on it", id)
		var de *jobstore.DependencyError
		if errors.As(err, &de) {
			msg = fmt.Sprintf("job %s cannot be deleted: %s", id, de.Detail)
		}
		return &plainError{err: err, msg: msg, hint: "It can be deleted once no job waits for it (cancel the waiting job, or let it run)."}
	case errors.Is(err, jobstore.ErrInvalidID):
		return fmt.Errorf("%q is not a job ID (an ID is 26 characters such as 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB; see jobdir list)", id)
	case errors.Is(err, jobstore.ErrNotFound):
		return fmt.Errorf("no job %s in the store %s (it never existed there, or was pruned)", id, a.storeName)
	case errors.As(err, &te):
		return &plainError{err: err, msg: transitionText(id, te)}
	}
	return err
}

// transitionText says in plain words why job id cannot make the move te
// describes.
func transitionText(id string, te *jobstore.TransitionError) string {
	is := map[jobstore.State]string{
		jobstore.StateWaiting:   "is waiting for its dependencies",
		jobstore.StateQueued:    "is queued",
		jobstore.StateRunning:   "is running",
		jobstore.StateSucceeded: "already succeeded",
		jobstore.StateFailed:    "already failed",
		jobstore.StateCanceled:  "was canceled",
	}[te.From]
	if is == "" {
		is = "is " + string(te.From)
	}
	switch te.To {
	case jobstore.StateCanceled:
		return fmt.Sprintf("job %s %s: only a waiting, queued or running job can be canceled", id, is)
	case jobstore.StateQueued:
		return fmt.Sprintf("job %s %s: only a failed or canceled job can be retried (jobdir rerun %s runs a copy of it)", id, is, id)
	}
	return fmt.Sprintf("job %s %s: it cannot become %s", id, is, te.To)
}
