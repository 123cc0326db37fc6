package torture

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jobdir/jobdir/jobstore"
)

// Operation kinds in a history.
const (
	linSubmit   = "submit"
	linGet      = "get"
	linClaim    = "claim"
	linComplete = "complete"
	linCancel   = "cancel"
	linRetry    = "retry"
)

// Error classes a linOp can end with. Any other error stops the recording.
const (
	errClassNotFound   = "notfound"
	errClassNotHeld    = "notheld"
	errClassTransition = "transition"
	errClassNoJob      = "nojob"
)

// linOp is one operation of a history: what a client asked, what the store
// answered, and when the call began and returned on CLOCK_MONOTONIC.
type linOp struct {
	// Client identifies the caller; the calls of one client never overlap.
	Client int `json:"client"`
	// Kind is one of the lin* constants.
	Kind string `json:"kind"`

	// Key is the idempotency key a submit sent ("" for none).
	Key string `json:"key,omitempty"`
	// MaxAttempts is the MaxAttempts a submit sent.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// ID is the job a get, complete, cancel or retry named.
	ID string `json:"id,omitempty"`
	// Attempt is the lease attempt a complete sent.
	Attempt int `json:"attempt,omitempty"`
	// Outcome is what a complete reported: "ok", "fail" or "permanent".
	Outcome string `json:"outcome,omitempty"`

	// Err is the error class of the answer, or "" for success.
	Err string `json:"err,omitempty"`
	// Created is what a submit answered.
	Created bool `json:"created,omitempty"`
	// Job is the answered job's ID, State, Attempt and CancelRequested.
	JobID           string         `json:"job_id,omitempty"`
	State           jobstore.State `json:"state,omitempty"`
	JobAttempt      int            `json:"job_attempt,omitempty"`
	CancelRequested bool           `json:"cancel_requested,omitempty"`

	// Call and Return are CLOCK_MONOTONIC nanoseconds.
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
}

// LinConfig describes the random operations of one process in a
// linearizability run. Zero fields take the defaults given.
type LinConfig struct {
	// Clients is the number of concurrent clients (goroutines). Zero means 2.
	Clients int `json:"clients,omitempty"`
	// Ops is the number of operations per client. Zero means 150.
	Ops int `json:"ops,omitempty"`
	// Keys is the size of the shared key space. Zero means 6.
	Keys int `json:"keys,omitempty"`
	// Seed seeds the choices; client c uses Seed+c.
	Seed int64 `json:"seed,omitempty"`
}

func (c LinConfig) withDefaults() LinConfig {
	setDefault(&c.Clients, 2)
	setDefault(&c.Ops, 150)
	setDefault(&c.Keys, 6)
	return c
}

// recordHistory runs cfg.Clients clients, numbered from firstClient, each
// doing cfg.Ops random operations on st and then completing the attempts it
// still holds, and writes each completed operation to w as one JSON line. It returns the first unexpected store
// error, or ctx.Err().
func recordHistory(ctx context.Context, st jobstore.Store, cfg LinConfig, firstClient int, w io.Writer) error {
	cfg = cfg.withDefaults()
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	emit := func(op linOp) error {
		mu.Lock()
		defer mu.Unlock()
		return enc.Encode(op)
	}
	errs := make([]error, cfg.Clients)
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		wg.Go(func() {
			c := &linClient{st: st, id: firstClient + i, keys: cfg.Keys,
				rng: rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(firstClient+i)))}
			// Then complete what the client still holds: a process that
			// exits holding a lease is a dead worker to the store, and
			// its job's recovery is not an operation of this model.
			for n := 0; n < cfg.Ops || len(c.held) > 0; n++ {
				op, err := c.step(ctx, n >= cfg.Ops)
				if err != nil {
					errs[i] = fmt.Errorf("client %d: %w", c.id, err)
					return
				}
				if err := emit(op); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

type linClient struct {
	st    jobstore.Store
	id    int
	keys  int
	rng   *rand.Rand
	known []string
	held  []jobstore.Lease
}

func (c *linClient) pickKnown() (string, bool) {
	if len(c.known) == 0 {
		return "", false
	}
	return c.known[c.rng.IntN(len(c.known))], true
}

func (c *linClient) learn(id string) {
	for _, k := range c.known {
		if k == id {
			return
		}
	}
	c.known = append(c.known, id)
}

// step performs one random operation, or completes a held lease if
// finishing.
func (c *linClient) step(ctx context.Context, finishing bool) (linOp, error) {
	op := linOp{Client: c.id}
	var (
		j   jobstore.Job
		err error
	)
	p := c.rng.IntN(100)
	if finishing {
		p = 50
	}
	id, haveID := c.pickKnown()
	switch {
	case p < 20 || !haveID:
		op.Kind = linSubmit
		op.MaxAttempts = 2
		if c.rng.IntN(10) < 7 {
			op.Key = fmt.Sprintf("k%d", c.rng.IntN(c.keys))
		}
		op.Call = monoNow()
		j, op.Created, err = c.st.Submit(ctx, jobstore.Spec{Kind: "lin", Key: op.Key, MaxAttempts: op.MaxAttempts})
	case p < 45:
		op.Kind = linClaim
		op.Call = monoNow()
		j, err = c.st.Claim(ctx, jobstore.ClaimRequest{Worker: fmt.Sprintf("lin-%d", c.id)})
		if err == nil {
			c.held = append(c.held, j.Lease())
		}
	case p < 65 && len(c.held) > 0:
		op.Kind = linComplete
		i := c.rng.IntN(len(c.held))
		l := c.held[i]
		c.held = append(c.held[:i], c.held[i+1:]...)
		op.ID, op.Attempt = l.ID, l.Attempt
		var o jobstore.Outcome
		switch q := c.rng.IntN(20); {
		case q < 10:
			op.Outcome, o = "ok", jobstore.Succeeded(nil)
		case q < 17:
			op.Outcome, o = "fail", jobstore.Outcome{Error: "planned", RetryAfter: time.Millisecond}
		default:
			op.Outcome, o = "permanent", jobstore.Outcome{Error: "planned", Permanent: true}
		}
		op.Call = monoNow()
		j, err = c.st.Complete(ctx, l, o)
	case p < 78:
		op.Kind, op.ID = linGet, id
		op.Call = monoNow()
		j, err = c.st.Get(ctx, id)
	case p < 90:
		op.Kind, op.ID = linCancel, id
		op.Call = monoNow()
		j, err = c.st.Cancel(ctx, id)
	default:
		op.Kind, op.ID = linRetry, id
		op.Call = monoNow()
		j, err = c.st.Retry(ctx, id)
	}
	op.Return = monoNow()
	switch {
	case err == nil:
		op.JobID, op.State, op.JobAttempt, op.CancelRequested = j.ID, j.State, j.Attempt, j.CancelRequested
		c.learn(j.ID)
	case errors.Is(err, jobstore.ErrNotFound):
		op.Err = errClassNotFound
	case errors.Is(err, jobstore.ErrNotHeld):
		op.Err = errClassNotHeld
	case errors.Is(err, jobstore.ErrInvalidTransition):
		op.Err = errClassTransition
	case errors.Is(err, jobstore.ErrNoJob):
		op.Err = errClassNoJob
	default:
		return op, fmt.Errorf("%s: %w", op.Kind, err)
	}
	return op, nil
}

// readHistory reads the JSON lines recordHistory wrote.
func readHistory(r io.Reader) ([]linOp, error) {
	var ops []linOp
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var op linOp
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return nil, fmt.Errorf("history line %d: %w", len(ops)+1, err)
		}
		ops = append(ops, op)
	}
	return ops, sc.Err()
}

// checkHistory checks ops against linModel with porcupine, giving up after
// timeout (zero means none), and returns porcupine's verdict. When the
// history is not linearizable and vizPath is set, it writes porcupine's
// HTML visualization there.
func checkHistory(ops []linOp, timeout time.Duration, vizPath string) (porcupine.CheckResult, error) {
	res, info := porcupine.CheckOperationsVerbose(linModel(), toOperations(ops), timeout)
	if res == porcupine.Illegal && vizPath != "" {
		if err := porcupine.VisualizePath(linModel(), info, vizPath); err != nil {
			return res, err
		}
	}
	return res, nil
}

// linState is the model's state of one partition: one job (or none yet).
type linState struct {
	ID              string
	State           jobstore.State
	Attempt         int
	MaxAttempts     int
	CancelRequested bool
}

// linModel returns the sequential specification of the job state machine that
// checkHistory checks histories against. It partitions a history by job
// (keyed submits by key), drops claims that found no job (they change
// nothing), and models each job as one record: submit creates it queued (or
// finds it by key), claim moves it to running with the next attempt,
// complete applies the outcome only for the lease of the current attempt,
// cancel and retry follow storekit.ApplyCancel and ApplyRetry, get observes.
func linModel() porcupine.Model {
	return porcupine.Model{
		Partition: partition,
		Init:      func() any { return linState{} },
		Step: func(state, input, _ any) (bool, any) {
			return step(state.(linState), input.(linOp))
		},
		DescribeOperation: func(input, _ any) string {
			op := input.(linOp)
			in := op.ID
			switch op.Kind {
			case linSubmit:
				in = op.Key
			case linComplete:
				in = fmt.Sprintf("%s#%d %s", op.ID, op.Attempt, op.Outcome)
			}
			if op.Err != "" {
				return fmt.Sprintf("%s(%s) -> %s", op.Kind, in, op.Err)
			}
			return fmt.Sprintf("%s(%s) -> %s %s#%d cancel=%t created=%t", op.Kind, in,
				op.JobID, op.State, op.JobAttempt, op.CancelRequested, op.Created)
		},
		DescribeState: func(state any) string {
			s := state.(linState)
			if s.ID == "" {
				return "none"
			}
			return fmt.Sprintf("%s %s#%d/%d cancel=%t", s.ID, s.State, s.Attempt, s.MaxAttempts, s.CancelRequested)
		},
	}
}

func partition(history []porcupine.Operation) [][]porcupine.Operation {
	keyOf := map[string]string{}
	for _, o := range history {
		if op := o.Input.(linOp); op.Kind == linSubmit && op.Key != "" && op.JobID != "" {
			keyOf[op.JobID] = "key " + op.Key
		}
	}
	group := func(id string) string {
		if k, ok := keyOf[id]; ok {
			return k
		}
		return "id " + id
	}
	parts := map[string][]porcupine.Operation{}
	var order []string
	for _, o := range history {
		op := o.Input.(linOp)
		var p string
		switch {
		case op.Kind == linSubmit && op.Key != "":
			p = "key " + op.Key
		case op.Kind == linSubmit || op.Kind == linClaim:
			if op.JobID == "" {
				continue // a claim that found nothing changes nothing
			}
			p = group(op.JobID)
		default:
			p = group(op.ID)
		}
		if _, ok := parts[p]; !ok {
			order = append(order, p)
		}
		parts[p] = append(parts[p], o)
	}
	out := make([][]porcupine.Operation, 0, len(order))
	for _, p := range order {
		out = append(out, parts[p])
	}
	return out
}

// step is the sequential model of one job.
func step(s linState, op linOp) (bool, linState) {
	answered := func(n linState) bool {
		return op.Err == "" && op.JobID == n.ID && op.State == n.State &&
			op.JobAttempt == n.Attempt && op.CancelRequested == n.CancelRequested
	}
	n := s
	switch op.Kind {
	case linSubmit:
		if s.ID == "" {
			n = linState{ID: op.JobID, State: jobstore.StateQueued, MaxAttempts: op.MaxAttempts}
			return op.Created && answered(n), n
		}
		return !op.Created && answered(s), s
	case linGet:
		if s.ID == "" {
			return op.Err == errClassNotFound, s
		}
		return answered(s), s
	case linClaim:
		if s.ID == "" || s.State != jobstore.StateQueued {
			return false, s
		}
		n.State, n.CancelRequested = jobstore.StateRunning, false
		n.Attempt++
		return answered(n), n
	case linComplete:
		if s.ID == "" || s.State != jobstore.StateRunning || s.Attempt != op.Attempt {
			return op.Err == errClassNotHeld, s
		}
		switch {
		case op.Outcome == "ok":
			n.State = jobstore.StateSucceeded
		case s.CancelRequested:
			n.State = jobstore.StateCanceled
		case op.Outcome == "permanent" || s.Attempt >= s.MaxAttempts:
			n.State = jobstore.StateFailed
		default:
			n.State = jobstore.StateQueued
		}
		return answered(n), n
	case linCancel:
		switch s.State {
		case jobstore.StateQueued:
			n.State = jobstore.StateCanceled
		case jobstore.StateRunning:
			n.CancelRequested = true
		case jobstore.StateCanceled:
		case "":
			return op.Err == errClassNotFound, s
		default:
			return op.Err == errClassTransition, s
		}
		return answered(n), n
	case linRetry:
		switch s.State {
		case jobstore.StateFailed, jobstore.StateCanceled:
			n.State, n.CancelRequested = jobstore.StateQueued, false
			if n.Attempt >= n.MaxAttempts {
				n.MaxAttempts = n.Attempt + 1
			}
			return answered(n), n
		case "":
			return op.Err == errClassNotFound, s
		}
		return op.Err == errClassTransition, s
	}
	return false, s
}

// LinRunConfig describes a multi-process linearizability run.
type LinRunConfig struct {
	// Dir is the work directory: the store goes in Dir/store and the
	// histories in Dir/history. Required.
	Dir string
	// Backend opens the store. Required.
	Backend Backend
	// Processes is the number of client processes. Zero means 3.
	Processes int
	// Lin describes each process's clients and operations.
	Lin LinConfig
	// Exe and Args start a child, as in Config.
	Exe  string
	Args []string
	// Timeout bounds the porcupine check. Zero means one minute.
	Timeout time.Duration
}

// LinReport is the outcome of RunLinearizability.
type LinReport struct {
	// Ops counts the operations recorded, Partitions the jobs they touched.
	Ops, Partitions int
	// Result is porcupine's verdict: "Ok", "Illegal", or "Unknown" when
	// the check ran out of time.
	Result string
	// Linearizable reports whether the verdict is "Ok".
	Linearizable bool
	// Visualization is the path of porcupine's HTML rendering of a history
	// found not linearizable.
	Visualization string
	// Illegal lists, for a history found not linearizable, the operations
	// of the first few jobs whose own history is not, in call order.
	Illegal []string
}

// RunLinearizability runs cfg.Processes child processes of random
// operations against one store at once, merges their histories and checks
// them with checkHistory.
func RunLinearizability(ctx context.Context, cfg LinRunConfig) (*LinReport, error) {
	if cfg.Dir == "" || cfg.Backend.Open == nil {
		return nil, errors.New("torture: LinRunConfig needs Dir and Backend.Open")
	}
	setDefault(&cfg.Processes, 3)
	setDefault(&cfg.Timeout, time.Minute)
	cfg.Lin = cfg.Lin.withDefaults()
	if cfg.Lin.Seed == 0 {
		cfg.Lin.Seed = time.Now().UnixNano()
	}
	exe := cfg.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	storeDir, histDir := cfg.Dir+"/store", cfg.Dir+"/history"
	for _, d := range []string{storeDir, histDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	// Create the store before the children race to.
	st, err := cfg.Backend.Open(ctx, storeDir)
	if err != nil {
		return nil, fmt.Errorf("torture: open store: %w", err)
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	var procs []*proc
	for i := range cfg.Processes {
		lin := cfg.Lin
		spec := childSpec{Role: roleLin, Index: i, Name: fmt.Sprintf("lin-%d", i), StoreDir: storeDir,
			Lin: &lin, LinOut: fmt.Sprintf("%s/%d.jsonl", histDir, i), LinFrom: i * cfg.Lin.Clients}
		p, err := startChild(exe, cfg.Args, spec, fmt.Sprintf("%s/%d.out", histDir, i))
		if err != nil {
			for _, q := range procs {
				_ = q.cmd.Process.Kill()
			}
			return nil, err
		}
		procs = append(procs, p)
	}
	var errs []error
	for i, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if p.waitErr != nil {
			errs = append(errs, fmt.Errorf("client process %d: %v: %s", i, p.waitErr, tail(fmt.Sprintf("%s/%d.out", histDir, i), 600)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var ops []linOp
	for i := range procs {
		f, err := os.Open(fmt.Sprintf("%s/%d.jsonl", histDir, i))
		if err != nil {
			return nil, err
		}
		h, err := readHistory(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		ops = append(ops, h...)
	}
	rep := &LinReport{Ops: len(ops)}
	rep.Partitions = len(partition(toOperations(ops)))
	viz := cfg.Dir + "/linearizability.html"
	res, err := checkHistory(ops, cfg.Timeout, viz)
	rep.Result, rep.Linearizable = string(res), res == porcupine.Ok
	if res == porcupine.Illegal {
		rep.Visualization = viz
		rep.Illegal = illegalPartitions(ops, 3)
	}
	return rep, err
}

// illegalPartitions returns, for up to limit jobs whose operations in ops
// are not linearizable on their own, a description of those operations in
// call order, with call and return times relative to the first call.
func illegalPartitions(ops []linOp, limit int) []string {
	m := linModel()
	single := m
	single.Partition = nil
	var out []string
	for _, part := range m.Partition(toOperations(ops)) {
		if len(out) == limit {
			break
		}
		if porcupine.CheckOperations(single, part) {
			continue
		}
		sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		var b strings.Builder
		t0 := part[0].Call
		for _, o := range part {
			fmt.Fprintf(&b, "  client %d [%8.3fms %8.3fms] %s\n", o.ClientId,
				float64(o.Call-t0)/1e6, float64(o.Return-t0)/1e6, m.DescribeOperation(o.Input, o.Output))
		}
		out = append(out, b.String())
	}
	return out
}

func toOperations(ops []linOp) []porcupine.Operation {
	h := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		h[i] = porcupine.Operation{ClientId: op.Client, Input: op, Output: op, Call: op.Call, Return: op.Return}
	}
	return h
}

// runLinChild is the body of a linearizability client process.
func runLinChild(ctx context.Context, st jobstore.Store, spec childSpec) error {
	f, err := os.Create(spec.LinOut)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = recordHistory(ctx, st, *spec.Lin, spec.LinFrom, w)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
