package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobdir/jobdir/jobstore"
)

// SubmitTx submits spec as Submit does, in the caller's transaction tx on
// the store's database: the job exists if and only if tx commits, and the
// workers are notified when it commits (a NOTIFY in tx, which PostgreSQL
// delivers at the commit and drops at a rollback). So a program writes its
// own rows and the job that acts on them at once, or neither:
//
//	tx, _ := pool.Begin(ctx)
//	tx.Exec(ctx, `INSERT INTO orders ...`)
//	store.SubmitTx(ctx, tx, jobstore.Spec{Kind: "order.ship", Key: "ship-" + orderID})
//	tx.Commit(ctx)
//
// A key that a job of another, uncommitted transaction holds waits for
// that transaction, as any insert of a unique value does; created=false
// names the job that holds the key. An error other than invalid input
// leaves tx aborted, as a failed statement does: roll it back. tx must be
// on the database of the store's pool; the store's schema is used whatever
// tx's search_path.
//
// NOTIFY makes PostgreSQL serialize the commits of the transactions that
// sent one, which Submit, whose notification goes after its commit,
// avoids; submit from many concurrent transactions at once with care.
func (s *Store) SubmitTx(ctx context.Context, tx pgx.Tx, spec jobstore.Spec) (jobstore.Job, bool, error) {
	if err := spec.Validate(s.opts.MaxPayload); err != nil {
		return jobstore.Job{}, false, fmt.Errorf("pgstore: submit in a transaction: %w", err)
	}
	if err := validateSpecs([]jobstore.Spec{spec}); err != nil {
		return jobstore.Job{}, false, fmt.Errorf("pgstore: submit in a transaction: %w", err)
	}
	if tx == nil {
		return jobstore.Job{}, false, fmt.Errorf("pgstore: submit in a transaction: %w: nil transaction", jobstore.ErrInvalidInput)
	}
	if err := s.check(ctx, "submit in a transaction"); err != nil {
		return jobstore.Job{}, false, err
	}
	if needsPlan([]jobstore.Spec{spec}) {
		out, err := s.submitPlannedTx(ctx, tx, "submit in a transaction", []jobstore.Spec{spec}, false)
		if err != nil {
			return jobstore.Job{}, false, err
		}
		return out[0].Job, out[0].Created, nil
	}
	j, created, err := s.insertJob(ctx, tx, spec, "submit in a transaction", func(err error) error {
		return fmt.Errorf("pgstore: submit in a transaction: %w", err)
	})
	if err == nil && created {
		if err := s.notifyInTx(ctx, tx); err != nil {
			return jobstore.Job{}, false, err
		}
	}
	return j, created, err
}

// SubmitBatchTx submits every spec as SubmitBatch does, in the caller's
// transaction tx, as SubmitTx submits one: the jobs exist if and only if
// tx commits, and the workers are notified when it commits. It submits
// nothing and leaves tx as it was if a spec is invalid; another error
// leaves tx aborted.
func (s *Store) SubmitBatchTx(ctx context.Context, tx pgx.Tx, specs []jobstore.Spec) ([]jobstore.Submitted, error) {
	if tx == nil {
		return nil, fmt.Errorf("pgstore: submit batch in a transaction: %w: nil transaction", jobstore.ErrInvalidInput)
	}
	if needsPlan(specs) {
		if err := s.validateBatch(ctx, "submit batch in a transaction", specs); err != nil {
			return nil, err
		}
		return s.submitPlannedTx(ctx, tx, "submit batch in a transaction", specs, true)
	}
	b, err := s.newBatch(ctx, "submit batch in a transaction", specs)
	if err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return b.out, nil
	}
	for try := 0; ; try++ {
		// A savepoint, so that a job pruned meanwhile (errRetry) is tried
		// again without aborting the caller's transaction.
		err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return s.insertBatch(ctx, sp, b) })
		if err == nil {
			break
		}
		if errors.Is(err, errRetry) && try < 5 {
			continue
		}
		return nil, fmt.Errorf("pgstore: submit batch in a transaction: %w", err)
	}
	out := b.results(specs)
	if len(b.created) > 0 {
		if err := s.notifyInTx(ctx, tx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// notifyInTx sends the work notification in tx, to be delivered when tx
// commits.
func (s *Store) notifyInTx(ctx context.Context, tx pgx.Tx) error {
	// Not s.q.announce: it turns synchronous_commit off for its own
	// transaction, which here is the caller's.
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, s.q.chanWork); err != nil {
		return fmt.Errorf("pgstore: notify the workers in the transaction: %w", err)
	}
	return nil
}

// submitPlannedTx is submitPlanned in the caller's transaction tx, in a
// savepoint (so that a refusal leaves tx as it was), with the workers
// notified when tx commits.
func (s *Store) submitPlannedTx(ctx context.Context, tx pgx.Tx, op string, specs []jobstore.Spec, many bool) ([]jobstore.Submitted, error) {
	out, queued, err := s.submitPlanned(ctx, tx, specs, many)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s: %w", op, err)
	}
	if queued {
		if err := s.notifyInTx(ctx, tx); err != nil {
			return nil, err
		}
	}
	return out, nil
}
