package pgtest

import (
	"bytes"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// recordTB records how a helper ends a test, without ending this one.
type recordTB struct {
	testing.TB
	skipped, failed bool
}

func (r *recordTB) Helper()               {}
func (r *recordTB) Skip(...any)           { r.skipped = true; runtime.Goexit() }
func (r *recordTB) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }

// TestBouncerMissing: without pgbouncer, a test that needs it is skipped
// outside CI, with one loud line for all, and fails with CI=true.
func TestBouncerMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	savedPaths, savedLoud := bouncerPaths, bouncerLoud
	var loud bytes.Buffer
	bouncerPaths, bouncerLoud, bouncerLoudOnce = nil, &loud, sync.Once{}
	t.Cleanup(func() { bouncerPaths, bouncerLoud, bouncerLoudOnce = savedPaths, savedLoud, sync.Once{} })
	for _, ci := range []string{"", "", "true"} {
		t.Setenv("CI", ci)
		r := &recordTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			bouncerExe(r)
		}()
		<-done
		require.Equal(t, ci != "true", r.skipped, "CI=%q", ci)
		require.Equal(t, ci == "true", r.failed, "CI=%q", ci)
	}
	require.Equal(t, 1, strings.Count(loud.String(), "SKIPPING the PgBouncer tests"), loud.String())
}
