package jobstore

import "fmt"

// State is the lifecycle state of a job. Its string form is the on-disk and
// wire form.
type State string

// The states of a job. A job that waits for its RunAt (a delayed job, or a
// failed attempt waiting for its backoff) is StateQueued with RunAt in the
// future: claim order, not a separate state, expresses "not yet due".
const (
	// StateWaiting: waiting for the jobs it names (Job.After) to end; never
	// claimed. When the last of them ends the job is queued, or, unless
	// Job.AfterAny, canceled if one of them failed or was canceled.
	StateWaiting State = "waiting"
	// StateQueued: waiting to be claimed once RunAt has passed.
	StateQueued State = "queued"
	// StateRunning: held by one worker for one attempt.
	StateRunning State = "running"
	// StateSucceeded: the last attempt succeeded. Terminal.
	StateSucceeded State = "succeeded"
	// StateFailed: every attempt failed, or the failure was permanent.
	// Terminal, but Retry can queue it again.
	StateFailed State = "failed"
	// StateCanceled: canceled before it finished. Terminal, but Retry can
	// queue it again.
	StateCanceled State = "canceled"
)

// States returns every state, in lifecycle order.
func States() []State {
	return []State{StateWaiting, StateQueued, StateRunning, StateSucceeded, StateFailed, StateCanceled}
}

// Valid reports whether s is one of the states returned by States.
func (s State) Valid() bool {
	_, ok := transitions[s]
	return ok
}

// Terminal reports whether s is an end state: succeeded, failed or canceled.
// Wait returns once a job reaches one; Prune removes only jobs in one.
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCanceled
}

// ParseState returns the State named by s, or an error wrapping
// ErrInvalidInput.
func ParseState(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return "", fmt.Errorf("%w: unknown state %q (want one of waiting, queued, running, succeeded, failed, canceled)", ErrInvalidInput, s)
	}
	return st, nil
}

// Transition is one legal edge of the state machine, with the operation that
// takes it.
type Transition struct {
	From, To State
	// By names the operation that makes this transition.
	By string
}

// transitionTable is the state machine as data. docs/state-machine.md draws
// it, and TestTransitionsMatchDocs keeps the two in step.
var transitionTable = []Transition{
	{StateWaiting, StateQueued, "the last of its dependencies ended (succeeded, or any end with AfterAny)"},
	{StateWaiting, StateCanceled, "Cancel, or a dependency failed or was canceled (without AfterAny)"},
	{StateQueued, StateRunning, "Claim"},
	{StateQueued, StateCanceled, "Cancel"},
	{StateRunning, StateSucceeded, "Complete (success)"},
	{StateRunning, StateQueued, "Complete (failure, attempts left) or dead-worker recovery or Release"},
	{StateRunning, StateFailed, "Complete (failure, no attempts left) or dead-worker recovery or Release"},
	{StateRunning, StateCanceled, "Complete after Cancel requested"},
	{StateFailed, StateQueued, "Retry"},
	{StateCanceled, StateQueued, "Retry"},
	{StateFailed, StateWaiting, "Retry of a job whose dependencies have not all ended"},
	{StateCanceled, StateWaiting, "Retry of a job whose dependencies have not all ended"},
}

var transitions = func() map[State]map[State]bool {
	m := make(map[State]map[State]bool)
	for _, s := range States() {
		m[s] = map[State]bool{}
	}
	for _, t := range transitionTable {
		m[t.From][t.To] = true
	}
	return m
}()

// Transitions returns every legal transition of the state machine.
func Transitions() []Transition {
	return append([]Transition(nil), transitionTable...)
}

// CanTransition reports whether a job may move from one state to another.
func CanTransition(from, to State) bool {
	return transitions[from][to]
}

// CheckTransition returns nil if the job id may move from one state to
// another, and a *TransitionError (which wraps ErrInvalidTransition)
// otherwise.
func CheckTransition(id string, from, to State) error {
	if CanTransition(from, to) {
		return nil
	}
	return &TransitionError{ID: id, From: from, To: to}
}
