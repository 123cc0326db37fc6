package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// recoverDead finds the lease sessions of dead or cut-off workers and
// queues their running jobs again (the attempt counts), one session per
// transaction. A session is dead once its advisory lock is free (its
// connection closed: the process died, or the server closed it) for
// LeaseGrace, or once it expired (not renewed for LeaseTTL, on the
// database's clock: a lost node, a hung process).
func (s *Store) recoverDead(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, s.q.findDead, s.ns, s.opts.LeaseGrace.Seconds())
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := s.rescue(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rescue ends the dead session id and queues its running jobs again, in
// one transaction, unless another store got there first.
func (s *Store) rescue(ctx context.Context, id int32) error {
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		n = 0
		var gone int32
		err := tx.QueryRow(ctx, s.q.rescue, id, s.opts.LeaseGrace.Seconds()).Scan(&gone)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // recovered by another store, or renewed
		}
		if err != nil {
			return err
		}
		rs, err := tx.Query(ctx, s.q.running, id)
		if err != nil {
			return err
		}
		var jobs []row
		var sc rowScanner
		for rs.Next() {
			r, err := sc.scan(rs)
			if err != nil {
				rs.Close()
				return err
			}
			jobs = append(jobs, r)
		}
		if err := rs.Err(); err != nil {
			return err
		}
		now := usec(time.Now())
		for _, r := range jobs {
			j, err := storekit.ApplyRecover(r.job, now)
			if err != nil {
				return err
			}
			if _, err := s.write(ctx, tx, r, j, true); err != nil {
				return err
			}
			s.opts.Logger.Warn("pgstore: job of a dead worker recovered", "job", j.ID, "worker", r.job.Worker,
				"attempt", r.job.Attempt, "state", j.State, "session", id)
		}
		n = len(jobs)
		return nil
	})
	if err == nil && n > 0 {
		s.signalWork()
	}
	return err
}
