package torture

import (
	"os"
	"testing"
)

// TestMain turns the test binary into a torture child when a run re-executes
// it with EnvChild set.
func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(ChildMain(FileBackend()))
	}
	os.Exit(m.Run())
}
