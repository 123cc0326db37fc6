package torture

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/stretchr/testify/require"
)

const (
	idA = "01JAAAAAAAAAAAAAAAAAAAAAAA"
	idB = "01JBBBBBBBBBBBBBBBBBBBBBBB"
)

// att builds an attempt record, claimed at its start; times are in
// arbitrary ns.
func att(n int, worker string, start int64, end int64, outcome string) *attemptRec {
	a := &attemptRec{Attempt: n, Worker: worker, HasStart: true, Start: start, Claimed: start}
	if outcome != "" {
		a.HasEnd, a.End, a.Outcome = true, end, outcome
	}
	return a
}

// lostAt marks a's outcome lost with its lease, at at.
func lostAt(a *attemptRec, at int64) *attemptRec {
	a.HasLost, a.LostAt = true, at
	return a
}

// claimedAt sets when a's worker claimed it.
func claimedAt(a *attemptRec, at int64) *attemptRec {
	a.Claimed = at
	return a
}

func TestCheckRecords(t *testing.T) {
	done := func(id string, state jobstore.State, attempt int, key string) jobstore.Job {
		return jobstore.Job{ID: id, State: state, Attempt: attempt, Key: key}
	}
	tests := []struct {
		name  string
		jobs  []jobstore.Job
		rec   records
		kills map[string]int64
		stops map[string][]pause
		cuts  map[string][]pause
		want  string // substring of the only violation; "" for none
		check func(t *testing.T, r *Report)
	}{{
		name: "clean run with a retry and a re-run after a kill",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 3, "k"), done(idB, jobstore.StateCanceled, 0, "")},
		rec: records{
			submits: []submitRec{{ID: idA, Key: "k", Created: true}, {ID: idA, Key: "k"}, {ID: idB, Created: true}},
			cancels: []cancelRec{{ID: idB, State: jobstore.StateCanceled}},
			attempts: map[string][]*attemptRec{idA: {
				att(1, "w1", 10, 20, outcomeFailed),
				att(2, "w2", 30, 0, ""),
				att(3, "w1", 90, 95, outcomeOK),
			}},
		},
		kills: map[string]int64{"w2": 40},
		stops: map[string][]pause{"w1": {{from: 92, to: 94}}},
		check: func(t *testing.T, r *Report) {
			require.Equal(t, 1, r.PausedAttempts)
			require.Equal(t, 3, r.Submits)
			require.Equal(t, 2, r.SubmittedIDs)
			require.Equal(t, 1, r.KeyHits)
			require.Equal(t, 1, r.Retries)
			require.Equal(t, 1, r.Reruns)
			require.Equal(t, 3, r.Attempts)
			require.Equal(t, 1, r.CanceledQueued)
			require.EqualValues(t, 50, r.MaxRecoveryWait)
		},
	}, {
		name: "a submitted ID is missing",
		rec:  records{submits: []submitRec{{ID: idA, Created: true}}},
		want: "the store has no such job",
	}, {
		name: "a job is not terminal",
		jobs: []jobstore.Job{done(idA, jobstore.StateQueued, 0, "")},
		rec:  records{submits: []submitRec{{ID: idA, Created: true}}},
		want: "still queued",
	}, {
		name: "two jobs returned for one key",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 0, "k"), done(idB, jobstore.StateSucceeded, 0, "")},
		rec:  records{submits: []submitRec{{ID: idA, Key: "k", Created: true}, {ID: idB, Key: "k", Created: true}}},
		want: `key "k": Submit returned 2 different jobs`,
	}, {
		name: "two jobs in the store share a key",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 0, "k"), done(idB, jobstore.StateSucceeded, 0, "k")},
		want: `key "k": the store holds 2 jobs`,
	}, {
		name: "attempts overlap",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			att(1, "w1", 10, 50, outcomeFailed), att(2, "w2", 40, 60, outcomeOK)}}},
		want: "before attempt 1 ended",
	}, {
		name: "re-run while the previous worker lived",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			att(1, "w1", 10, 0, ""), att(2, "w2", 40, 60, outcomeOK)}}},
		want: "was not killed, yet attempt 2 ran",
	}, {
		name: "re-run before the previous worker was killed",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			att(1, "w1", 10, 0, ""), att(2, "w2", 40, 60, outcomeOK)}}},
		kills: map[string]int64{"w1": 45},
		want:  "before the worker of attempt 1 was killed",
	}, {
		name: "a succeeded attempt ran again",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			att(1, "w1", 10, 20, outcomeOK), att(2, "w2", 40, 60, outcomeOK)}}},
		want: "attempt 1 succeeded and its worker w1 was not killed",
	}, {
		name: "a succeeded job started again",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 1, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			att(1, "w1", 10, 20, outcomeOK), att(2, "w2", 40, 60, outcomeOK)}}},
		want: "attempt 2 started, but the record ends at attempt 1 (succeeded)",
	}, {
		name: "a job canceled while queued started",
		jobs: []jobstore.Job{done(idA, jobstore.StateCanceled, 1, "")},
		rec: records{
			cancels:  []cancelRec{{ID: idA, State: jobstore.StateCanceled}},
			attempts: map[string][]*attemptRec{idA: {att(1, "w1", 10, 20, outcomeCanceled)}},
		},
		want: "canceled while queued after attempt 0, yet attempt 1 started",
	}, {
		name: "an attempt never ended though its worker lived",
		jobs: []jobstore.Job{done(idA, jobstore.StateFailed, 1, "")},
		rec:  records{attempts: map[string][]*attemptRec{idA: {att(1, "w1", 10, 0, "")}}},
		want: "never ended, and that worker was not killed",
	}, {
		name: "a claim never started though its worker lived",
		jobs: []jobstore.Job{{ID: idA, State: jobstore.StateFailed, Attempt: 2, Worker: "w2"}},
		rec:  records{attempts: map[string][]*attemptRec{idA: {att(1, "w1", 10, 20, outcomeFailed)}}},
		want: "attempt 2 by w2 never started, and that worker was not killed",
	}, {
		name:  "a claim lost to a kill",
		jobs:  []jobstore.Job{{ID: idA, State: jobstore.StateFailed, Attempt: 2, Worker: "w2"}},
		rec:   records{attempts: map[string][]*attemptRec{idA: {att(1, "w1", 10, 20, outcomeFailed)}}},
		kills: map[string]int64{"w2": 30},
		check: func(t *testing.T, r *Report) { require.Equal(t, 1, r.LostClaims) },
	}, {
		name: "a lease lost after its worker's connections were cut, then a re-run",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			att(1, "w1", 10, 25, outcomeLost),
			att(2, "w2", 40, 50, outcomeOK),
		}}},
		cuts:  map[string][]pause{"w1": {{from: 5, to: 5}, {from: 20, to: 20}}},
		check: func(t *testing.T, r *Report) { require.Equal(t, 1, r.LeaseLosses) },
	}, {
		name: "a lease lost with no cut",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			att(1, "w1", 10, 25, outcomeLost),
			att(2, "w2", 40, 50, outcomeOK),
		}}},
		cuts: map[string][]pause{"w1": {{from: 30, to: 30}}, "w2": {{from: 1, to: 1}}},
		want: "attempt 1 by w1 lost its lease, yet that worker's connections were not cut",
	}, {
		// The worker claimed, was cut, and only then wrote its start
		// marker: the claim's lease session died with the cut.
		name: "a lease lost to a cut between its claim and its start",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			claimedAt(att(1, "w1", 10, 25, outcomeLost), 6),
			att(2, "w2", 40, 50, outcomeOK),
		}}},
		cuts:  map[string][]pause{"w1": {{from: 7, to: 8}}},
		check: func(t *testing.T, r *Report) { require.Equal(t, 1, r.LeaseLosses) },
	}, {
		// A claim binds its job to a live lease session only: a cut that
		// was over before the claim cannot take its lease.
		name: "a lease lost to a cut that was over before its claim",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			claimedAt(att(1, "w1", 10, 25, outcomeLost), 6),
			att(2, "w2", 40, 50, outcomeOK),
		}}},
		cuts: map[string][]pause{"w1": {{from: 4, to: 5}}},
		want: "attempt 1 by w1 lost its lease, yet that worker's connections were not cut",
	}, {
		name: "a re-run overlapping the attempt that lost its lease",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			att(1, "w1", 10, 45, outcomeLost),
			att(2, "w2", 40, 50, outcomeOK),
		}}},
		cuts: map[string][]pause{"w1": {{from: 20, to: 20}}},
		want: "attempt 2 started at mono 0.000s, before attempt 1 ended",
	}, {
		name: "a re-run overlapping an attempt whose worker was stopped when its lease went with a cut",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			lostAt(att(1, "w1", 10, 45, outcomeOK), 46),
			att(2, "w2", 40, 50, outcomeOK),
		}}},
		stops: map[string][]pause{"w1": {{from: 15, to: 44}}},
		cuts:  map[string][]pause{"w1": {{from: 20, to: 21}}},
		check: func(t *testing.T, r *Report) { require.Equal(t, 1, r.StoppedCutOverlaps) },
	}, {
		name: "the same overlap, its worker stopped only before the cut",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			lostAt(att(1, "w1", 10, 45, outcomeOK), 46),
			att(2, "w2", 40, 50, outcomeOK),
		}}},
		stops: map[string][]pause{"w1": {{from: 12, to: 14}}},
		cuts:  map[string][]pause{"w1": {{from: 20, to: 21}}},
		want:  "attempt 2 started at mono 0.000s, before attempt 1 ended",
	}, {
		name: "the same overlap with the outcome recorded",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			att(1, "w1", 10, 45, outcomeOK),
			att(2, "w2", 40, 50, outcomeOK),
		}}},
		stops: map[string][]pause{"w1": {{from: 15, to: 44}}},
		cuts:  map[string][]pause{"w1": {{from: 20, to: 21}}},
		want:  "attempt 2 started at mono 0.000s, before attempt 1 ended",
	}, {
		name: "a success whose outcome was lost with its worker's connections, then a re-run",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			att(1, "w1", 10, 25, outcomeOK),
			att(2, "w2", 40, 50, outcomeOK),
		}}},
		kills: map[string]int64{"w1": 60},
		cuts:  map[string][]pause{"w1": {{from: 30, to: 30}}},
		check: func(t *testing.T, r *Report) { require.Equal(t, 1, r.CutReruns) },
	}, {
		name: "a re-run after a success, its worker cut only later",
		jobs: []jobstore.Job{done(idA, jobstore.StateSucceeded, 2, "")},
		rec: records{attempts: map[string][]*attemptRec{idA: {
			att(1, "w1", 10, 25, outcomeOK),
			att(2, "w2", 40, 50, outcomeOK),
		}}},
		cuts: map[string][]pause{"w1": {{from: 45, to: 45}}},
		want: "attempt 1 succeeded and its worker w1 was not killed, yet attempt 2 ran",
	}, {
		name:  "a claim lost to a cut",
		jobs:  []jobstore.Job{{ID: idA, State: jobstore.StateFailed, Attempt: 2, Worker: "w2"}},
		rec:   records{attempts: map[string][]*attemptRec{idA: {att(1, "w1", 10, 20, outcomeFailed)}}},
		cuts:  map[string][]pause{"w2": {{from: 30, to: 30}}},
		check: func(t *testing.T, r *Report) { require.Equal(t, 1, r.LostClaims) },
	}, {
		name: "a violation a child saw",
		rec:  records{violations: []string{"lease lost"}},
		want: "seen by a child: lease lost",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobs := map[string]jobstore.Job{}
			for _, j := range tt.jobs {
				jobs[j.ID] = j
			}
			r := &Report{}
			checkRecords(r, jobs, tt.rec, tt.kills, tt.stops, tt.cuts)
			if tt.want == "" {
				require.Empty(t, r.Violations)
				require.True(t, r.OK())
			} else {
				require.False(t, r.OK())
				found := false
				for _, v := range r.Violations {
					found = found || strings.Contains(v, tt.want)
				}
				require.True(t, found, "want a violation containing %q, got %q", tt.want, r.Violations)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, makeRecordDirs(dir))
	rec := &recorder{dir: dir, name: "w1"}

	existed, err := rec.marker(markerName(idA, 1, "start"), "w1\t42\t100\n")
	require.NoError(t, err)
	require.False(t, existed)
	existed, err = rec.marker(markerName(idA, 1, "start"), "w2\t43\t101\n")
	require.NoError(t, err)
	require.True(t, existed, "a second start marker for one attempt must be refused")
	_, err = rec.marker(markerName(idA, 1, "end"), "w1\t42\t150\tok\n")
	require.NoError(t, err)
	// A start marker that says when the attempt was claimed.
	_, err = rec.marker(markerName(idB, 1, "start"), startLine("w1", jobstore.Job{StartedAt: time.Now().Add(-time.Hour)}))
	require.NoError(t, err)

	log := filepath.Join(dir, submitDir, "0.log")
	j := jobstore.Job{ID: idA, State: jobstore.StateCanceled, Attempt: 1}
	require.NoError(t, appendLine(log, submitLine(j, "k-1", true, classQuick, "submitter-0.0")))
	require.NoError(t, appendLine(log, cancelLine(j, "submitter-0.0")))
	// A line cut short by a SIGKILL is ignored and counted.
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString("S\t01JCC")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	rec.violation("seen %d", 1)

	got, err := readRecords(dir)
	require.NoError(t, err)
	require.Equal(t, []submitRec{{ID: idA, Key: "k-1", Created: true, Class: classQuick, By: "submitter-0.0"}}, got.submits)
	require.Equal(t, []cancelRec{{ID: idA, State: jobstore.StateCanceled, Attempt: 1, By: "submitter-0.0"}}, got.cancels)
	require.Equal(t, []*attemptRec{{Attempt: 1, Worker: "w1", HasStart: true, Start: 100, Claimed: 100, HasEnd: true, End: 150, Outcome: "ok"}}, got.attempts[idA])
	require.Len(t, got.attempts[idB], 1)
	b := got.attempts[idB][0]
	require.InDelta(t, b.Start-int64(time.Hour), b.Claimed, float64(time.Minute))
	require.Equal(t, 1, got.torn)
	require.Equal(t, []string{"seen 1"}, got.violations)
	n, err := countSubmits(log)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func TestReportWriteTo(t *testing.T) {
	r := &Report{Seed: 7, Jobs: 3, Kills: 2, WorkerKills: 1, Fsck: "clean"}
	r.violate("job %s: broken", idA)
	var b strings.Builder
	_, err := r.WriteTo(&b)
	require.NoError(t, err)
	require.Contains(t, b.String(), "kills:                 2 (1 workers, 1 submitters)")
	require.Contains(t, b.String(), "VIOLATION job "+idA+": broken")
}
