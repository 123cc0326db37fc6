package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses. The wait command documents 3, 4 and 5.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitFailed      = 3
	exitCanceled    = 4
	exitTimeout     = 5
	exitInterrupted = 130
)

// defaultDirName is the store used when neither --dir nor $JOBDIR_DIR is set.
const defaultDirName = ".jobdir"

// exitStatusError ends a command with a given exit status. If silent, the message
// has already been printed (or there is none).
type exitStatusError struct {
	code   int
	err    error
	silent bool
}

func (e *exitStatusError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitStatusError) Unwrap() error { return e.err }

// usageError reports a command line that does not make sense; its command's
// usage follows the message.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// app holds what every command shares: the streams and the global flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	dir           string // --dir
	store         string // --store
	allowUnsafeFS bool   // --allow-unsafe-filesystem
	groupAccess   bool   // --group-access
	syncFS        bool   // --syncfs
	verbose       bool   // -v: say which store is used
	started       bool   // a command's RunE was reached: later errors are not usage errors
	createStore   bool   // the command creates the store if it finds none
	storeName     string // the open store, for messages
	logFormat     string // --log-format
	errLines      *lineWriter
}

// run executes the jobdir command line args and returns the exit status.
// ctx ends on SIGINT or SIGTERM.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if !a.started || errors.As(err, &ue) {
		// One line for the mistake, one for where to read more: the
		// whole usage would bury the mistake.
		if cmd == nil {
			cmd = root
		}
		// The library's "invalid input: " says nothing a person needs.
		msg := strings.ReplaceAll(err.Error(), "invalid input: ", "")
		fmt.Fprintf(stderr, "jobdir: %s\nRun '%s --help' for usage.\n", msg, cmd.CommandPath())
		return exitUsage
	}
	var ee *exitStatusError
	if errors.As(err, &ee) {
		if !ee.silent && ee.err != nil {
			fmt.Fprintf(stderr, "jobdir: %v\n", ee.err)
		}
		return ee.code
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "jobdir: interrupted")
		return exitInterrupted
	}
	fmt.Fprintf(stderr, "jobdir: %v\n", err)
	return exitError
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "jobdir",
		Short: "Run jobs from a store kept in a directory that many processes share",
		Long: `jobdir keeps jobs in a directory and runs them. Any number of jobdir processes
on one machine (or pods on one node sharing a volume) may use the same
directory at once: each job is claimed by exactly one worker, a job whose
worker dies is run again by another, and a cancel or a wait in one process
sees what the others do.

Jobs submitted from the command line run a program with its arguments (no
shell) in the directory they were submitted from. Their output goes to a log
file per job, which "jobdir logs" prints.

The store is --store URL, else --dir DIR, else $JOBDIR_STORE, else
$JOBDIR_DIR, else the .jobdir directory in the current directory or the
nearest directory above it, as git finds its repository. A URL is a
directory (a path or file:///path) or a PostgreSQL database,
postgres://USER@HOST/DB?schema=NAME (schema "jobdir" by default), for
workers and servers on several machines. Only submit, work and serve create
a store (./.jobdir when none is found); the other commands say so when there
is none. A directory that holds other files is never made a store.

A job is named by its ID in either case, by a prefix of it of 4 or more
characters that no other job's ID starts with, or by "last", the newest job;
get, logs, wait and cancel also take --key KEY. Shell completion (see jobdir
completion --help) offers the newest jobs' IDs, states and kinds.

Exit status: 0 on success, 1 on an error, 2 on a usage error; "jobdir wait"
also exits 3 (job failed), 4 (canceled) and 5 (its --timeout passed).`,
		Example: `  # Submit a few jobs, run a worker until they are done, and look at them.
  jobdir submit -- sh -c 'echo hello from $JOBDIR_JOB_ID'
  jobdir submit --key nightly-report -- ./report.sh --since yesterday
  jobdir work --exit-when-idle
  jobdir list
  jobdir logs 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB

  # Serve the HTTP API to local clients, with two workers in the same process.
  JOBDIR_TOKEN=$(openssl rand -hex 32) jobdir serve --work 2 --allow-kind exec`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       version(),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q", args[0])
			if sugg := cmd.SuggestionsFor(args[0]); len(sugg) > 0 {
				msg += "; did you mean " + strings.Join(sugg, " or ") + "?"
			}
			return errors.New(msg)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			a.started = true
			a.createStore = cmd.Annotations[createsStore] != ""
			if a.logFormat != logText && a.logFormat != logJSON {
				return usagef("--log-format %q: want text or json", a.logFormat)
			}
			return nil
		},
	}
	root.PersistentFlags().StringVar(&a.dir, "dir", "", "use the store in `DIR` (default $JOBDIR_DIR, else the nearest .jobdir in this directory or above)")
	root.PersistentFlags().BoolVarP(&a.verbose, "verbose", "v", false, "say which store is used, and how a worker contains jobs")
	a.registerStoreFlag(root)
	root.PersistentFlags().StringVar(&a.logFormat, "log-format", logText,
		"how work and serve write their lines and warnings on stderr: text, for people, or json, one object a line")
	root.PersistentFlags().BoolVar(&a.allowUnsafeFS, "allow-unsafe-filesystem", false,
		"open a store on NFS, SMB, FUSE or Ceph: safe for one jobdir process on one machine only, and a change survives a power cut only if that filesystem makes an fsync reach its disk")
	root.PersistentFlags().BoolVar(&a.groupAccess, "group-access", false,
		"share the store with one group: create its directories 0770 and files 0660 (default 0700 and 0600), and let workers trust what the group may write")
	root.PersistentFlags().BoolVar(&a.syncFS, "syncfs", false,
		"make changes durable with one syncfs(2) shared by concurrent operations: faster with many workers, but it also flushes every other program's writes on the file system; for a store on a volume of its own (ignored where a syncfs does not reach the disk, as on FUSE)")
	// The flags of a store's set-up, rarely given, are in jobdir's own help
	// and in the help of the commands that create a store (submit, work,
	// serve), not in every command's.
	defaultHelp := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		if c != root && c.Annotations[createsStore] == "" {
			for _, name := range setupFlags {
				if f := root.PersistentFlags().Lookup(name); f != nil {
					f.Hidden = true
				}
			}
		}
		defaultHelp(c, args)
	})
	root.SuggestionsMinimumDistance = 2
	root.SetVersionTemplate("jobdir {{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{plainFlagError(err)}
	})
	root.AddGroup(
		&cobra.Group{ID: "jobs", Title: "Jobs:"},
		&cobra.Group{ID: "run", Title: "Running jobs:"},
		&cobra.Group{ID: "admin", Title: "Store administration:"},
	)
	for _, c := range []*cobra.Command{a.submitCommand(), a.getCommand(), a.listCommand(), a.logsCommand(),
		a.cancelCommand(), a.retryCommand(), a.rerunCommand(), a.waitCommand(), a.deleteCommand(), a.batchCommand()} {
		c.GroupID = "jobs"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.workCommand(), a.serveCommand(), a.workersCommand(), a.queueCommand(), a.scheduleCommand()} {
		c.GroupID = "run"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.statsCommand(), a.pruneCommand(), a.retentionCommand(), a.fsckCommand(), a.copyCommand(), a.versionCommand()} {
		c.GroupID = "admin"
		root.AddCommand(c)
	}
	a.addCompletions(root)
	return root
}

// plainFlagError rewrites pflag's error for a flag value that does not
// parse, which quotes Go's strconv, in plain words.
func plainFlagError(err error) error {
	var ive *pflag.InvalidValueError
	if !errors.As(err, &ive) {
		return err
	}
	f := ive.GetFlag()
	why := ive.Unwrap().Error()
	switch f.Value.Type() {
	case "int", "int64":
		why = "want a whole number"
	case "bool":
		why = "want true or false"
	}
	return fmt.Errorf("--%s %q: %s", f.Name, ive.GetValue(), why)
}

// idArg validates the single job ID argument of a command.
func idArg(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%s needs exactly one job ID, got %d arguments", cmd.Name(), len(args))
	}
	return nil
}

// oneLine squeezes s onto one line of at most n runes, for tables.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// setupFlags are the global flags of a store's set-up, which only jobdir's
// own help and the help of the commands that create a store list.
var setupFlags = []string{"allow-unsafe-filesystem", "group-access", "syncfs"}
