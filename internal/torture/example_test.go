package torture_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jobdir/jobdir/internal/torture"
	"github.com/jobdir/jobdir/jobstore"
)

// A binary that runs a torture run is also its own child: it must hand
// over to ChildMain first thing when IsChild says it was re-executed.
// (This example is compiled, not run: a run takes a minute.)
func ExampleRun() {
	if torture.IsChild() {
		os.Exit(torture.ChildMain(torture.FileBackend()))
	}
	dir, err := os.MkdirTemp("", "torture-")
	if err != nil {
		log.Fatal(err)
	}
	r, err := torture.Run(context.Background(), torture.ShortConfig(dir, torture.FileBackend()))
	if r != nil {
		r.WriteTo(os.Stdout)
	}
	if errors.Is(err, torture.ErrViolations) {
		os.Exit(1)
	}
}

// CheckHistory finds that two submits of one key, one after the other,
// cannot both have created a job.
func ExampleCheckHistory() {
	const a, b = "01JAAAAAAAAAAAAAAAAAAAAAAA", "01JBBBBBBBBBBBBBBBBBBBBBBB"
	history := []torture.Op{
		{Client: 0, Kind: torture.OpSubmit, Key: "k", MaxAttempts: 3, Created: true,
			JobID: a, State: jobstore.StateQueued, Call: 0, Return: 10},
		{Client: 1, Kind: torture.OpSubmit, Key: "k", MaxAttempts: 3, Created: true,
			JobID: b, State: jobstore.StateQueued, Call: 20, Return: 30},
	}
	res, err := torture.CheckHistory(history, 0, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res)
	// Output: Illegal
}
