package webui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/webui"
)

// The dashboard's target: every page and data request answers in under
// 200 ms with 100,000 jobs in a file store (docs/ui.md has the figures).
// BenchmarkUI measures it on a file store of $JOBDIR_BENCH_UI_JOBS jobs
// (default 100,000: 95% finished, about 1 in 1,000 of them failed, 5%
// queued, 10 running), built once per process in $TMPDIR, which takes a minute or
// two; JOBDIR_BENCH_UI_KEEP=1 keeps it, and JOBDIR_BENCH_UI_DIR=DIR measures
// a store kept so:
//
//	go test -run '^$' -bench UI -benchtime 20x ./webui

type uiBench struct {
	store  jobstore.Store
	ui     *webui.Handler
	api    http.Handler
	cookie *http.Cookie
	next   string // the jobs table's second page
	job    string // a failed job
	prefix string // an ID prefix some jobs share
	dir    string
	err    error
	// firstStats is how long the store's first Stats took.
	firstStats time.Duration
}

var (
	uiBenchOnce sync.Once
	uiBenchEnv  uiBench
)

// closeUIBench closes and removes BenchmarkUI's store, if it made one.
func closeUIBench() {
	if uiBenchEnv.store != nil {
		_ = uiBenchEnv.store.Close()
	}
	if uiBenchEnv.dir != "" && os.Getenv("JOBDIR_BENCH_UI_KEEP") == "" {
		_ = os.RemoveAll(uiBenchEnv.dir)
	}
}

func benchJobs() int {
	if n, err := strconv.Atoi(os.Getenv("JOBDIR_BENCH_UI_JOBS")); err == nil && n > 0 {
		return n
	}
	return 100000
}

// openFileStore opens the file store of BenchmarkUI. NoSync: seeding
// 100,000 jobs with an fsync each takes too long on this disk, and reads
// do not depend on it.
func openFileStore(ctx context.Context, dir string) (jobstore.Store, error) {
	return filestore.Open(ctx, dir, &filestore.Options{NoSync: true})
}

// buildUIBench makes the store: batches of submits, then claims and
// completes by several goroutines.
func buildUIBench() (e uiBench) {
	ctx := context.Background()
	if dir := os.Getenv("JOBDIR_BENCH_UI_DIR"); dir != "" {
		// A store built before (and kept): measure it again.
		if e.store, e.err = openFileStore(ctx, dir); e.err != nil {
			return e
		}
		var p jobstore.Page
		if p, e.err = e.store.List(ctx, jobstore.ListOptions{Limit: 1}); e.err != nil {
			return e
		}
		if len(p.Jobs) == 0 {
			e.err = fmt.Errorf("%s holds no job: not a store BenchmarkUI built", dir)
			return e
		}
		e.job = p.Jobs[0].ID
		return e.signIn()
	}
	e.dir, e.err = os.MkdirTemp("", "jobdir-ui-bench")
	if e.err != nil {
		return e
	}
	if e.store, e.err = openFileStore(ctx, e.dir); e.err != nil {
		return e
	}
	if e.job, e.err = seedUIBench(ctx, e.store); e.err != nil {
		return e
	}
	return e.signIn()
}

// seedUIBench fills st with benchJobs jobs: batches of submits, then
// claims and completes by 8 goroutines (95% finished, about 1 in
// 1,000 of them failed, 5% queued, 10 running). It returns a failed job.
func seedUIBench(ctx context.Context, st jobstore.Store) (string, error) {
	n := benchJobs()
	kinds := []string{"email.send", "report.build", "image.resize", "exec"}
	for done := 0; done < n; {
		specs := make([]jobstore.Spec, min(jobstore.MaxBatch, n-done))
		for i := range specs {
			specs[i] = jobstore.Spec{Kind: kinds[(done+i)%len(kinds)], Key: fmt.Sprintf("bench-%d", done+i), MaxAttempts: 1,
				Payload: []byte(`{"to":"someone@example.com","template":"welcome","n":` + strconv.Itoa(done+i) + `}`)}
		}
		if _, err := st.SubmitBatch(ctx, specs); err != nil {
			return "", err
		}
		done += len(specs)
	}
	finish := n * 95 / 100
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	var failed string
	for w := range 8 {
		wg.Go(func() {
			for {
				j, err := st.Claim(ctx, jobstore.ClaimRequest{Worker: fmt.Sprintf("bench-%d", w)})
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				o := jobstore.Succeeded([]byte(`{"ok":true}`))
				// A few fail: bench-107, bench-117, …, bench-997, bench-100007, …
				if strings.HasSuffix(j.Key, "7") && len(j.Key)%3 == 0 {
					o = jobstore.Outcome{Error: "exit status 1"}
				}
				if _, err := st.Complete(ctx, j.Lease(), o); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mu.Lock()
				finish--
				last := finish <= 0
				if j.State == jobstore.StateRunning && o.Error != "" {
					failed = j.ID
				}
				mu.Unlock()
				if last {
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return "", firstErr
	}
	for range 10 {
		if _, err := st.Claim(ctx, jobstore.ClaimRequest{Worker: "bench-running"}); err != nil {
			return "", err
		}
	}
	return failed, nil
}

// signIn makes the handler and its session, after a first Stats: a file
// store reads every record once for its first Stats (then only those that
// changed), a cost a server pays once, not per request.
func (e uiBench) signIn() uiBench {
	start := time.Now()
	if _, e.err = e.store.Stats(context.Background()); e.err != nil {
		return e
	}
	e.firstStats = time.Since(start)
	e.prefix = e.job[:8]
	if e.api, e.err = httpapi.New(e.store, &httpapi.Options{Tokens: []string{testToken}}); e.err != nil {
		return e
	}
	e.ui, e.err = webui.New(e.store, &webui.Options{Tokens: []string{testToken}})
	if e.err != nil {
		return e
	}
	var p jobstore.Page
	if p, e.err = e.store.List(context.Background(), jobstore.ListOptions{Limit: webui.PageSize}); e.err != nil {
		return e
	}
	e.next = p.Next
	w := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/ui/signin", strings.NewReader(url.Values{"token": {testToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	e.ui.ServeHTTP(w, req)
	e.cookie = w.Result().Cookies()[0]
	return e
}

func BenchmarkUI(b *testing.B) {
	start := time.Now()
	uiBenchOnce.Do(func() { uiBenchEnv = buildUIBench() })
	e := uiBenchEnv
	if e.err != nil {
		b.Fatal(e.err)
	}
	if d := time.Since(start); d > time.Second {
		b.Logf("opened (or built) a file store of %d jobs in %s; its first Stats took %s", benchJobs(), d.Round(time.Second),
			e.firstStats.Round(time.Millisecond))
		if e.dir != "" && os.Getenv("JOBDIR_BENCH_UI_KEEP") != "" {
			b.Logf("kept the store in %s (JOBDIR_BENCH_UI_DIR=%[1]s measures it again)", e.dir)
		}
	}
	runUIBench(b, e)
}

// runUIBench serves each of the dashboard's requests through e's handler.
func runUIBench(b *testing.B, e uiBench) {
	for _, tc := range []struct {
		name, path string
		fragment   bool
		api        bool // a request of the HTTP API, with the bearer token
	}{
		{"overview", "/ui/", false, false},
		{"overview-live", "/ui/", true, false},
		{"jobs", "/ui/jobs", false, false},
		{"jobs-live", "/ui/jobs", true, false},
		{"jobs-next-page", "/ui/jobs?cursor=" + e.next, false, false},
		{"jobs-oldest", "/ui/jobs?order=oldest", false, false},
		{"jobs-failed", "/ui/jobs?state=failed", false, false},
		{"jobs-kind", "/ui/jobs?kind=report.build", false, false},
		{"jobs-key", "/ui/jobs?key=bench-4242", false, false},
		{"jobs-id-prefix", "/ui/jobs?id=" + e.prefix, false, false},
		{"job", "/ui/jobs/" + e.job, false, false},
		{"job-live", "/ui/jobs/" + e.job, true, false},
		{"api-stats", "/v1/stats", false, true},
		{"api-list", "/v1/jobs", false, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cpu0 := cpuTime()
			for b.Loop() {
				req := httptest.NewRequest("GET", tc.path, nil)
				h := http.Handler(e.ui)
				if tc.api {
					h = e.api
					req.Header.Set("Authorization", "Bearer "+testToken)
				} else {
					req.AddCookie(e.cookie)
				}
				if tc.fragment {
					req.Header.Set(webui.FragmentHeader, "1")
					req.Header.Set("Jobdir-UI", "1")
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", tc.path, w.Code, w.Body)
				}
			}
			// On a shared machine the wall time of a request says more
			// about the neighbours than about the request: its CPU time
			// is what it costs here.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}

}
