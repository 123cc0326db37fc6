package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/jobdir/jobdir/internal/clip"
)

// A Schedule makes a job of its Job spec at each tick of its Spec, in its
// time zone: "every night at 03:00". Every live process of a store may
// fire a due tick; the tick's key (TickKey) names one job across all of
// them, so a tick is one job however many fire it.
//
// Spec is a cron expression, parsed by github.com/robfig/cron/v3: the
// standard five fields (minute, hour, day of month, month, day of week,
// such as "0 3 * * *"), six with seconds first ("*/10 * * * * *"), or a
// descriptor: @yearly (@annually), @monthly, @weekly, @daily (@midnight)
// or @hourly. "@every D" (a Go duration of at least a second, whole
// seconds) ticks at the multiples of D since the Unix epoch, so that every
// process computes the same ticks whenever it started: "@every 1h" ticks
// on the hour, UTC.
//
// The fields are read in the schedule's zone (TZ, an IANA name such as
// "Europe/Berlin"; empty means UTC), with that zone's daylight saving
// rules: a time that a clock change skips does not happen that day ("30 2
// * * *" does not tick on the day clocks jump from 02:00 to 03:00), and a
// time that a change repeats happens twice ("30 1 * * *" ticks at 01:30
// before and 01:30 after the clocks go back, two ticks an hour apart).
// TestScheduleDaylightSaving shows both.
type Schedule struct {
	// Name names the schedule: 1 to MaxScheduleNameLen bytes of letters,
	// digits and ._- (see ValidateScheduleName).
	Name string `json:"name"`
	// Spec says when it ticks (see above).
	Spec string `json:"spec"`
	// TZ is the IANA time zone Spec is read in; empty means UTC.
	TZ string `json:"tz,omitempty"`
	// Job is the spec of each tick's job. Its Key must be empty: a tick's
	// job is keyed by TickKey.
	Job Spec `json:"job"`
	// CatchUp says what becomes of the ticks missed while no process
	// fired them (see CatchUp); empty means CatchUpOne.
	CatchUp CatchUp `json:"catch_up,omitempty"`
	// CatchUpWindow bounds, for CatchUpAll, how far back missed ticks are
	// made up; zero means DefaultCatchUpWindow.
	CatchUpWindow time.Duration `json:"catch_up_window_ns,omitempty"`
	// Overlap says what a tick does while the previous tick's job is
	// queued or running (see Overlap); empty means OverlapAllow.
	Overlap Overlap `json:"overlap,omitempty"`
	// Paused stops the schedule's ticks until it is resumed; the ticks
	// meanwhile are missed.
	Paused bool `json:"paused,omitempty"`
	// CreatedAt is when the schedule was added (or last replaced): its
	// first tick is the first after it.
	CreatedAt time.Time `json:"created_at"`
}

// CatchUp is what becomes of missed ticks: a tick is missed when no
// process fired it before the next tick came (all were down, or the
// schedule was paused). The latest due tick is not missed: it fires,
// whatever the policy.
type CatchUp string

// The catch-up policies.
const (
	// CatchUpSkip drops missed ticks: only the latest due tick fires.
	CatchUpSkip CatchUp = "skip"
	// CatchUpOne makes one job for all the missed ticks, keyed by the
	// latest of them, besides the latest due tick's. The default.
	CatchUpOne CatchUp = "one"
	// CatchUpAll makes a job for each missed tick within the schedule's
	// CatchUpWindow (at most MaxCatchUpTicks, the latest ones).
	CatchUpAll CatchUp = "all"
)

// Overlap is what a tick does while the job of the tick before it is
// still queued or running.
type Overlap string

// The overlap policies.
const (
	// OverlapAllow fires the tick all the same: its job may run beside the
	// previous one. The default.
	OverlapAllow Overlap = "allow"
	// OverlapSkip drops the tick (counted as skipped).
	OverlapSkip Overlap = "skip"
	// OverlapQueue holds the tick back and fires it once the previous
	// tick's job has ended.
	OverlapQueue Overlap = "queue"
)

// Limits of schedules.
const (
	// MaxScheduleNameLen is the longest schedule name, in bytes.
	MaxScheduleNameLen = 128
	// DefaultCatchUpWindow is how far back CatchUpAll makes up missed
	// ticks when the schedule sets no window.
	DefaultCatchUpWindow = 24 * time.Hour
	// MaxCatchUpTicks is the most missed ticks CatchUpAll makes up at
	// once.
	MaxCatchUpTicks = 1000
)

// TickKey returns the idempotency key of the job that the tick at tick
// of the schedule name makes: "schedule:<name>:<tick in RFC 3339, UTC, to
// the second>", such as "schedule:nightly:2026-12-01T03:00:00Z".
func TickKey(name string, tick time.Time) string {
	return "schedule:" + name + ":" + tick.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// ValidateScheduleName checks a schedule's name: 1 to MaxScheduleNameLen
// bytes of letters, digits and ._- . Its error wraps ErrInvalidInput.
func ValidateScheduleName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: a schedule needs a name", ErrInvalidInput)
	}
	if len(name) > MaxScheduleNameLen {
		return fmt.Errorf("%w: schedule name is %d bytes, limit %d", ErrInvalidInput, len(name), MaxScheduleNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(nameByte(c) && c != ':' && c != '/') {
			return fmt.Errorf("%w: schedule name %q: only letters, digits and ._- are allowed", ErrInvalidInput, clip.String(name, 64))
		}
	}
	return nil
}

// Validate checks s: its name, spec, zone, policies and job (whose key
// must be empty). Its error wraps ErrInvalidInput and says, in words, what
// is wrong.
func (s Schedule) Validate(maxPayload int) error {
	if err := ValidateScheduleName(s.Name); err != nil {
		return err
	}
	if _, err := s.ticker(); err != nil {
		return err
	}
	switch s.CatchUp {
	case "", CatchUpSkip, CatchUpOne, CatchUpAll:
	default:
		return fmt.Errorf("%w: catch-up %q: want skip, one or all", ErrInvalidInput, clip.String(string(s.CatchUp), 32))
	}
	if s.CatchUpWindow < 0 {
		return fmt.Errorf("%w: negative catch-up window", ErrInvalidInput)
	}
	switch s.Overlap {
	case "", OverlapAllow, OverlapSkip, OverlapQueue:
	default:
		return fmt.Errorf("%w: overlap %q: want allow, skip or queue", ErrInvalidInput, clip.String(string(s.Overlap), 32))
	}
	if s.Job.Key != "" {
		return fmt.Errorf("%w: a schedule's job has no key: each tick's job is keyed by its tick", ErrInvalidInput)
	}
	if err := s.Job.Validate(maxPayload); err != nil {
		return fmt.Errorf("schedule %s: job: %w", s.Name, err)
	}
	return nil
}

// Next returns the schedule's first tick after t, in UTC; the zero time
// if it is paused, its spec or zone is invalid, or it has none within
// five years.
func (s Schedule) Next(t time.Time) time.Time {
	tk, err := s.ticker()
	if err != nil || s.Paused {
		return time.Time{}
	}
	return tk.next(t)
}

// JobAt returns the spec of the job that the schedule's tick at tick
// makes: its Job, keyed by TickKey.
func (s Schedule) JobAt(tick time.Time) Spec {
	spec := s.Job
	spec.Key = TickKey(s.Name, tick)
	return spec
}

// Zone returns the name of the zone the schedule's spec is read in: TZ,
// or "UTC" when it is empty.
func (s Schedule) Zone() string {
	if s.TZ == "" {
		return "UTC"
	}
	return s.TZ
}

// Policies returns the schedule's catch-up and overlap policies, with the
// defaults (CatchUpOne, OverlapAllow) for the empty ones.
func (s Schedule) Policies() (CatchUp, Overlap) {
	c, o := s.CatchUp, s.Overlap
	if c == "" {
		c = CatchUpOne
	}
	if o == "" {
		o = OverlapAllow
	}
	return c, o
}

// ticker computes a schedule's ticks.
type ticker struct {
	every time.Duration // for @every
	spec  cron.Schedule
	loc   *time.Location
}

func (tk ticker) next(t time.Time) time.Time {
	if tk.every > 0 {
		// The next multiple of every since the Unix epoch.
		n := t.UnixNano()/int64(tk.every) + 1
		if t.UnixNano() < 0 && t.UnixNano()%int64(tk.every) != 0 {
			n--
		}
		return time.Unix(0, n*int64(tk.every)).UTC()
	}
	n := tk.spec.Next(t.In(tk.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// specParser reads the cron expressions of Schedule.Spec: five fields, or
// six with seconds first, or a descriptor.
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ticker parses s's spec and zone.
func (s Schedule) ticker() (ticker, error) {
	spec := strings.TrimSpace(s.Spec)
	if spec == "" {
		return ticker{}, fmt.Errorf("%w: a schedule needs a spec, such as \"0 3 * * *\" or @every 1h", ErrInvalidInput)
	}
	loc := time.UTC
	if s.TZ != "" {
		l, err := time.LoadLocation(s.TZ)
		if err != nil || s.TZ == "Local" {
			return ticker{}, fmt.Errorf("%w: time zone %q is not one this system knows: give an IANA name such as Europe/Berlin", ErrInvalidInput, clip.String(s.TZ, 64))
		}
		loc = l
	}
	if strings.HasPrefix(spec, "CRON_TZ=") || strings.HasPrefix(spec, "TZ=") {
		return ticker{}, fmt.Errorf("%w: spec %q: give the time zone on its own (--tz), not in the spec", ErrInvalidInput, clip.String(spec, 64))
	}
	if rest, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		switch {
		case err != nil:
			return ticker{}, fmt.Errorf("%w: spec %q: %q is not a duration such as 30s or 1h", ErrInvalidInput, clip.String(spec, 64), clip.String(rest, 32))
		case d < time.Second || d%time.Second != 0:
			return ticker{}, fmt.Errorf("%w: spec %q: @every takes whole seconds, at least 1s", ErrInvalidInput, clip.String(spec, 64))
		}
		return ticker{every: d, loc: loc}, nil
	}
	cs, err := specParser.Parse(spec)
	if err != nil {
		return ticker{}, fmt.Errorf("%w: spec %q is not a cron expression: %s (want five fields such as \"0 3 * * *\", six with seconds first, @daily or @every 1h)",
			ErrInvalidInput, clip.String(spec, 64), plainCronError(err))
	}
	return ticker{spec: cs, loc: loc}, nil
}

// plainCronError returns the message of a parse error of the cron
// library without its package's words.
func plainCronError(err error) string {
	var msg string
	for e := err; e != nil; e = errors.Unwrap(e) {
		msg = e.Error()
	}
	return msg
}

// Tick is one tick a Plan fires, with the key of its job.
type Tick struct {
	// At is the tick's time, in UTC.
	At time.Time
	// Key is the tick's job's key (TickKey).
	Key string
	// CatchUp marks a missed tick made up by the catch-up policy.
	CatchUp bool
}

// TickPlan is what a process does about a schedule at one moment: the
// ticks to fire, oldest first, and how many missed ticks the catch-up
// policy drops.
type TickPlan struct {
	Fire    []Tick
	Skipped int
}

// Plan returns what is due of s at now, given the latest tick already
// fired (zero if none; the schedule's CreatedAt bounds the ticks from
// below): the latest due tick, and the missed ticks before it as its
// CatchUp policy says. A paused schedule plans nothing. Overlap is not
// considered here: it depends on the previous tick's job, which the caller
// reads.
func (s Schedule) Plan(lastFired, now time.Time) TickPlan {
	tk, err := s.ticker()
	if err != nil || s.Paused {
		return TickPlan{}
	}
	from := s.CreatedAt
	if lastFired.After(from) {
		from = lastFired
	}
	keep := 2 // the latest due tick and the one before it
	if s.CatchUp == CatchUpAll {
		keep = MaxCatchUpTicks + 1
	}
	due, n := tk.between(from, now, keep)
	if n == 0 {
		return TickPlan{}
	}
	latest, missed := due[len(due)-1], due[:len(due)-1]
	var p TickPlan
	switch s.CatchUp {
	case CatchUpSkip:
		p.Skipped = n - 1
	case CatchUpAll:
		window := s.CatchUpWindow
		if window <= 0 {
			window = DefaultCatchUpWindow
		}
		for _, t := range missed {
			if now.Sub(t) <= window {
				p.Fire = append(p.Fire, Tick{At: t, Key: TickKey(s.Name, t), CatchUp: true})
			}
		}
		p.Skipped = n - 1 - len(p.Fire)
	default: // CatchUpOne
		if n > 1 {
			t := missed[len(missed)-1]
			p.Fire = append(p.Fire, Tick{At: t, Key: TickKey(s.Name, t), CatchUp: true})
			p.Skipped = n - 2
		}
	}
	p.Fire = append(p.Fire, Tick{At: latest, Key: TickKey(s.Name, latest)})
	return p
}

// maxTickScan bounds the ticks of a cron spec that between steps through
// from one instant to another; past it, the ticks before the last
// DefaultCatchUpWindow are counted as that many, not one by one.
const maxTickScan = 200_000

// between returns the last keep ticks after from and at or before to,
// oldest first, and how many ticks there are in all (for a cron spec that
// ticks more than maxTickScan times between them, a lower bound).
func (tk ticker) between(from, to time.Time, keep int) ([]time.Time, int) {
	if tk.every > 0 {
		first := tk.next(from)
		if first.After(to) {
			return nil, 0
		}
		last := tk.next(to.Add(-tk.every)) // the latest multiple at or before to
		if last.After(to) {
			last = last.Add(-tk.every)
		}
		n := int(last.Sub(first)/tk.every) + 1
		k := min(keep, n)
		out := make([]time.Time, k)
		for i := range k {
			out[i] = last.Add(-time.Duration(k-1-i) * tk.every)
		}
		return out, n
	}
	var ring []time.Time
	n := 0
	for t := tk.next(from); !t.IsZero() && !t.After(to); t = tk.next(t) {
		n++
		if n > maxTickScan && to.Sub(t) > DefaultCatchUpWindow {
			// Too many to step through: go on from the window's start.
			t = tk.next(to.Add(-DefaultCatchUpWindow))
			if t.IsZero() || t.After(to) {
				break
			}
			n++
		}
		ring = append(ring, t)
		if len(ring) > keep {
			ring = ring[1:]
		}
	}
	return ring, n
}

// ErrScheduleExists is returned by Scheduler.AddSchedule for a name that
// a schedule has, unless it replaces it.
var ErrScheduleExists = errors.New("a schedule of this name exists")

// ScheduleInfo is a schedule as a store keeps it: the Schedule, and its
// latest fired tick.
type ScheduleInfo struct {
	Schedule
	// LastTick is the latest tick fired (by any process), zero if none.
	LastTick time.Time `json:"last,omitzero"`
	// LastJob is the ID of LastTick's job.
	LastJob string `json:"last_job,omitempty"`
}

// Scheduler is a Store that keeps schedules: memstore, filestore and
// pgstore implement it. Every process of the store sees a change once its
// method returns; the changes are durable. A name is checked as
// ValidateScheduleName says, and a name no schedule has gives an error
// wrapping ErrNotFound.
type Scheduler interface {
	// AddSchedule adds s, with CreatedAt now (so its first tick is the
	// first after now), and returns it as kept. A schedule of that name
	// gives ErrScheduleExists, unless replace, which replaces it and
	// keeps its LastTick (a tick fired is not fired again). An invalid s
	// gives an error wrapping ErrInvalidInput, and changes nothing.
	AddSchedule(ctx context.Context, s Schedule, replace bool) (ScheduleInfo, error)
	// Schedules returns every schedule, sorted by name.
	Schedules(ctx context.Context) ([]ScheduleInfo, error)
	// GetSchedule returns the schedule name.
	GetSchedule(ctx context.Context, name string) (ScheduleInfo, error)
	// PauseSchedule pauses (paused true) or resumes the schedule name;
	// either is idempotent. It returns the schedule as kept.
	PauseSchedule(ctx context.Context, name string, paused bool) (ScheduleInfo, error)
	// RemoveSchedule removes the schedule name: no tick of it fires from
	// then on. The jobs of its ticks stay.
	RemoveSchedule(ctx context.Context, name string) error
	// RecordTick notes that the tick at of the schedule name made the job
	// jobID: LastTick becomes at, if at is later than it.
	RecordTick(ctx context.Context, name string, at time.Time, jobID string) error
}
