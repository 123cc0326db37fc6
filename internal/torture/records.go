package torture

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/jobdir/jobdir/jobstore"
)

// submitRec is one recorded Submit that returned.
type submitRec struct {
	ID, Key string
	Created bool
	Class   string
	By      string
}

// cancelRec is one recorded Cancel that returned, with the job it returned.
type cancelRec struct {
	ID              string
	State           jobstore.State
	Attempt         int
	CancelRequested bool
	By              string
}

// attemptRec is what the markers say about one attempt of one job.
type attemptRec struct {
	Attempt  int
	Worker   string
	HasStart bool
	Start    int64 // CLOCK_MONOTONIC ns
	// Claimed is when the worker claimed the attempt, on the same clock:
	// at or before Start (Start if the marker does not say).
	Claimed int64
	HasEnd  bool
	End     int64
	Outcome string
	// HasLost is set when the worker could not record the attempt's
	// outcome because its lease was lost (a "lost" marker, at LostAt).
	HasLost bool
	LostAt  int64
}

// records is everything the children recorded outside the store.
type records struct {
	submits  []submitRec
	cancels  []cancelRec
	attempts map[string][]*attemptRec // by job ID, sorted by attempt
	// violations are what children saw and wrote down themselves.
	violations []string
	// torn counts log lines cut short (a partial last line).
	torn int
}

func readRecords(dir string) (records, error) {
	rec := records{attempts: map[string][]*attemptRec{}}
	for _, sub := range []string{submitDir, cancelDir} {
		logs, err := filepath.Glob(filepath.Join(dir, sub, "*.log"))
		if err != nil {
			return rec, err
		}
		for _, p := range logs {
			if err := rec.readLog(p); err != nil {
				return rec, err
			}
		}
	}
	if err := rec.readAttempts(filepath.Join(dir, attemptDir)); err != nil {
		return rec, err
	}
	vs, err := os.ReadDir(filepath.Join(dir, violationDir))
	if err != nil {
		return rec, err
	}
	for _, v := range vs {
		b, err := os.ReadFile(filepath.Join(dir, violationDir, v.Name()))
		if err != nil {
			return rec, err
		}
		rec.violations = append(rec.violations, strings.TrimSpace(string(b)))
	}
	return rec, nil
}

func (rec *records) readLog(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text := string(b)
	if text != "" && !strings.HasSuffix(text, "\n") {
		rec.torn++
		text = text[:strings.LastIndexByte(text, '\n')+1]
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		f := fields(sc.Text())
		switch {
		case f[0] == "S" && len(f) == 6:
			rec.submits = append(rec.submits, submitRec{ID: f[1], Key: f[2], Created: f[3] == "true", Class: f[4], By: f[5]})
		case f[0] == "C" && len(f) == 6:
			attempt, err := strconv.Atoi(f[3])
			if err != nil {
				return fmt.Errorf("%s:%d: %w", path, n, err)
			}
			rec.cancels = append(rec.cancels, cancelRec{ID: f[1], State: jobstore.State(f[2]), Attempt: attempt, CancelRequested: f[4] == "true", By: f[5]})
		default:
			return fmt.Errorf("%s:%d: unreadable record %q", path, n, sc.Text())
		}
	}
	return sc.Err()
}

func (rec *records) readAttempts(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	byKey := map[string]*attemptRec{}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue // a temporary file left by a killed worker
		}
		parts := strings.Split(name, ".")
		if len(parts) != 3 {
			return fmt.Errorf("%s: unexpected file %q", dir, name)
		}
		id, kind := parts[0], parts[2]
		attempt, err := strconv.Atoi(parts[1])
		if err != nil {
			return fmt.Errorf("%s: %q: %w", dir, name, err)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		f := fields(strings.TrimSuffix(string(b), "\n"))
		if len(f) < 3 {
			return fmt.Errorf("%s: %q: unreadable marker %q", dir, name, b)
		}
		at, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %q: %w", dir, name, err)
		}
		k := id + "." + parts[1]
		a := byKey[k]
		if a == nil {
			a = &attemptRec{Attempt: attempt}
			byKey[k] = a
			rec.attempts[id] = append(rec.attempts[id], a)
		}
		switch kind {
		case "start":
			a.HasStart, a.Start, a.Claimed, a.Worker = true, at, at, f[0]
			if len(f) >= 4 {
				if a.Claimed, err = strconv.ParseInt(f[3], 10, 64); err != nil {
					return fmt.Errorf("%s: %q: %w", dir, name, err)
				}
			}
		case "lost":
			a.HasLost, a.LostAt = true, at
			if a.Worker == "" {
				a.Worker = f[0]
			}
		case "end":
			if len(f) < 4 {
				return fmt.Errorf("%s: %q: end marker without outcome", dir, name)
			}
			a.HasEnd, a.End, a.Outcome = true, at, f[3]
			if a.Worker == "" {
				a.Worker = f[0]
			}
		default:
			return fmt.Errorf("%s: unexpected file %q", dir, name)
		}
	}
	for _, as := range rec.attempts {
		sort.Slice(as, func(i, j int) bool { return as[i].Attempt < as[j].Attempt })
	}
	return nil
}
