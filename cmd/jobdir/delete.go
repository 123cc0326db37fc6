package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/jobstore"
)

func (a *app) deleteCommand() *cobra.Command {
	var (
		ja jobArg
		bf bulkFilter
	)
	cmd := &cobra.Command{
		Use:   "delete ID | --key KEY | --state STATE --kind KIND",
		Short: "Delete a finished job, with its log",
		Long: `Delete a job that succeeded, failed or was canceled, with its log, whatever
its age: it is gone for every process, and its key is free again. A waiting,
queued or running job is not deleted: cancel it first. Nor is a finished job
that a waiting job depends on (jobdir submit --after), until that job no
longer waits. A job whose --env held a secret is one to delete.

With --state or --kind instead of an ID, delete every finished job in those
states and of that kind: jobdir says how many, asks before it goes on (--yes
does not ask), then says how many it deleted. "jobdir prune" deletes finished
jobs by age.`,
		Example: `  jobdir delete 01JCXZ8ZQ4V6Y2W0M8R5T3N7PB
  jobdir delete --key deploy-42
  jobdir delete --state failed --kind exec --yes`,
		Args: bulkArgs(&bf, &ja),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.withStore(ctx, func(st *cliStore) error {
				d, ok := st.Store.(jobstore.Deleter)
				if !ok {
					return errors.New(`this store cannot delete jobs one by one: prune them ("jobdir prune")`)
				}
				del := func(ctx context.Context, id string) (jobstore.Job, error) {
					if err := d.Delete(ctx, id); err != nil {
						return jobstore.Job{}, err
					}
					if err := st.deleteLog(ctx, id); err != nil {
						a.logger(slog.LevelWarn).Warn(fmt.Sprintf("job %s is deleted, its log not: %s", id, plainMessage(err.Error())))
					}
					return jobstore.Job{}, nil
				}
				if bf.set() {
					opts, f, err := bf.options([]jobstore.State{jobstore.StateSucceeded, jobstore.StateFailed, jobstore.StateCanceled})
					if err != nil {
						return err
					}
					return a.bulk(ctx, st, &bf, opts, f, "delete", "deleted", del)
				}
				id, err := ja.resolve(ctx, a, st, args)
				if err != nil {
					return err
				}
				if _, err := del(ctx, id); err != nil {
					if errors.Is(err, jobstore.ErrNotFinished) {
						if j, gerr := st.Get(ctx, id); gerr == nil {
							return &plainError{err: err, msg: fmt.Sprintf("job %s is %s: only a finished job can be deleted (cancel it first)", id, j.State)}
						}
					}
					return a.explainJob(id, err)
				}
				_, err = fmt.Fprintf(a.stdout, "%s deleted\n", id)
				return err
			})
		},
	}
	ja.register(cmd)
	bf.register(cmd, "delete")
	return cmd
}
