package storekit_test

import (
	"fmt"
	"time"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storekit"
)

// A store computes each change of a job with an Apply function and writes
// the record it returns: here, a claim and a failed attempt that will be
// retried.
func Example() {
	now := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	j := jobstore.NewJob(jobstore.Spec{Kind: "email.send", MaxAttempts: 3}, now)

	j, err := storekit.ApplyClaim(j, "worker-1", now)
	if err != nil {
		panic(err)
	}
	fmt.Println(j.State, "attempt", j.Attempt, "by", j.Worker)

	backoff := func(int) time.Duration { return time.Minute }
	j, err = storekit.ApplyOutcome(j, j.Lease(), jobstore.Outcome{Error: "smtp: 421 try later"}, now.Add(time.Second), backoff)
	if err != nil {
		panic(err)
	}
	fmt.Println(j.State, "again at", j.RunAt.Format("15:04:05"), "after", j.LastError)

	// A stale lease (an attempt that is over) changes nothing.
	_, err = storekit.ApplyOutcome(j, jobstore.Lease{ID: j.ID, Worker: "worker-1", Attempt: 1}, jobstore.Succeeded(nil), now, nil)
	fmt.Println(err != nil)
	// Output:
	// running attempt 1 by worker-1
	// queued again at 09:01:01 after smtp: 421 try later
	// true
}
