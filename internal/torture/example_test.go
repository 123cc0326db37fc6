package torture_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/jobdir/jobdir/internal/torture"
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
