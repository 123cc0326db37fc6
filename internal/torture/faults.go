package torture

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/jobdir/jobdir/internal/fsfault"
)

// faultDir holds, under the records, one log per child incarnation that ran
// its store on a failing disk (<name>.log): a line "<op>\t<errno>\t<path>"
// for each failure it injected, written before the store sees the error.
const faultDir = "faults"

// faulty reports whether the child role index runs its store with injected
// faults (when the run injects any): the workers and submitters with an
// even index, so that the others keep a healthy disk to compare with.
func faulty(role string, index int) bool {
	return (role == roleWorker || role == roleSubmitter) && index%2 == 0
}

// newInjector returns an injector that fails a share rate of the file
// operations, with EIO or ENOSPC at random, and records each failure in
// the child's fault log.
func newInjector(spec childSpec, rate float64) *fsfault.Injector {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(spec.Seed), 2<<40|uint64(spec.Index)<<20|uint64(spec.Incarnation)))
	logPath := filepath.Join(spec.RecordDir, faultDir, spec.Name+".log")
	return &fsfault.Injector{Fail: func(op fsfault.Op, path string) error {
		mu.Lock()
		hit, errno := rng.Float64() < rate, syscall.EIO
		if rng.IntN(2) == 0 {
			errno = syscall.ENOSPC
		}
		mu.Unlock()
		if !hit {
			return nil
		}
		if err := appendLine(logPath, fmt.Sprintf("%s\t%s\t%s", op, errnoName(errno), path)); err != nil {
			// Unrecorded, the failure would go uncounted: fail nothing.
			fmt.Fprintf(os.Stderr, "fault log: %v\n", err)
			return nil
		}
		return fsfault.Error(op, errno)
	}}
}

func errnoName(e syscall.Errno) string {
	if e == syscall.ENOSPC {
		return "ENOSPC"
	}
	return "EIO"
}

// injectedError reports whether err comes from an injected fault: the
// children retry such errors, as they do transient ones.
func injectedError(err error) bool { return errors.Is(err, fsfault.ErrInjected) }

// countFaults counts the injected failures the children recorded, by
// errno name, and the processes that injected them.
func countFaults(recDir string) (byErrno map[string]int, procs int, err error) {
	logs, err := filepath.Glob(filepath.Join(recDir, faultDir, "*.log"))
	if err != nil {
		return nil, 0, err
	}
	byErrno = map[string]int{}
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, 0, err
		}
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if f := fields(line); len(f) == 3 {
				byErrno[f[1]]++
				n++
			}
		}
		if n > 0 {
			procs++
		}
	}
	return byErrno, procs, nil
}
