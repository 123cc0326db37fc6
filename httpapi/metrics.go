package httpapi

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jobdir/jobdir/jobstore"
)

// statsTimeout bounds the store.Stats call of a scrape.
const statsTimeout = 10 * time.Second

// metrics holds the collectors of one Server. Counters and histograms count
// what this process sees; storeCollector reads the store at scrape time.
type metrics struct {
	submitted    *prometheus.CounterVec
	claimed      *prometheus.CounterVec
	completed    *prometheus.CounterVec
	failed       *prometheus.CounterVec
	canceled     *prometheus.CounterVec
	retried      *prometheus.CounterVec
	dropped      *prometheus.CounterVec
	panics       *prometheus.CounterVec
	storeErrors  prometheus.Counter
	claimLatency *prometheus.HistogramVec
	runDuration  *prometheus.HistogramVec
	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	httpInFlight *prometheus.GaugeVec
	// The schedules' ticks this process fired (see ObserveTick).
	ticks        *prometheus.CounterVec
	ticksSkipped *prometheus.CounterVec
	tickLag      *prometheus.GaugeVec

	// kinds bounds the kind label: clients choose kinds, and each distinct
	// label value is a series kept forever.
	mu    sync.Mutex
	kinds map[string]bool
	// queues bounds the queue label in the same way, and schedules the
	// schedule label.
	queues    map[string]bool
	schedules map[string]bool
}

// maxKindLabels is how many distinct kinds get a label value of their own;
// later ones are counted under otherKinds.
const maxKindLabels = 100

// otherKinds is the kind label of kinds past maxKindLabels.
const otherKinds = "_other"

// queue returns the label value for queue: queues past maxKindLabels
// share otherKinds.
func (m *metrics) queue(queue string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.queues[queue] {
		return queue
	}
	if len(m.queues) >= maxKindLabels {
		return otherKinds
	}
	m.queues[queue] = true
	return queue
}

// kind returns the label value for kind.
func (m *metrics) kind(kind string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kinds[kind] {
		return kind
	}
	if len(m.kinds) >= maxKindLabels {
		return otherKinds
	}
	m.kinds[kind] = true
	return kind
}

func newDefaultRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

func newMetrics(reg *prometheus.Registry, store jobstore.Client) (*metrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "jobdir", Name: name, Help: help}, labels)
	}
	m := &metrics{
		kinds:     make(map[string]bool),
		queues:    make(map[string]bool),
		schedules: make(map[string]bool),
		submitted: counter("jobs_submitted_total", "Jobs created through this process's HTTP API.", "kind"),
		claimed:   counter("jobs_claimed_total", "Attempts claimed by this process's runner.", "kind"),
		completed: counter("jobs_completed_total", "Jobs this process's runner completed successfully.", "kind"),
		failed:    counter("jobs_failed_total", "Jobs that failed for good (no attempts left, or a permanent error) in this process's runner.", "kind"),
		canceled: counter("jobs_canceled_total",
			`Cancels: via="http" counts accepted cancel requests, via="runner" counts attempts that ended canceled.`, "kind", "via"),
		retried: counter("jobs_retried_total", "Failed attempts queued again for a retry by this process's runner.", "kind"),
		dropped: counter("attempts_dropped_total", "Attempts whose outcome could not be recorded (lease lost or store failing).", "kind"),
		panics:  counter("handler_panics_total", "Handler panics recovered by this process's runner.", "kind"),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "jobdir", Name: "runner_store_errors_total",
			Help: "Store calls that failed in this process's runner and were retried."}),
		claimLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "jobdir", Name: "claim_latency_seconds",
			Help:    "How long a job was due before this process's runner claimed it (queue wait).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12), // 1 ms to about 70 min
		}, []string{"kind"}),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "jobdir", Name: "run_duration_seconds",
			Help:    "How long one attempt's handler ran, by the state the job was left in (succeeded, queued, failed, canceled).",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 12), // 5 ms to about 6 h
		}, []string{"kind", "state"}),
		httpRequests: counter("http_requests_total", "HTTP requests by route pattern and status code.", "route", "code"),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "jobdir", Name: "http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern (the wait route includes its long-poll).",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		httpInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "jobdir", Name: "http_requests_in_flight",
			Help: "HTTP requests being served, by route pattern (waits included).",
		}, []string{"route"}),
		ticks: counter("schedule_ticks_total", "Ticks of each schedule whose job this process made (of the processes that fire a tick, the one whose submit created its job).", "schedule"),
		ticksSkipped: counter("schedule_ticks_skipped_total",
			"Ticks of each schedule that this process dropped by the schedule's catch-up or overlap policy.", "schedule"),
		tickLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "jobdir", Name: "schedule_tick_lag_seconds",
			Help: "How long after its tick this process made the job of each schedule's latest tick it fired.",
		}, []string{"schedule"}),
	}
	for _, c := range []prometheus.Collector{
		m.submitted, m.claimed, m.completed, m.failed, m.canceled, m.retried, m.dropped, m.panics,
		m.storeErrors, m.claimLatency, m.runDuration, m.httpRequests, m.httpDuration, m.httpInFlight,
		m.ticks, m.ticksSkipped, m.tickLag,
		&storeCollector{store: store, m: m},
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observeHTTP(route string, status int, d time.Duration) {
	m.httpRequests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.httpDuration.WithLabelValues(route).Observe(d.Seconds())
}

// Instrument wraps h, a handler served beside the API (jobdir serve's
// dashboard), so that its requests are counted in
// jobdir_http_requests_total and jobdir_http_request_duration_seconds as
// the API's are. The route label is the pattern that served the request,
// as the innermost http.ServeMux in h left it in the request (a bounded
// set, as the API's), or "unmatched". Its requests are not in
// jobdir_http_requests_in_flight, whose route is not known until h has
// routed them.
func (s *Server) Instrument(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			route := r.Pattern
			if route == "" {
				route = routeNone
			}
			s.metrics.observeHTTP(route, rec.code(), time.Since(start))
		}()
		h.ServeHTTP(rec, r)
	})
}

// MetricsHandler returns the handler of GET /metrics on its own, without
// the API's authentication: for a process that serves only its metrics
// (jobdir work --metrics-addr), where the network keeps strangers out.
func (s *Server) MetricsHandler() http.Handler { return s.metricsHandler() }

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{
		// A failing collector (the store not answering) must not hide the
		// other series: storeCollector reports it as jobdir_store_up 0.
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      s.registry,
	})
}

// kindLabel returns the kind label of an attempt of kind: none for a
// runner event without a job.
func (m *metrics) kindLabel(kind string) string {
	if kind == "" {
		return ""
	}
	return m.kind(kind)
}

// KnownKinds makes every per-kind counter and histogram of kinds present
// from now, at 0, rather than from the first event of each: a rate over a
// series that appears with its first event misses that event, and an alert
// on a counter that is absent never fires. New calls it with the kinds of
// Options.AllowedKinds; a program that runs a runner in the same process
// calls it with the runner's kinds (runner.Runner.Kinds). The kinds count
// against the bound on kind labels.
func (s *Server) KnownKinds(kinds ...string) {
	m := s.metrics
	for _, k := range kinds {
		if jobstore.ValidateKind(k) != nil {
			continue
		}
		k = m.kind(k)
		for _, c := range []*prometheus.CounterVec{m.submitted, m.claimed, m.completed, m.failed, m.retried, m.dropped, m.panics} {
			c.WithLabelValues(k)
		}
		m.canceled.WithLabelValues(k, "http")
		m.canceled.WithLabelValues(k, "runner")
		m.claimLatency.WithLabelValues(k)
	}
}

// The runner metrics: a Server is a runner.Metrics, so that the server as
// runner.Options.Metrics of the runners in the same process feeds its
// claim and run metrics. Each method is safe for
// concurrent use and does not block.

// schedule returns the label of the schedule name, bounded as kinds are.
func (m *metrics) schedule(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.schedules[name] {
		return name
	}
	if len(m.schedules) >= maxKindLabels {
		return otherKinds
	}
	m.schedules[name] = true
	return name
}

// ObserveTick counts a tick of the schedule whose job this process made,
// lag after the tick (jobdir_schedule_ticks_total,
// jobdir_schedule_tick_lag_seconds). It implements runner.ScheduleMetrics.
func (s *Server) ObserveTick(schedule string, lag time.Duration) {
	l := s.metrics.schedule(schedule)
	s.metrics.ticks.WithLabelValues(l).Inc()
	s.metrics.tickLag.WithLabelValues(l).Set(lag.Seconds())
}

// ObserveTicksSkipped counts n ticks of the schedule dropped by its
// policies (jobdir_schedule_ticks_skipped_total). It implements
// runner.ScheduleMetrics.
func (s *Server) ObserveTicksSkipped(schedule string, n int) {
	s.metrics.ticksSkipped.WithLabelValues(s.metrics.schedule(schedule)).Add(float64(n))
}

// ObserveClaim counts an attempt of kind claimed and records how long its
// job was due before (jobdir_jobs_claimed_total,
// jobdir_claim_latency_seconds).
func (s *Server) ObserveClaim(kind string, queueWait time.Duration) {
	kind = s.metrics.kindLabel(kind)
	s.metrics.claimed.WithLabelValues(kind).Inc()
	s.metrics.claimLatency.WithLabelValues(kind).Observe(queueWait.Seconds())
}

// ObserveFinish records how long an attempt of kind ran, by the state its
// outcome left the job in, and counts the job as completed, failed,
// canceled or retried accordingly (jobdir_run_duration_seconds and the
// job counters).
func (s *Server) ObserveFinish(kind string, state jobstore.State, runDuration time.Duration) {
	m := s.metrics
	kind = m.kindLabel(kind)
	m.runDuration.WithLabelValues(kind, string(state)).Observe(runDuration.Seconds())
	switch state {
	case jobstore.StateSucceeded:
		m.completed.WithLabelValues(kind).Inc()
	case jobstore.StateFailed:
		m.failed.WithLabelValues(kind).Inc()
	case jobstore.StateCanceled:
		m.canceled.WithLabelValues(kind, "runner").Inc()
	case jobstore.StateQueued:
		m.retried.WithLabelValues(kind).Inc()
	}
}

// ObserveDrop counts an attempt of kind whose outcome could not be
// recorded (jobdir_attempts_dropped_total).
func (s *Server) ObserveDrop(kind string) {
	s.metrics.dropped.WithLabelValues(s.metrics.kindLabel(kind)).Inc()
}

// ObservePanic counts a handler of kind that panicked
// (jobdir_handler_panics_total).
func (s *Server) ObservePanic(kind string) {
	s.metrics.panics.WithLabelValues(s.metrics.kindLabel(kind)).Inc()
}

// ObserveStoreError counts a store call a runner retried
// (jobdir_runner_store_errors_total).
func (s *Server) ObserveStoreError() {
	s.metrics.storeErrors.Inc()
}

// storeCollector reports the store's job counts at scrape time.
type storeCollector struct {
	store jobstore.Client
	// m bounds the kind label of jobsByKindDesc, as the counters'.
	m *metrics
}

var (
	jobsDesc       = prometheus.NewDesc("jobdir_jobs", "Jobs in the store by state, read at scrape time.", []string{"state"}, nil)
	jobsByKindDesc = prometheus.NewDesc("jobdir_jobs_by_kind",
		"Jobs in the store by kind and state, read at scrape time; kinds past the bound on kind labels are summed under _other.",
		[]string{"kind", "state"}, nil)
	oldestDesc = prometheus.NewDesc("jobdir_oldest_queued_age_seconds",
		"How long the longest-waiting due queued job has been due; 0 when none is due.", nil, nil)
	oldestByKindDesc = prometheus.NewDesc("jobdir_oldest_queued_age_by_kind_seconds",
		"How long the longest-waiting due queued job of each kind that has one has been due; kinds past the bound on kind labels are summed under _other as their longest wait.",
		[]string{"kind"}, nil)
	upDesc = prometheus.NewDesc("jobdir_store_up", "1 if the store answered the scrape's Stats call, 0 if not.", nil, nil)
	// Only for a store that keeps a list of workers.
	workersDesc = prometheus.NewDesc("jobdir_workers",
		"Live workers serving the store, in every process on it, read at scrape time.", nil, nil)
	// Only for a store that keeps queue settings.
	queueJobsDesc = prometheus.NewDesc("jobdir_queue_jobs",
		"Queued and running jobs of each queue that has jobs or settings, read at scrape time; queues past the bound on queue labels are summed under _other.",
		[]string{"queue", "state"}, nil)
	queuePausedDesc = prometheus.NewDesc("jobdir_queue_paused",
		"1 for a paused queue (no worker starts its jobs), 0 for one that runs, read at scrape time; _other is 1 if any queue past the bound is paused.",
		[]string{"queue"}, nil)
	queueLimitDesc = prometheus.NewDesc("jobdir_queue_limit",
		"The most jobs of each queue that run at once in every process together, 0 for none, read at scrape time; _other has the largest limit past the bound.",
		[]string{"queue"}, nil)
	queuePartitionLimitDesc = prometheus.NewDesc("jobdir_queue_partition_limit",
		"The most jobs of each partition of each queue that run at once in every process together, 0 for none, read at scrape time; _other has the largest past the bound.",
		[]string{"queue"}, nil)
	queueRateDesc = prometheus.NewDesc("jobdir_queue_rate_limit_per_second",
		"The most starts a second of each queue's rate limit (its N over its window), 0 for none, read at scrape time; _other has the largest past the bound.",
		[]string{"queue"}, nil)
	queueOldestDesc = prometheus.NewDesc("jobdir_queue_oldest_due_age_seconds",
		"How long the longest-waiting due job of each queue has been due; 0 when none is due.",
		[]string{"queue"}, nil)
	unservedDesc = prometheus.NewDesc("jobdir_unserved_jobs",
		"Queued jobs of each kind that no live worker runs, read at scrape time (no series for a kind a worker runs); alert when their sum is above 0. Kinds past the bound on kind labels are summed under _other.",
		[]string{"kind"}, nil)
)

// Describe sends the descriptors of the store series.
func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- jobsByKindDesc
	ch <- oldestDesc
	ch <- oldestByKindDesc
	ch <- upDesc
	ch <- workersDesc
	ch <- unservedDesc
	ch <- queueJobsDesc
	ch <- queuePausedDesc
	ch <- queueLimitDesc
	ch <- queuePartitionLimitDesc
	ch <- queueRateDesc
	ch <- queueOldestDesc
}

// Collect reads the store's Stats and sends the store series.
func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	st, err := c.store.Stats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 0)
		ch <- prometheus.NewInvalidMetric(jobsDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 1)
	for _, state := range jobstore.States() {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(st.Counts[state]), string(state))
	}
	// Every state of each kind that has jobs, 0 included, so that a
	// kind's series do not come and go with its states.
	// In name order, so that which kinds get a label of their own does
	// not depend on a map's order.
	byKind := make(map[string]map[jobstore.State]int, len(st.Kinds))
	for _, kind := range slices.Sorted(maps.Keys(st.Kinds)) {
		counts := st.Kinds[kind]
		label := c.m.kind(kind)
		if byKind[label] == nil {
			byKind[label] = make(map[jobstore.State]int)
		}
		for state, n := range counts {
			byKind[label][state] += n
		}
	}
	for kind, counts := range byKind {
		for _, state := range jobstore.States() {
			ch <- prometheus.MustNewConstMetric(jobsByKindDesc, prometheus.GaugeValue, float64(counts[state]), kind, string(state))
		}
	}
	age := 0.0
	if !st.OldestQueuedAt.IsZero() {
		age = max(time.Since(st.OldestQueuedAt).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age)
	ages := make(map[string]float64, len(st.OldestQueuedByKind))
	for _, kind := range slices.Sorted(maps.Keys(st.OldestQueuedByKind)) {
		label := c.m.kind(kind)
		ages[label] = max(ages[label], time.Since(st.OldestQueuedByKind[kind]).Seconds(), 0)
	}
	for kind, age := range ages {
		ch <- prometheus.MustNewConstMetric(oldestByKindDesc, prometheus.GaugeValue, age, kind)
	}
	c.collectQueues(ctx, ch)
	if reg, ok := c.store.(jobstore.WorkerRegistry); ok {
		ws, err := reg.Workers(ctx)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(workersDesc, err)
			return
		}
		ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(len(ws)))
		unserved := map[string]int{}
		for _, kind := range jobstore.UnservedKinds(st, ws) {
			unserved[c.m.kind(kind)] += st.Kinds[kind][jobstore.StateQueued]
		}
		for kind, n := range unserved {
			ch <- prometheus.MustNewConstMetric(unservedDesc, prometheus.GaugeValue, float64(n), kind)
		}
	}
}

// collectQueues sends the series of each queue, for a store that keeps
// queue settings.
func (c *storeCollector) collectQueues(ctx context.Context, ch chan<- prometheus.Metric) {
	qc, ok := c.store.(jobstore.QueueController)
	if !ok {
		return
	}
	qs, err := qc.Queues(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(queueJobsDesc, err)
		return
	}
	type sums struct {
		queued, running int
		limit, per      int
		rate            float64
		paused          bool
		age             float64
	}
	by := make(map[string]*sums, len(qs))
	for _, q := range qs { // sorted by name: which queues get a label does not depend on a map's order
		label := c.m.queue(q.Queue)
		if by[label] == nil {
			by[label] = &sums{}
		}
		b := by[label]
		b.queued += q.Queued
		b.running += q.Running
		b.paused = b.paused || q.Paused
		b.limit = max(b.limit, q.Limit)
		b.per = max(b.per, q.PerPartition)
		if !q.Rate.IsZero() {
			b.rate = max(b.rate, float64(q.Rate.N)/q.Rate.Per.Seconds())
		}
		if !q.OldestDueAt.IsZero() {
			b.age = max(b.age, time.Since(q.OldestDueAt).Seconds(), 0)
		}
	}
	for queue, b := range by {
		ch <- prometheus.MustNewConstMetric(queueJobsDesc, prometheus.GaugeValue, float64(b.queued), queue, string(jobstore.StateQueued))
		ch <- prometheus.MustNewConstMetric(queueJobsDesc, prometheus.GaugeValue, float64(b.running), queue, string(jobstore.StateRunning))
		paused := 0.0
		if b.paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(queuePausedDesc, prometheus.GaugeValue, paused, queue)
		ch <- prometheus.MustNewConstMetric(queueLimitDesc, prometheus.GaugeValue, float64(b.limit), queue)
		ch <- prometheus.MustNewConstMetric(queuePartitionLimitDesc, prometheus.GaugeValue, float64(b.per), queue)
		ch <- prometheus.MustNewConstMetric(queueRateDesc, prometheus.GaugeValue, b.rate, queue)
		ch <- prometheus.MustNewConstMetric(queueOldestDesc, prometheus.GaugeValue, b.age, queue)
	}
}
