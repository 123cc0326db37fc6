// Jobdir is a job runner and store administration tool whose job store is
// a directory that several processes may share.
//
// Usage:
//
//	jobdir [--store URL | --dir DIR] COMMAND [FLAGS] [ARGS]
//
// The store is --store URL, else --dir DIR, else $JOBDIR_STORE, else
// $JOBDIR_DIR, else the .jobdir directory of the working directory or the
// nearest one above it. A URL is a directory (a path or file:///path) or
// postgres://USER@HOST/DB?schema=NAME, a store in PostgreSQL that workers and
// servers on several machines share. Only submit, work and serve create a
// store (./.jobdir when none is found), and never in a directory that holds
// other files. Jobs submitted with "jobdir submit" are of kind "exec": they
// run a program with arguments (no shell) in the submitter's working
// directory. "jobdir work" runs them; "jobdir serve" exposes the store over
// HTTP.
//
// A job is named by its ID in either case, a unique prefix of it of 4 or
// more characters, or "last" (the newest job); get, logs, wait and cancel
// also take --key KEY.
//
// Commands:
//
//	submit    submit a job that runs a program
//	work      run exec jobs until interrupted
//	get       show one job
//	list      list jobs
//	logs      print a job's output
//	cancel    cancel a job, or every job a filter selects
//	retry     queue a failed or canceled job again, or every one a filter selects
//	rerun     submit a new job that copies another one
//	wait      wait until a job has finished
//	stats     count jobs by state
//	prune     delete old finished jobs (--state: only in those states)
//	fsck      check the store, and repair it with --repair
//	copy      copy every job from one store to another (a directory, PostgreSQL)
//	serve     serve the HTTP API
//	version   print jobdir's version (also jobdir --version)
//
// Every --json that prints a job (get, list, wait, submit, rerun) prints it
// as the HTTP API does, in the form of httpapi.Job: the timeout is
// "timeout", a duration string such as "30s", not the store's record form.
//
// Exit status: 0 on success, 1 on an error, 2 on a usage error (said in
// one line, with "did you mean" for a mistyped command, and a pointer to
// --help). "jobdir
// wait" exits 3 when the job failed, 4 when it was canceled and 5 when its
// --timeout passed first. "jobdir help COMMAND" documents each command.
package main
