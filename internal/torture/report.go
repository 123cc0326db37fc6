package torture

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// maxListed is how many violations a Report spells out; the rest are
// counted.
const maxListed = 50

// Report holds the figures of a torture run and every violation found.
type Report struct {
	// Seed reproduces the run's random choices (not its timing).
	Seed int64
	// Workers, Submitters, Cancellers and Waiters are the process counts.
	Workers, Submitters, Cancellers, Waiters int
	// RunnerWorkers is how many workers ran runner.Runner.
	RunnerWorkers int
	// Chaos is how long submitting and chaos lasted; Drain how long the
	// queue then took to empty.
	Chaos, Drain time.Duration

	// Jobs is the number of jobs in the store at the end, and States
	// counts them by state.
	Jobs   int
	States map[jobstore.State]int
	// Submits counts recorded Submit calls; SubmittedIDs the distinct IDs
	// they returned; KeyHits those that found an existing job by key; Keys
	// the distinct keys in the store.
	Submits, SubmittedIDs, KeyHits, Keys int
	// Kills counts SIGKILLs (WorkerKills of them to workers), Restarts the
	// processes started again, Stops the SIGSTOP pauses.
	Kills, WorkerKills, Restarts, Stops int
	// Attempts counts attempts that started (start markers).
	Attempts int
	// Outcomes counts attempts by how they ended: ok, failed, canceled,
	// timeout, or killed (no end marker).
	Outcomes map[string]int
	// Retries counts attempts that followed a failed attempt.
	Retries int
	// Reruns counts attempts that followed an attempt whose worker was
	// killed before it completed.
	Reruns int
	// PausedAttempts counts attempts whose worker was stopped with SIGSTOP
	// while they ran and which finished once it was continued; the checks
	// above hold for them too, so none of their jobs ran elsewhere
	// meanwhile.
	PausedAttempts int
	// LostClaims counts attempt numbers that have no markers: the job was
	// claimed, and the worker died before the handler started.
	LostClaims int
	// CanceledQueued counts Cancel calls that returned a canceled job;
	// CanceledRunning the jobs canceled while running: their last attempt's
	// handler saw the cancel (requested from another process).
	CanceledQueued, CanceledRunning int
	// MaxRecoveryWait is the longest time from the SIGKILL of a worker to
	// the start of the next attempt of the job it was running: detection
	// of the dead worker, the backoff, and the wait for a free worker.
	MaxRecoveryWait time.Duration
	// MedianRecoveryWait and P99RecoveryWait are the median and the 99th
	// percentile of the same wait over all re-runs.
	MedianRecoveryWait, P99RecoveryWait time.Duration
	recoveryWaits                       []time.Duration
	// Cuts counts the chaos events that cut a worker's connections to the
	// store's server (Backend.Cut), and CutConnections the connections
	// they cut; ServerRestarts counts the restarts of the server.
	Cuts, CutConnections, ServerRestarts int
	// LeaseLosses counts attempts whose worker gave them up because its
	// lease was lost with its connections (outcome "lost"); each followed
	// a cut of that worker's connections.
	LeaseLosses int
	// LostOutcomes counts attempts whose worker could not record their
	// outcome because its lease was lost with its connections.
	LostOutcomes int
	// CutReruns counts attempts that followed a successful one whose
	// worker's connections were cut before its outcome was recorded.
	CutReruns int
	// StoppedCutOverlaps counts attempts that began before the previous
	// one ended because that one's worker was stopped (SIGSTOP) when its
	// lease went with a cut of its connections, so it could not stop its
	// handler in time; that attempt's outcome was refused.
	StoppedCutOverlaps int
	// TransientErrors counts the store errors children retried (see
	// Backend.Transient).
	TransientErrors int
	// TreeAttempts counts attempts of tree jobs whose program started its
	// tree of processes (see tree.go): none of their processes may
	// outlive the attempt.
	TreeAttempts int
	// TreeAttemptsKilled counts those whose worker was killed during them
	// (no end marker): their processes were killed by the supervisor.
	TreeAttemptsKilled int
	// TimedOps counts the store operations the children timed (Submit,
	// Get, Claim, Complete, Cancel, List and Stats of every process but
	// the runner workers).
	TimedOps int
	// DuringStops sums up the timed operations of processes that were
	// not stopped themselves during them, and that overlapped a SIGSTOP
	// pause of another process: a stopped process must slow down only its
	// own jobs. WorstDuringStops names the longest ("claim by worker-1.0").
	DuringStops      Latency
	WorstDuringStops string
	// OpsDuringStops splits DuringStops by operation; OpsOutsideStops
	// gives the same figures for operations that overlapped no pause, to
	// compare with.
	OpsDuringStops, OpsOutsideStops map[string]Latency
	// Stalls counts the operations of DuringStops that took longer than
	// StallLimit (Config.StallLimit).
	Stalls     int
	StallLimit time.Duration
	// Waits counts the Waits of the wait storm (Config.Waiters) and
	// WaitsReturned those that returned the job ended (a waiter that
	// stops once every job has ended gives the rest 20s, then records a
	// violation). WaitWake sums up the time from a job's end (FinishedAt)
	// to the return of a Wait on it, and WaitWakeDuringStops and
	// WaitWakeOutsideStops split it by whether a process was stopped
	// meanwhile.
	Waits, WaitsReturned                                int
	WaitWake, WaitWakeDuringStops, WaitWakeOutsideStops Latency
	// VanishedJobs counts the jobs a Wait found gone after a List had
	// shown them: jobs whose Submit failed (an injected fault) and was
	// rolled back, and whose ID no Submit returned.
	VanishedJobs int
	// HolderSamples counts the sightings of running jobs by the driver's
	// sampler (one List of running jobs a second). MaxRunningAfterKill is
	// the longest a job was seen running after its worker was killed, and
	// MaxRunningAfterEnd after its live, unstopped worker ended the
	// attempt; past Config.HolderBound either is a violation.
	HolderSamples                           int
	MaxRunningAfterKill, MaxRunningAfterEnd time.Duration
	// UnreturnedJobs counts the jobs in the store whose ID no recorded
	// Submit returned: their submitter was killed before it recorded the
	// ID, or their Submit failed (an injected fault) yet made the job.
	// They must end like every other job.
	UnreturnedJobs int
	// InjectedFaults counts the file operations that failed on purpose
	// (Config.FaultRate), by errno ("EIO", "ENOSPC"), in FaultyProcs
	// child processes; the checks hold with them.
	InjectedFaults map[string]int
	FaultyProcs    int
	// TornLines counts record lines cut short by a SIGKILL (ignored).
	TornLines int
	// Fsck is "clean", "skipped", or the number of problems found.
	Fsck string
	// RepairedAtOpen lists what reopening the store at the end repaired.
	RepairedAtOpen []string

	// Violations lists the first broken promises found; NViolations
	// counts them all.
	Violations  []string
	NViolations int
}

// OK reports whether the run found no violation.
func (r *Report) OK() bool { return r.NViolations == 0 }

func (r *Report) violate(format string, args ...any) {
	r.NViolations++
	if len(r.Violations) < maxListed {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

// WriteTo prints the figures and the violations, one per line.
func (r *Report) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	p := func(name string, format string, args ...any) {
		fmt.Fprintf(&b, "%-22s %s\n", name+":", fmt.Sprintf(format, args...))
	}
	p("seed", "%d", r.Seed)
	p("processes", "%d workers (%d with runner.Runner), %d submitters, %d cancellers, %d waiters", r.Workers, r.RunnerWorkers, r.Submitters, r.Cancellers, r.Waiters)
	p("chaos / drain", "%s / %s", r.Chaos.Round(time.Millisecond), r.Drain.Round(time.Millisecond))
	var states []string
	for _, s := range jobstore.States() {
		states = append(states, fmt.Sprintf("%s %d", s, r.States[s]))
	}
	p("jobs", "%d (%s)", r.Jobs, strings.Join(states, ", "))
	p("submits", "%d returned %d IDs; %d found by key; %d keys; %d jobs whose ID no recorded submit returned", r.Submits, r.SubmittedIDs, r.KeyHits, r.Keys, r.UnreturnedJobs)
	p("kills", "%d (%d workers, %d submitters)", r.Kills, r.WorkerKills, r.Kills-r.WorkerKills)
	p("restarts / stops", "%d / %d", r.Restarts, r.Stops)
	p("attempts", "%d started; %d retries after failure; %d re-runs after a kill", r.Attempts, r.Retries, r.Reruns)
	p("attempt outcomes", "ok %d, failed %d, timeout %d, canceled %d, lost %d, killed %d", r.Outcomes[outcomeOK],
		r.Outcomes[outcomeFailed], r.Outcomes[outcomeTimeout], r.Outcomes[outcomeCanceled], r.Outcomes[outcomeLost],
		r.Outcomes["killed"])
	if r.Cuts > 0 || r.ServerRestarts > 0 {
		p("connection cuts", "%d (%d connections); %d server restarts; %d attempts lost their lease, %d their outcome; %d re-runs after a cut; %d transient errors retried",
			r.Cuts, r.CutConnections, r.ServerRestarts, r.LeaseLosses, r.LostOutcomes, r.CutReruns, r.TransientErrors)
		p("stopped through a cut", "%d attempts ran on after the next began: their worker was SIGSTOPped when its lease went with a cut, and their outcome was refused", r.StoppedCutOverlaps)
	}
	p("paused attempts", "%d (worker SIGSTOPped mid-attempt; finished after SIGCONT, not run elsewhere)", r.PausedAttempts)
	p("tree attempts", "%d, %d with their worker killed (programs that forked, escaped their process group and double-forked; none outlived its attempt)", r.TreeAttempts, r.TreeAttemptsKilled)
	p("lost claims", "%d (claimed, worker killed before the handler started)", r.LostClaims)
	p("canceled", "%d while queued, %d while running (the handler saw it)", r.CanceledQueued, r.CanceledRunning)
	p("recovery wait", "median %s, p99 %s, max %s (SIGKILL of a worker to the next attempt's start, busy workers included)",
		r.MedianRecoveryWait.Round(time.Millisecond), r.P99RecoveryWait.Round(time.Millisecond), r.MaxRecoveryWait.Round(time.Millisecond))
	p("ops during stops", "%s (of %d timed ops; those of processes not stopped themselves, while another was)", r.DuringStops, r.TimedOps)
	if r.WorstDuringStops != "" {
		p("  longest", "%s", r.WorstDuringStops)
	}
	for _, op := range sortedKeys(r.OpsDuringStops) {
		p("  "+op, "during stops %s; otherwise %s", r.OpsDuringStops[op], r.OpsOutsideStops[op])
	}
	p("stalls", "%d ops took longer than %s while another process was stopped", r.Stalls, r.StallLimit)
	if r.Waits > 0 {
		p("wait storm", "%d Waits, %d returned; from a job's end to the return of a Wait on it: p99 %s, max %s; %d jobs vanished (a failed Submit's rollback)",
			r.Waits, r.WaitsReturned, r.WaitWake.P99.Round(time.Millisecond), r.WaitWake.Max.Round(time.Millisecond), r.VanishedJobs)
		p("  wake", "during stops %s; otherwise %s", r.WaitWakeDuringStops, r.WaitWakeOutsideStops)
	}
	p("live holders", "%d sightings of running jobs; running after the worker's death up to %s, after its live worker ended the attempt up to %s",
		r.HolderSamples, r.MaxRunningAfterKill.Round(time.Millisecond), r.MaxRunningAfterEnd.Round(time.Millisecond))
	p("injected I/O errors", "%d (EIO %d, ENOSPC %d) in %d processes, retried by them", r.InjectedFaults["EIO"]+r.InjectedFaults["ENOSPC"],
		r.InjectedFaults["EIO"], r.InjectedFaults["ENOSPC"], r.FaultyProcs)
	p("torn record lines", "%d", r.TornLines)
	p("repaired at reopen", "%d", len(r.RepairedAtOpen))
	for i, m := range r.RepairedAtOpen {
		if i == 5 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(r.RepairedAtOpen)-i)
			break
		}
		fmt.Fprintf(&b, "  repaired %s\n", m)
	}
	p("fsck", "%s", r.Fsck)
	p("violations", "%d", r.NViolations)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  VIOLATION %s\n", v)
	}
	if r.NViolations > len(r.Violations) {
		fmt.Fprintf(&b, "  ... and %d more\n", r.NViolations-len(r.Violations))
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}
