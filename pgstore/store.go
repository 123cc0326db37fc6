package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// Store is a jobstore.Store kept in a PostgreSQL schema that any number of
// processes on any number of machines may open at once. It is safe for
// concurrent use by goroutines and by processes; see the package
// documentation for what that rests on.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool
	opts    Options
	q       queries
	// ns is the first key of the store's advisory locks: the schema's OID,
	// unique in the database while the schema exists.
	ns int32

	// closed is closed by Close; stop ends the background goroutines.
	closed    chan struct{}
	stop      context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup

	// sessMu serializes the creation of lease sessions.
	sessMu sync.Mutex
	// probeMu serializes the connection-pooler checks (see probe).
	probeMu sync.Mutex
	// settingsTurn, of capacity 1, serializes the store's changes of
	// queue settings (setQueue).
	settingsTurn chan struct{}

	mu sync.Mutex
	// sess is the current lease session, nil until the first Claim and
	// after a session is lost.
	sess *session
	// workers holds the workers this Store registered (workers.go).
	workers map[*worker]struct{}
	// held maps the leases this store handed out and has not seen
	// completed to what it knows about them.
	held map[jobstore.Lease]heldLease
	// releasing holds the leases whose Release failed, for maintain to
	// try again.
	releasing map[jobstore.Lease]struct{}
	// announce holds a request for a work notification (see
	// announceWork).
	announce chan struct{}
	// announcerDone is set when the announcer returns: announceWork
	// then notifies by itself.
	announcerDone bool
	// work is closed and replaced whenever a job may have become
	// claimable; signals counts that, and what the latest Claim that
	// found nothing saw (see AwaitWork).
	work    chan struct{}
	signals storekit.WorkCount
	// completing holds the Complete calls waiting for a batch; flushing
	// counts the flusher goroutines that write them.
	completing []*completion
	flushing   int
	// nextDue is the earliest future RunAt a Claim reported, zero if none.
	nextDue time.Time
	// limited holds the queues that have a limit or a rate, sorted, as
	// the store last read them (see acceptedLimited); limitedWrites
	// counts the store's own changes of queue settings.
	limited       []string
	limitedWrites uint64
	// watches holds a channel per job ID that Wait or WatchCancel watches,
	// closed and removed on any notification about that job, and one per
	// logWatchKey that WatchLog watches, likewise for its log.
	watches map[string]*idWatch
	// notes remembers which jobs the latest job notifications named (see
	// notePoint).
	notes notes
	// listening reports whether the listener connection is up;
	// listenChanged is closed and replaced when that changes.
	listening     bool
	listenChanged chan struct{}
	listenStarted bool
	// listenGen counts the changes of listening.
	listenGen uint64
}

// heldLease is what a store remembers of a lease it handed out.
type heldLease struct {
	sess *session
	// claimed is the row as the claim wrote it (without the payload), for
	// a Complete in one statement while nothing else changed it. It is
	// the claim's own copy (for a batch, an element of its slice of
	// rows), never written after hold.
	claimed *row
	// from is where the store's job notifications were when the claim
	// began, for a WatchCancel that need not read the row again.
	from notePoint
}

type idWatch struct {
	ch   chan struct{}
	refs int
}

var (
	_ jobstore.Store       = (*Store)(nil)
	_ jobstore.Pinger      = (*Store)(nil)
	_ jobstore.WorkAwaiter = (*Store)(nil)
	_ jobstore.StatePruner = (*Store)(nil)
	_ jobstore.Deleter     = (*Store)(nil)
)

// Open opens the store in the schema opts.Schema (default "jobdir") of the
// database pool connects to, creating the schema or upgrading it to this
// version's if needed, and returns it. Several processes may open one
// schema at once; the migrations run under an advisory lock. The store
// uses pool for its queries and, from the pool's configuration, opens up
// to two more connections of its own: one that listens for
// notifications, and, once it claims a job, one that holds its lease
// session. Close does not close pool. opts may be nil. Behind a
// connection pooler (a connection whose startup does not carry the
// server's process ID) Open and those two connections open a few
// short-lived probe connections, to learn whether the pooler keeps
// sessions (see ErrSessionNotKept).
//
// Open returns ErrSchemaTooNew for a schema written by a newer version, an
// error wrapping ErrNoSchema or ErrSchemaTooOld (with opts.MustExist) for
// a schema it would have to create or upgrade, an error wrapping
// ErrSessionNotKept for a pool whose prepared statements, cached by pgx
// by default, a pooler in transaction mode would mix up between clients
// (set default_query_exec_mode=exec), and an error wrapping
// jobstore.ErrInvalidInput for invalid options or a pool whose
// transactions are not read committed (default_transaction_isolation),
// before it creates or changes anything.
func Open(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgstore: open: %w: nil pool", jobstore.ErrInvalidInput)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	s := &Store{
		pool:          pool,
		opts:          o,
		q:             newQueries(o.Schema),
		closed:        make(chan struct{}),
		held:          make(map[jobstore.Lease]heldLease),
		releasing:     make(map[jobstore.Lease]struct{}),
		work:          make(chan struct{}),
		announce:      make(chan struct{}, 1),
		settingsTurn:  make(chan struct{}, 1),
		watches:       make(map[string]*idWatch),
		listenChanged: make(chan struct{}),
		notes:         notes{last: make(map[string]uint64)},
	}
	if err := s.checkPoolStatements(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	if err := s.checkIsolation(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	var oid int64
	if err := pool.QueryRow(ctx, `SELECT oid::int8 FROM pg_namespace WHERE nspname = $1`, o.Schema).Scan(&oid); err != nil {
		return nil, fmt.Errorf("pgstore: open: read schema: %w", err)
	}
	s.ns = int32(uint32(oid))
	if err := s.refreshLimited(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: open: read the queues' limits: %w", err)
	}
	bg, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.wg.Add(2)
	go s.maintain(bg)
	go s.announcer(bg)
	return s, nil
}

// OpenDSN connects to the database that dsn names (a URL such as
// postgres://user@host/db or a key=value string, as pgxpool.ParseConfig
// takes) with a pool of its own, and opens the store there as Open does.
// A URL's schema parameter (SchemaParam) names the schema, as
// opts.Schema does; giving both, different, is an error. Close closes the
// pool.
func OpenDSN(ctx context.Context, dsn string, opts *Options) (*Store, error) {
	if strings.Contains(dsn, "://") {
		d, schema, err := SplitSchema(dsn)
		if err != nil {
			return nil, fmt.Errorf("pgstore: open: %w", err)
		}
		if schema != "" {
			var o Options
			if opts != nil {
				o = *opts
			}
			if o.Schema != "" && o.Schema != schema {
				return nil, fmt.Errorf("pgstore: open: %w: the URL says schema %q and the options %q", jobstore.ErrInvalidInput, schema, o.Schema)
			}
			o.Schema, opts = schema, &o
		}
		dsn = d
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgstore: open: %w: %w", jobstore.ErrInvalidInput, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	s, err := Open(ctx, pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownPool = true
	return s, nil
}

// SchemaParam is the query parameter of a postgres:// URL that names the
// store's schema (jobdir's, not PostgreSQL's).
const SchemaParam = "schema"

// SplitSchema takes the schema parameter (SchemaParam) out of the
// postgres:// or postgresql:// URL dsn, and returns the URL without it and
// the schema ("" if none). Its errors wrap jobstore.ErrInvalidInput and
// never show a password.
func SplitSchema(dsn string) (string, string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		// url.Parse quotes the URL, password included: say less.
		return "", "", fmt.Errorf("%w: the PostgreSQL URL cannot be read; want postgres://USER@HOST:PORT/DATABASE", jobstore.ErrInvalidInput)
	}
	q := u.Query()
	if len(q[SchemaParam]) > 1 {
		return "", "", fmt.Errorf("%w: store %s: give the schema once", jobstore.ErrInvalidInput, u.Redacted())
	}
	schema := q.Get(SchemaParam)
	if _, ok := q[SchemaParam]; !ok {
		return dsn, "", nil
	}
	q.Del(SchemaParam)
	u.RawQuery = q.Encode()
	return u.String(), schema, nil
}

// Schema returns the name of the schema the store lives in.
func (s *Store) Schema() string { return s.opts.Schema }

// Close stops the store's goroutines, closes its listener and lease
// connections, and makes blocked calls return ErrClosed. The jobs this
// Store's workers still hold are recovered like a dead worker's, by any
// live store, once Options.LeaseGrace has passed. It closes the pool only
// if OpenDSN made it. Close is idempotent and safe for concurrent use.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.stop()
		s.closeWorkers()
		s.mu.Lock()
		sess := s.sess
		s.sess = nil
		s.mu.Unlock()
		if sess != nil {
			s.endSession(sess, errStoreClosed)
		}
		s.wg.Wait()
		if s.ownPool {
			s.pool.Close()
		}
	})
	return nil
}

// errStoreClosed ends the lease session of a store that closes.
var errStoreClosed = errors.New("the store was closed")

// untilClosed returns a context that ends when the store closes (or
// cancel is called), for the store's background work.
func (s *Store) untilClosed() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// check returns an error for a call that must not proceed: the store is
// closed, or ctx has ended.
func (s *Store) check(ctx context.Context, op string) error {
	if s.isClosed() {
		return fmt.Errorf("pgstore: %s: %w", op, jobstore.ErrClosed)
	}
	return ctx.Err()
}

// fail wraps a database error of op: ErrClosed if the store was closed
// meanwhile, ctx's error as it is, others with the op.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	switch {
	case s.isClosed():
		return fmt.Errorf("pgstore: %s: %w", op, jobstore.ErrClosed)
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return ctx.Err()
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// checkIsolation refuses connections whose transactions are not read
// committed (PostgreSQL's default) unless told otherwise: a claim reads
// the jobs in claim order and skips those another claim holds, which in
// repeatable read fails with a serialization error whenever two claims
// meet, and a claim of a limited queue counts its running jobs in a
// statement that must see the claims committed since its transaction
// began.
func (s *Store) checkIsolation(ctx context.Context) error {
	var level string
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('default_transaction_isolation')`).Scan(&level); err != nil {
		return err
	}
	if level != "read committed" {
		return fmt.Errorf("%w: the connection's default_transaction_isolation is %q, and the store needs read committed, "+
			"PostgreSQL's default: set it back for the store's role (ALTER ROLE ... SET default_transaction_isolation "+
			"= 'read committed') or its connections (options=-c default_transaction_isolation=read%%20committed in the URL)",
			jobstore.ErrInvalidInput, level)
	}
	return nil
}

// connConfig returns a copy of the pool's connection settings, for the
// store's own connections.
func (s *Store) connConfig() *pgx.ConnConfig {
	return s.pool.Config().ConnConfig.Copy()
}

// maintain runs until the store closes: it recovers the jobs of dead
// lease sessions, retries failed releases, and reads which queues are
// limited (see acceptedLimited), every RecoverInterval, and
// compacts the count deltas (vacuuming their table after a large
// compaction) every second or RecoverInterval, whichever is longer. It
// sweeps the waiting jobs (sweepWaiting) at once and every minute.
func (s *Store) maintain(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.RecoverInterval)
	defer t.Stop()
	compacted := time.Now()
	var swept time.Time
	for {
		if err := s.recoverDead(ctx); err != nil && ctx.Err() == nil {
			s.opts.Logger.Warn("pgstore: recovery of dead workers' jobs failed; will retry", "err", err)
		}
		if time.Since(swept) >= sweepEvery {
			swept = time.Now()
			if err := s.sweepWaiting(ctx); err != nil && ctx.Err() == nil {
				s.opts.Logger.Warn("pgstore: the sweep of waiting jobs failed; will retry", "err", err)
				swept = time.Time{} // again at the next pass
			}
		}
		s.retryReleases(ctx)
		if err := s.refreshLimited(ctx); err != nil && ctx.Err() == nil {
			s.opts.Logger.Warn("pgstore: reading the queues' limits failed; will retry", "err", err)
		}
		if time.Since(compacted) >= compactEvery {
			compacted = time.Now()
			if err := s.compactAndVacuum(ctx); err != nil && ctx.Err() == nil {
				s.opts.Logger.Warn("pgstore: compaction of the job counts failed; Stats reads more rows until the next one succeeds", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
