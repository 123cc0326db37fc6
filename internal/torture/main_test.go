package torture

import (
	"context"
	"os"
	"testing"

	"github.com/jobdir/jobdir/jobstore"
	"go.uber.org/goleak"
)

// envBroken makes the children of a test run use a deliberately broken
// store, to prove that a run catches what it claims to catch.
const envBroken = "JOBDIR_TORTURE_TEST_BROKEN"

// TestMain turns the test binary into a torture child when a run re-executes
// it with envChild set.
func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(ChildMain(testBackend()))
	}
	goleak.VerifyTestMain(m)
}

func testBackend() Backend {
	b := BackendFromEnv()
	if os.Getenv(envBroken) == "keyloss" {
		open := b.Open
		b.Open = func(ctx context.Context, dir string) (jobstore.Store, error) {
			st, err := open(ctx, dir)
			return keyLosingStore{st}, err
		}
	}
	return b
}

// envTortureDir, if set, names an empty directory that TestTorturePostgres
// works in instead of a temporary one, and leaves behind: the store's
// schema (not dropped), the children's records and their output (pgstore's
// warnings among it), to read after a failed run.
const envTortureDir = "JOBDIR_TORTURE_DIR"
