package storetest_test

import (
	"testing"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storetest"
	"github.com/jobdir/jobdir/memstore"
)

// A store's own test runs the whole suite against fresh stores. The factory
// registers the store's cleanup; Run closes it as well.
func ExampleRun() {
	_ = func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) jobstore.Store {
			s := memstore.New(nil)
			t.Cleanup(func() { _ = s.Close() })
			return s
		})
	}
}
