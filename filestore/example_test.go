package filestore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
)

// A job's life in a directory store. Any number of processes may open the
// same directory: each claim goes to exactly one of them.
func ExampleOpen() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jobdir-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	s, err := filestore.Open(ctx, dir, nil)
	if err != nil {
		panic(err)
	}
	defer s.Close()

	job, created, err := s.Submit(ctx, jobstore.Spec{
		Kind:    "email.send",
		Key:     "welcome:alice",
		Payload: json.RawMessage(`{"to":"alice@example.com"}`),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("submitted:", job.State, created)

	again, created, _ := s.Submit(ctx, jobstore.Spec{Kind: "email.send", Key: "welcome:alice"})
	fmt.Println("resubmitted:", again.ID == job.ID, created)

	claimed, err := s.Claim(ctx, jobstore.ClaimRequest{Worker: "worker-1"})
	if err != nil {
		panic(err)
	}
	fmt.Println("claimed:", claimed.State, "attempt", claimed.Attempt)

	done, err := s.Complete(ctx, claimed.Lease(), jobstore.Succeeded(json.RawMessage(`{"sent":true}`)))
	if err != nil {
		panic(err)
	}
	fmt.Println("completed:", done.State, string(done.Result))
	// Output:
	// submitted: queued true
	// resubmitted: true false
	// claimed: running attempt 1
	// completed: succeeded {"sent":true}
}

// SubmitBatch makes many jobs durable at once: specs with a key that
// already has a job (or that an earlier spec of the batch took) get that
// job, with Created false.
func ExampleStore_SubmitBatch() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jobdir-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	s, err := filestore.Open(ctx, dir, nil)
	if err != nil {
		panic(err)
	}
	defer s.Close()

	if _, _, err := s.Submit(ctx, jobstore.Spec{Kind: "thumbnail", Key: "img-1"}); err != nil {
		panic(err)
	}
	results, err := s.SubmitBatch(ctx, []jobstore.Spec{
		{Kind: "thumbnail", Key: "img-1"},
		{Kind: "thumbnail", Key: "img-2"},
		{Kind: "thumbnail", Key: "img-2"},
		{Kind: "thumbnail"},
	})
	if err != nil {
		panic(err)
	}
	for i, r := range results {
		fmt.Println(i, r.Job.Key, r.Created)
	}
	fmt.Println("same job:", results[1].Job.ID == results[2].Job.ID)
	// Output:
	// 0 img-1 false
	// 1 img-2 true
	// 2 img-2 false
	// 3  true
	// same job: true
}

// Fsck checks every record and key file, and with repair fixes what a
// crash can leave behind.
func ExampleStore_Fsck() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jobdir-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	s, err := filestore.Open(ctx, dir, &filestore.Options{NoSync: true})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	if _, _, err := s.Submit(ctx, jobstore.Spec{Kind: "report.build"}); err != nil {
		panic(err)
	}
	r, err := s.Fsck(ctx, false)
	if err != nil {
		panic(err)
	}
	fmt.Println("records:", r.Records, "ok:", r.OK())
	// Output:
	// records: 1 ok: true
}

// outboxRow is a row of a program's own outbox table, written in the same
// database transaction as the change that needs a job.
type outboxRow struct {
	ID    int64
	Order string
}

// A file store cannot take part in a database transaction, so a program
// that must submit a job if and only if its transaction commits writes an
// outbox row in that transaction, and a relay submits each row's job with
// the row's ID as the key, then deletes the row. A relay that dies between
// the two submits the row again at its next pass: the key makes that
// second submit return the job the first one made.
func ExampleStore_Submit_outbox() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jobdir-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	s, err := filestore.Open(ctx, dir, nil)
	if err != nil {
		panic(err)
	}
	defer s.Close()

	// Committed by the program, with the order itself.
	outbox := []outboxRow{{ID: 41, Order: "o-1"}, {ID: 42, Order: "o-2"}}

	relay := func(deleteRows bool) {
		for _, row := range outbox {
			payload, _ := json.Marshal(map[string]string{"order": row.Order})
			job, created, err := s.Submit(ctx, jobstore.Spec{
				Kind:    "order.ship",
				Key:     fmt.Sprintf("outbox-%d", row.ID),
				Payload: payload,
			})
			if err != nil {
				return // the rows stay; the next pass submits them
			}
			fmt.Println(job.Key, "created:", created)
		}
		if deleteRows {
			outbox = nil // DELETE FROM outbox WHERE id IN (...)
		}
	}
	relay(false) // dies before it deletes the rows
	relay(true)  // the next pass
	// Output:
	// outbox-41 created: true
	// outbox-42 created: true
	// outbox-41 created: false
	// outbox-42 created: false
}
