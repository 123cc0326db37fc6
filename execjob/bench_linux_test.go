//go:build linux

package execjob_test

import (
	"testing"

	"github.com/jobdir/jobdir/execjob"
)

// BenchmarkWork measures one attempt of a program that does nothing: the
// overhead execjob adds to a job (start in a process group, log header and
// footer, wait, group cleanup).
func BenchmarkWork(b *testing.B) {
	for _, tc := range []struct {
		name   string
		logDir string
	}{{"discard", ""}, {"logfile", b.TempDir()}} {
		b.Run(tc.name, func(b *testing.B) {
			h := execjob.Handler{LogDir: tc.logDir}
			j := execJob(b, "/", 1, "true")
			for b.Loop() {
				if _, err := h.Work(b.Context(), j); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
