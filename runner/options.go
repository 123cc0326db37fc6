package runner

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"
)

// Defaults for the zero fields of Options.
const (
	// DefaultPollInterval is the longest wait in Worker.AwaitWork between
	// claims.
	DefaultPollInterval = time.Second
	// DefaultShutdownGrace is how long running handlers may go on after
	// Run's ctx ends.
	DefaultShutdownGrace = 10 * time.Second
	// DefaultCompleteTimeout bounds the recording of one attempt's outcome.
	DefaultCompleteTimeout = 30 * time.Second
)

// Options configures a Runner. A nil *Options means all defaults.
type Options struct {
	// Concurrency is the most handlers that run at once. Zero or less means
	// runtime.GOMAXPROCS(0) at New.
	Concurrency int
	// Worker is the worker name recorded on claimed jobs and in their
	// leases: 1 to 256 bytes of printable ASCII, unique to this Runner
	// among all that share the store. Empty means DefaultWorkerName().
	Worker string
	// PollInterval bounds how long the runner waits in Worker.AwaitWork
	// before trying Claim again, for stores that cannot signal new work (or
	// miss a signal). Zero means DefaultPollInterval (1s).
	PollInterval time.Duration
	// JobTimeout limits each attempt of a job whose Timeout is zero. Zero
	// means no limit.
	JobTimeout time.Duration
	// ShutdownGrace is how long running handlers may go on after Run's ctx
	// ends before their ctx is canceled with cause ErrShutdown. Zero means
	// DefaultShutdownGrace (10s); a negative value cancels them at once.
	ShutdownGrace time.Duration
	// CompleteTimeout bounds the recording of one attempt's outcome,
	// retries of a failing Complete included; past it the outcome is
	// dropped and the attempt given back (jobstore.Worker.Release, itself
	// bounded by CompleteTimeout). Zero means DefaultCompleteTimeout (30s).
	CompleteTimeout time.Duration
	// Logger receives structured logs. Nil means none.
	Logger *slog.Logger
	// OnEvent, if set, is called for every Event, synchronously from the
	// runner's goroutines and possibly from several at once. It must be
	// safe for concurrent use and must not block: the runner waits for it.
	// Nil means no events.
	OnEvent func(Event)
	// Middleware wraps the handler of every attempt, the first outermost:
	// Middleware[0] is called first and returns last. A panic in a
	// middleware is the attempt's, as one in the handler is (PanicError).
	Middleware []Middleware
	// Metrics, if set, receives the counts and durations of the runner's
	// attempts through MetricsMiddleware, which wraps Middleware, and the
	// store errors the runner retries (ObserveStoreError). An
	// httpapi.Server is one: jobdir serve --work exports its workers'
	// attempts so.
	Metrics Metrics
	// Queues limits the runner to jobs of these queues (see
	// jobstore.ClaimRequest.Queues); empty means every queue. A paused
	// queue's jobs are not claimed either way.
	Queues []string
	// Schedules makes the runner fire the due ticks of the store's
	// schedules while it runs (the store must be a jobstore.Scheduler):
	// each tick's job is submitted with the tick's key, so that however
	// many processes fire a tick, it is one job, and a tick is fired as
	// long as one of them runs. It wakes at each schedule's next tick and
	// reads the schedules at least every second. It also applies the
	// store's retention policy (jobstore.RetentionKeeper), at its start
	// and every minute.
	Schedules bool
	// Version is the version of the program, listed with the worker where
	// the store keeps a list of workers (jobstore.WorkerRegistry). Empty
	// means the main module's version from the build information, if any.
	Version string
}

// DefaultWorkerName returns a new worker name: the host name, the process
// ID and 8 random hex digits, such as "build-7.example-4242-9f86d081". Each
// call returns a different name, so it identifies one Runner in one process
// even if the host reuses the process ID later.
func DefaultWorkerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = sanitizeName(host, 128)
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// sanitizeName keeps the printable ASCII of s (others become '_') and at
// most n bytes, as jobstore.ValidateWorker requires.
func sanitizeName(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	b := []byte(s)
	for i, c := range b {
		if c < 0x21 || c > 0x7e {
			b[i] = '_'
		}
	}
	return string(b)
}

// settings are Options with the defaults filled in.
type settings struct {
	concurrency     int
	worker          string
	pollInterval    time.Duration
	jobTimeout      time.Duration
	shutdownGrace   time.Duration
	completeTimeout time.Duration
	log             *slog.Logger
	onEvent         func(Event)
	middleware      []Middleware
	metrics         Metrics
	schedules       bool
	version         string
	queues          []string
}

func (o *Options) settings() settings {
	if o == nil {
		o = &Options{}
	}
	s := settings{
		concurrency:     o.Concurrency,
		worker:          o.Worker,
		version:         o.Version,
		queues:          slices.Clone(o.Queues),
		pollInterval:    o.PollInterval,
		jobTimeout:      o.JobTimeout,
		shutdownGrace:   o.ShutdownGrace,
		completeTimeout: o.CompleteTimeout,
		log:             o.Logger,
		onEvent:         o.OnEvent,
		middleware:      slices.Clone(o.Middleware),
		metrics:         o.Metrics,
		schedules:       o.Schedules,
	}
	if s.concurrency <= 0 {
		s.concurrency = runtime.GOMAXPROCS(0)
	}
	if s.worker == "" {
		s.worker = DefaultWorkerName()
	}
	if s.pollInterval <= 0 {
		s.pollInterval = DefaultPollInterval
	}
	if s.jobTimeout < 0 {
		s.jobTimeout = 0
	}
	if s.shutdownGrace == 0 {
		s.shutdownGrace = DefaultShutdownGrace
	}
	if s.completeTimeout <= 0 {
		s.completeTimeout = DefaultCompleteTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}
