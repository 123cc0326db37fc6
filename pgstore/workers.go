package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

var _ jobstore.WorkerHistory = (*Store)(nil)

// worker is one registration of this Store: what it registered and the
// token of its row in the workers table.
type worker struct {
	info  jobstore.WorkerInfo
	token string
}

// unregisterTimeout bounds the delete of a worker's row at unregister and
// Close, which take no context.
const unregisterTimeout = 5 * time.Second

// RegisterWorker lists info until unregister is called or the Store is
// closed, or for as long as the Store's lease session lives: its row in the
// workers table names the session, and is listed only while the session
// is alive, so a worker whose process dies is gone as soon as the server
// sees its connection close, and one that stops answering (a SIGSTOPped
// process, a lost network) once its lease expires, within LeaseTTL. When
// the Store starts a new lease session, its workers' rows move to it. It
// implements jobstore.WorkerRegistry.
func (s *Store) RegisterWorker(ctx context.Context, info jobstore.WorkerInfo) (func() error, error) {
	const op = "register worker"
	if err := info.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: %s: %w", op, err)
	}
	if err := s.check(ctx, op); err != nil {
		return nil, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	w := &worker{info: info.Normalized(), token: hex.EncodeToString(b[:])}
	s.mu.Lock()
	if s.workers == nil {
		s.workers = make(map[*worker]struct{})
	}
	s.workers[w] = struct{}{}
	s.mu.Unlock()
	if err := s.putWorker(ctx, w); err != nil {
		s.mu.Lock()
		delete(s.workers, w)
		s.mu.Unlock()
		return nil, s.fail(ctx, op+" "+info.ID, err)
	}
	return sync.OnceValue(func() error {
		s.mu.Lock()
		_, ok := s.workers[w]
		delete(s.workers, w)
		s.mu.Unlock()
		if !ok {
			return nil // Close removed it
		}
		ctx, cancel := context.WithTimeout(context.Background(), unregisterTimeout)
		defer cancel()
		if _, err := s.pool.Exec(ctx, s.q.unregisterWorker, w.info.ID, w.token); err != nil {
			return s.fail(ctx, "unregister worker "+w.info.ID, err)
		}
		return nil
	}), nil
}

// putWorker writes w's row, naming the Store's current lease session
// (starting one if need be). It writes it again if the session changed
// meanwhile, so that a session started while it ran, whose start moved
// the rows it knew of, does not miss w.
func (s *Store) putWorker(ctx context.Context, w *worker) error {
	for tries := 0; ; tries++ {
		sess, err := s.session(ctx)
		if err != nil {
			return err
		}
		err = s.writeWorker(ctx, w, sess)
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "23503" && tries < 3:
			// The session's row is gone: recovery found it dead
			// before this Store did. The next session() starts another.
			sess.end(errSessionRecovered)
			continue
		case err != nil:
			return err
		}
		s.mu.Lock()
		moved := s.sess != nil && s.sess != sess
		s.mu.Unlock()
		if !moved || tries >= 3 {
			return nil
		}
	}
}

// writeWorker writes w's row, naming sess; ErrWorkerExists if a live
// worker of another registration holds w's ID.
func (s *Store) writeWorker(ctx context.Context, w *worker, sess *session) error {
	data, err := json.Marshal(w.info)
	if err != nil {
		return err
	}
	var id string
	err = s.pool.QueryRow(ctx, s.q.registerWorker, s.ns, w.info.ID, sess.id, w.token, data).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return jobstore.ErrWorkerExists
	}
	return err
}

// moveWorkers writes the rows of the Store's workers again, naming the new
// lease session sess; session() calls it. A worker whose name a live
// worker of another store took meanwhile is logged and stays unlisted.
func (s *Store) moveWorkers(ctx context.Context, sess *session) {
	// Not the caller's deadline: a claim that started the session may be
	// about to give up, and the rows must move all the same.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unregisterTimeout)
	defer cancel()
	s.mu.Lock()
	ws := make([]*worker, 0, len(s.workers))
	for w := range s.workers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		if err := s.writeWorker(ctx, w, sess); err != nil {
			s.opts.Logger.Warn("pgstore: cannot list the worker under the new lease session", "worker", w.info.ID, "session", sess.id, "err", err)
		}
	}
}

// relistWorkers starts a new lease session for the Store's workers after
// one ended, trying every second until it has one or the Store closes, so
// that a runner that is not claiming (idle, waiting for work) is listed
// again without waiting for its next claim. The keeper of the session that
// ended calls it, before it is done.
func (s *Store) relistWorkers() {
	s.mu.Lock()
	if len(s.workers) == 0 || s.isClosed() {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		ctx, cancel := s.untilClosed()
		defer cancel()
		for {
			if _, err := s.session(ctx); err == nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
}

// closeWorkers deletes the rows of the Store's workers; Close calls it.
func (s *Store) closeWorkers() {
	s.mu.Lock()
	ws := s.workers
	s.workers = nil
	s.mu.Unlock()
	if len(ws) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), unregisterTimeout)
	defer cancel()
	for w := range ws {
		_, _ = s.pool.Exec(ctx, s.q.unregisterWorker, w.info.ID, w.token)
	}
}

// Workers returns the workers whose lease session is alive, of every
// store on the schema, sorted by ID. It implements jobstore.WorkerRegistry.
func (s *Store) Workers(ctx context.Context) ([]jobstore.WorkerInfo, error) {
	const op = "workers"
	if err := s.check(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.q.workers, s.ns)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	ws, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (jobstore.WorkerInfo, error) {
		var info jobstore.WorkerInfo
		err := row.Scan(&info)
		if info.Kinds == nil {
			info.Kinds = []string{}
		}
		return info, err
	})
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	storekit.SortWorkers(ws)
	return ws, nil
}

// EndedWorkers returns the workers of every store on the schema that
// ended at or after since, within jobstore.RecentWorkerWindow, sorted by
// ID, each with EndedAt on the server's clock: those that unregistered or
// whose store closed (at that moment), and those whose lease session died
// (when a store found it dead, or when its lease expired). It forgets the
// ends older than the window. It implements jobstore.WorkerHistory.
func (s *Store) EndedWorkers(ctx context.Context, since time.Time) ([]jobstore.WorkerInfo, error) {
	const op = "ended workers"
	if err := s.check(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.q.endedWorkers, s.ns, since, time.Now().Add(-jobstore.RecentWorkerWindow))
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	defer rows.Close()
	latest := map[string]jobstore.WorkerInfo{}
	for rows.Next() {
		var (
			info  jobstore.WorkerInfo
			ended time.Time
		)
		if err := rows.Scan(&info, &ended); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		info.EndedAt, info.Running = ended.UTC(), nil
		if info.Kinds == nil {
			info.Kinds = []string{}
		}
		if prev, ok := latest[info.ID]; !ok || prev.EndedAt.Before(info.EndedAt) {
			latest[info.ID] = info
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, op, err)
	}
	ws := make([]jobstore.WorkerInfo, 0, len(latest))
	for _, info := range latest {
		ws = append(ws, info)
	}
	storekit.SortWorkers(ws)
	return ws, nil
}
