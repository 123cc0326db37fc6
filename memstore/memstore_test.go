package memstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/jobstore/storetest"
	"github.com/jobdir/jobdir/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) jobstore.Store {
		s := memstore.New(nil)
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
