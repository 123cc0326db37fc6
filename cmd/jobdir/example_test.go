package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Submit a job, run a worker until the queue is empty, and wait for the
// job: the same calls a shell makes, in-process.
func Example() {
	dir, err := os.MkdirTemp("", "jobdir-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store := filepath.Join(dir, "store")
	ctx := context.Background()

	var id strings.Builder
	run(ctx, []string{"--dir", store, "submit", "--", "echo", "hello"}, nil, &id, os.Stderr)
	run(ctx, []string{"--dir", store, "work", "--exit-when-idle", "--quiet"}, nil, io.Discard, os.Stderr)
	code := run(ctx, []string{"--dir", store, "wait", strings.TrimSpace(id.String())}, nil, os.Stdout, os.Stderr)
	fmt.Println("exit status", code)
	// Output:
	// succeeded
	// exit status 0
}
