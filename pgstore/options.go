package pgstore

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Defaults for the zero fields of Options.
const (
	// DefaultSchema is the PostgreSQL schema a store lives in.
	DefaultSchema = "jobdir"
	// DefaultLeaseTTL is how long a worker's lease session lives without a
	// renewal, on the database's clock.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultLeaseGrace is how long after a lease connection is found
	// closed its jobs are queued again.
	DefaultLeaseGrace = 500 * time.Millisecond
	// DefaultRecoverInterval is how often a store looks for dead sessions.
	DefaultRecoverInterval = 250 * time.Millisecond
	// DefaultPollInterval is how often blocked calls re-read the database
	// while the listener connection is down.
	DefaultPollInterval = time.Second
)

// Options configures a Store. A nil *Options means the zero value, and every
// field's zero value selects the documented default.
type Options struct {
	// Schema is the PostgreSQL schema that holds the store's tables,
	// created by Open if missing: 1 to 48 lower-case letters, digits and
	// underscores, not starting with a digit. Stores in different schemas
	// of one database are independent. Empty means DefaultSchema.
	Schema string
	// MustExist makes Open refuse a schema that does not exist
	// (ErrNoSchema) or that an older version wrote (ErrSchemaTooOld)
	// instead of
	// creating or upgrading it: for a store opened only to be read from,
	// such as the source of a copy. False (the default) creates and
	// upgrades.
	MustExist bool
	// MaxPayload limits the size in bytes of a job's payload and of a
	// successful attempt's result. Zero means jobstore.DefaultMaxPayload.
	MaxPayload int
	// Backoff sets the delay before a failed attempt is retried when its
	// Outcome gives no RetryAfter. Nil means jobstore.Backoff.
	Backoff jobstore.BackoffFunc
	// LeaseTTL bounds how long the jobs of a worker that is cut off from
	// the database without its connection closing (a lost node, a hung
	// process) stay running: its lease session expires LeaseTTL after its
	// last renewal, on the database's clock, and its jobs are queued
	// again. A worker renews every LeaseTTL/4 and, if it has not renewed
	// for 3/4 of LeaseTTL, gives its jobs up first (WatchCancel returns
	// ErrNotHeld). Zero means DefaultLeaseTTL (30s); the least is 1s.
	LeaseTTL time.Duration
	// LeaseGrace is how long a dead lease session's jobs wait before they
	// are queued again, measured from when a store first finds the
	// session's connection gone. A live worker whose connection was cut
	// (a restart of the server, pg_terminate_backend) sees it at once and
	// cancels its handlers; the grace lets them stop before the job runs
	// elsewhere. Zero means DefaultLeaseGrace (500ms); negative means none.
	LeaseGrace time.Duration
	// RecoverInterval is how often the store looks for the sessions of
	// dead workers. Zero means DefaultRecoverInterval (250ms).
	RecoverInterval time.Duration
	// PollInterval is how often AwaitWork, Wait and WatchCancel look at
	// the database while the listener connection is down (they are woken
	// by LISTEN/NOTIFY otherwise). Zero means DefaultPollInterval (1s).
	PollInterval time.Duration
	// Logger receives the store's warnings (a listener or lease
	// connection lost, jobs recovered). Nil means none.
	Logger *slog.Logger
}

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// withDefaults returns opts (nil means zero) with its defaults filled in, or
// an error wrapping jobstore.ErrInvalidInput.
func (opts *Options) withDefaults() (Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if !schemaRE.MatchString(o.Schema) {
		return o, fmt.Errorf("%w: schema name %q: use 1 to 48 lower-case letters, digits and underscores, not starting with a digit",
			jobstore.ErrInvalidInput, o.Schema)
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = jobstore.DefaultMaxPayload
	}
	if o.Backoff == nil {
		o.Backoff = jobstore.Backoff
	}
	switch {
	case o.LeaseTTL == 0:
		o.LeaseTTL = DefaultLeaseTTL
	case o.LeaseTTL < time.Second:
		return o, fmt.Errorf("%w: lease TTL %s is under the least, 1s", jobstore.ErrInvalidInput, o.LeaseTTL)
	}
	switch {
	case o.LeaseGrace == 0:
		o.LeaseGrace = DefaultLeaseGrace
	case o.LeaseGrace < 0:
		o.LeaseGrace = 0
	}
	if o.RecoverInterval <= 0 {
		o.RecoverInterval = DefaultRecoverInterval
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}
