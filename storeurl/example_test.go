package storeurl_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/storeurl"
)

// A program opens the store its configuration names, as jobdir --store
// does: here a directory; a postgres://...?schema=NAME URL opens a store in
// PostgreSQL the same way.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "jobs")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	store, err := storeurl.Open(ctx, "file://"+filepath.Join(dir, "store"), &storeurl.Options{File: &filestore.Options{NoSync: true}})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	job, _, err := store.Submit(ctx, jobstore.Spec{Kind: "report", Key: "nightly"})
	if err != nil {
		panic(err)
	}
	got, err := store.GetByKey(ctx, "nightly")
	if err != nil {
		panic(err)
	}
	_, isFile := store.(*filestore.Store)
	fmt.Println(got.ID == job.ID, got.State, isFile)
	// Output:
	// true queued true
}
