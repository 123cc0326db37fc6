package torture

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCheckHolders shows when a running job counts as held by no live
// process: long after its worker's SIGKILL, or long after its live worker
// ended the attempt, unless that worker was stopped meanwhile.
func TestCheckHolders(t *testing.T) {
	s := int64(time.Second)
	attempts := map[string][]*attemptRec{
		idA: {att(1, "w1", 1*s, 2*s, outcomeOK)},
		idB: {att(1, "w2", 1*s, 0, "")},
	}
	kills := map[string]int64{"w2": 3 * s}
	tests := []struct {
		name    string
		samples []holderSample
		stops   map[string][]pause
		want    string
	}{
		{name: "running while its attempt runs", samples: []holderSample{{at: 30 * s, id: idB, attempt: 1, worker: "w3"}}},
		{name: "recovered soon after the kill", samples: []holderSample{{at: 5 * s, id: idB, attempt: 1, worker: "w2"}}},
		{name: "running long after the kill", samples: []holderSample{{at: 20 * s, id: idB, attempt: 1, worker: "w2"}},
			want: "after its worker w2 was killed"},
		{name: "completed soon after its end", samples: []holderSample{{at: 3 * s, id: idA, attempt: 1, worker: "w1"}}},
		{name: "running long after its live worker ended it", samples: []holderSample{{at: 20 * s, id: idA, attempt: 1, worker: "w1"},
			{at: 21 * s, id: idA, attempt: 1, worker: "w1"}}, want: "after its live worker w1 ended it"},
		{name: "its worker was stopped meanwhile", samples: []holderSample{{at: 20 * s, id: idA, attempt: 1, worker: "w1"}},
			stops: map[string][]pause{"w1": {{from: 10 * s, to: 12 * s}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Report
			checkHolders(&r, tt.samples, attempts, kills, tt.stops, 15*time.Second)
			require.Equal(t, len(tt.samples), r.HolderSamples)
			if tt.want == "" {
				require.True(t, r.OK(), "%v", r.Violations)
				return
			}
			require.Equal(t, 1, r.NViolations, "one violation per attempt: %v", r.Violations)
			require.Contains(t, r.Violations[0], tt.want)
		})
	}
}
