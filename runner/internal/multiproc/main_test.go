package multiproc_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/internal/testproc"
)

func TestMain(m *testing.M) {
	testproc.Main(map[string]testproc.Func{"worker": worker, "drain": drain})
	goleak.VerifyTestMain(m)
}
