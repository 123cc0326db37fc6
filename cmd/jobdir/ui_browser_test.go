package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/jobstore"
)

// The browser tests drive the dashboard of a real `jobdir serve` process
// in a real headless Chromium (Debian's chromium package), one browser for
// the whole package run and a fresh browser context (cookies and all) per
// test. Without a browser they are skipped, loudly, except in CI
// (CI=true), where they fail. A failed test saves a screenshot in its
// artifact directory (go test -artifacts keeps it).

// uiToken is the bearer token of the browser tests' servers.
const uiToken = "browser-test-token-0123456789"

var browserState struct {
	once   sync.Once
	ctx    context.Context // the browser's root context
	stop   func()
	err    error
	binary string
}

// chromiumPath returns the browser to run: $JOBDIR_CHROMIUM, else chromium
// or chromium-browser in PATH.
func chromiumPath() (string, error) {
	if p := os.Getenv("JOBDIR_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no chromium in PATH (install it: apt-get install -y chromium)")
}

func startBrowser() {
	path, err := chromiumPath()
	if err != nil {
		browserState.err = err
		return
	}
	browserState.binary = path
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.NoFirstRun,
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	// The first Do starts the browser; it lives as long as ctx.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		browserState.err = fmt.Errorf("start %s: %w", path, err)
		return
	}
	browserState.ctx = ctx
	browserState.stop = func() {
		cancel()
		cancelAlloc()
	}
}

// stopBrowser ends the browser, if a test started one.
func stopBrowser() {
	if browserState.stop != nil {
		browserState.stop()
	}
}

// tab returns a new tab in a fresh browser context (no cookies), closed
// when the test ends; a failed test first saves a screenshot of it.
func tab(t *testing.T) context.Context {
	t.Helper()
	browserState.once.Do(startBrowser)
	if err := browserState.err; err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the browser tests need Chromium, and CI must run them: %v", err)
		}
		t.Skipf("SKIPPED: NO BROWSER: %v; the dashboard's browser tests did not run", err)
	}
	ctx, cancel := chromedp.NewContext(browserState.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx), "open a tab")
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Logf("no screenshot: %v", err)
			return
		}
		path := filepath.Join(t.ArtifactDir(), "failure.png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Logf("no screenshot: %v", err)
			return
		}
		t.Logf("screenshot of the failure: %s", path)
	})
	tctx, tcancel := context.WithTimeout(ctx, 3*liveness)
	t.Cleanup(tcancel)
	return tctx
}

// do runs browser steps and fails the test on error.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// waitJS waits until the JavaScript expression is truthy.
func waitJS(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond),
		chromedp.WithPollingTimeout(liveness)))
	require.NoError(t, err, "waiting for %s", expr)
}

// evalJS evaluates a JavaScript expression.
func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, "evaluate %s", expr)
	return v
}

// textIs is the expression: the element's text is want.
func textIs(sel, want string) string {
	return fmt.Sprintf(`(document.querySelector(%q) || {}).textContent === %q`, sel, want)
}

// signIn signs in at base's dashboard, starting from /, and waits for the
// overview.
func signIn(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible("#token"))
	loc := evalJS[string](t, ctx, "location.pathname")
	require.Equal(t, "/ui/signin", loc, "/ redirects to the dashboard, which asks to sign in")
	do(t, ctx, chromedp.SendKeys("#token", uiToken), chromedp.Click("#signin"), chromedp.WaitVisible("#h-states"))
}

func uiServer(t *testing.T, dir, wd string) server {
	t.Helper()
	return startServer(t, dir, wd, uiToken, "--allow-kind", "exec")
}

func TestUIBrowserSignInLiveTableSignOut(t *testing.T) {
	dir, wd := newStoreDir(t), t.TempDir()
	srv := uiServer(t, dir, wd)
	ctx := tab(t)

	// A wrong token is refused.
	do(t, ctx, chromedp.Navigate(srv.url+"/ui/"), chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", "not-the-right-token-at-all"), chromedp.Click("#signin"), chromedp.WaitVisible("#signin-error"))

	signIn(t, ctx, srv.url)
	do(t, ctx, chromedp.Navigate(srv.url+"/ui/jobs"), chromedp.WaitVisible("table.jobs"))
	// A mark that a reload would wipe.
	evalJS[chromedp.Void](t, ctx, "window.notReloaded = true")
	id := submitBin(t, dir, wd, "--key", "from-the-cli", "--", "true")
	waitJS(t, ctx, fmt.Sprintf(`document.querySelector('tr[data-id="%s"]') !== null`, id))
	require.True(t, evalJS[bool](t, ctx, "window.notReloaded === true"), "the row came without a reload")
	require.Contains(t, evalJS[string](t, ctx, fmt.Sprintf(`document.querySelector('tr[data-id="%s"]').textContent`, id)), "from-the-cli")

	// The filters stay as they were through the live updates.
	do(t, ctx, chromedp.Navigate(srv.url+"/ui/jobs?key=nothing-has-this-key"), chromedp.WaitVisible("table.jobs"))
	require.Contains(t, evalJS[string](t, ctx, "document.querySelector('tbody').textContent"), "No job matches")
	other := submitBin(t, dir, wd, "--", "true")
	polls := evalJS[int](t, ctx, "Number(document.body.dataset.polls || 0)")
	waitJS(t, ctx, fmt.Sprintf("Number(document.body.dataset.polls || 0) >= %d", polls+2))
	require.Equal(t, "nothing-has-this-key", evalJS[string](t, ctx, "document.querySelector('#f-key').value"))
	require.False(t, evalJS[bool](t, ctx, fmt.Sprintf(`document.querySelector('tr[data-id="%s"]') !== null`, other)), "the filter holds")

	do(t, ctx, chromedp.Click("#signout"), chromedp.WaitVisible("#token"))
	do(t, ctx, chromedp.Navigate(srv.url+"/ui/jobs"), chromedp.WaitVisible("#token"))
	require.Equal(t, "/ui/signin", evalJS[string](t, ctx, "location.pathname"), "signed out, the pages ask to sign in again")
}

func TestUIBrowserCancelReachesAWorkerInAnotherProcess(t *testing.T) {
	dir, wd := newStoreDir(t), t.TempDir()
	srv := uiServer(t, dir, wd)
	worker := start(t, jobdirCmd(dir, wd, "work", "--concurrency", "1", "-q", "--kill-grace", "30s"))
	id := submitBin(t, dir, wd, "--", "sh", "-c", "echo $$ > pid.tmp && mv pid.tmp pid && exec sleep 300")
	waitForFile(t, filepath.Join(wd, "pid"))
	pid := readPID(t, filepath.Join(wd, "pid"))

	ctx := tab(t)
	signIn(t, ctx, srv.url)
	do(t, ctx, chromedp.Navigate(srv.url+"/ui/jobs/"+id), chromedp.WaitVisible("#state"))
	waitJS(t, ctx, textIs("#state", "running"))
	require.Contains(t, evalJS[string](t, ctx, "document.querySelector('#command').textContent"), "exec sleep 300")
	do(t, ctx, chromedp.Click("#cancel"))
	waitJS(t, ctx, textIs("#state", "canceled"))
	waitGone(t, pid)
	require.Equal(t, jobstore.StateCanceled, getJob(t, dir, id).State)
	require.Contains(t, evalJS[string](t, ctx, "document.querySelector('#status').textContent"), "Cancel requested")
	worker.stop(t)
}

func TestUIBrowserRetryAFailedJob(t *testing.T) {
	dir, wd := newStoreDir(t), t.TempDir()
	srv := uiServer(t, dir, wd)
	id := submitBin(t, dir, wd, "--max-attempts", "1", "--", "sh", "-c", "echo broken >&2; exit 3")
	r := runBin(t, dir, wd, "work", "--exit-when-idle", "-q")
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, jobstore.StateFailed, getJob(t, dir, id).State)

	ctx := tab(t)
	signIn(t, ctx, srv.url)
	do(t, ctx, chromedp.Navigate(srv.url+"/ui/jobs/"+id), chromedp.WaitVisible("#state"))
	require.Equal(t, "failed", evalJS[string](t, ctx, "document.querySelector('#state').textContent"))
	require.Contains(t, evalJS[string](t, ctx, "document.querySelector('#last-error').textContent"), "exit")
	do(t, ctx, chromedp.Click("#retry"))
	waitJS(t, ctx, textIs("#state", "queued"))
	j := getJob(t, dir, id)
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Equal(t, 2, j.MaxAttempts, "one more attempt allowed")
	require.True(t, evalJS[bool](t, ctx, "document.querySelector('#cancel').disabled === false"), "a queued job can be canceled")

	// Readable on a phone: nothing wider than the screen, on this page
	// and the table.
	do(t, ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	for _, path := range []string{"/ui/jobs/" + id, "/ui/jobs", "/ui/"} {
		do(t, ctx, chromedp.Navigate(srv.url+path), chromedp.WaitVisible("#main"))
		require.True(t, evalJS[bool](t, ctx, "document.documentElement.scrollWidth <= window.innerWidth"),
			"%s is %d pixels wide on a 390-pixel screen", path, evalJS[int](t, ctx, "document.documentElement.scrollWidth"))
	}
}

func TestUIBrowserLogFollowsTheProgram(t *testing.T) {
	dir, wd := newStoreDir(t), t.TempDir()
	srv := uiServer(t, dir, wd)
	worker := start(t, jobdirCmd(dir, wd, "work", "--concurrency", "1", "-q"))
	id := submitBin(t, dir, wd, "--", "sh", "-c",
		"echo first line '<b>not bold</b>'; while [ ! -e "+filepath.Join(wd, "go-on")+" ]; do sleep 0.05; done; echo second line")

	ctx := tab(t)
	signIn(t, ctx, srv.url)
	do(t, ctx, chromedp.Navigate(srv.url+"/ui/jobs/"+id), chromedp.WaitVisible("#log"))
	waitJS(t, ctx, `document.querySelector('#log').textContent.includes('first line <b>not bold</b>')`)
	require.Zero(t, evalJS[int](t, ctx, "document.querySelectorAll('#log b').length"), "the log is text, not markup")
	require.True(t, evalJS[bool](t, ctx, "document.querySelector('#log').getBoundingClientRect().top + 100 < window.innerHeight"),
		"a running job's log is on the first screen of its page, above its fields")
	require.False(t, evalJS[bool](t, ctx, `document.querySelector('#log').textContent.split('\n').includes('second line')`),
		"the program has not written its second line yet")
	require.NoError(t, os.WriteFile(filepath.Join(wd, "go-on"), nil, 0o600))
	waitJS(t, ctx, `document.querySelector('#log').textContent.split('\n').includes('second line')`)
	waitJS(t, ctx, `document.querySelector('#log-status').textContent.includes('End of the log')`)
	waitJS(t, ctx, textIs("#state", "succeeded"))
	// The log comes right after the summary, before the details, which
	// the polls keep up to date too: the finished attempt shows, once,
	// and the log stays as it was.
	require.True(t, evalJS[bool](t, ctx,
		`(document.querySelector('#h-log').compareDocumentPosition(document.querySelector('#h-fields')) & Node.DOCUMENT_POSITION_FOLLOWING) !== 0`),
		"the log is above the fields")
	waitJS(t, ctx, `document.querySelector('[data-live-part="details"]').textContent.includes('succeeded')`)
	require.Equal(t, 1, evalJS[int](t, ctx, "document.querySelectorAll('#h-attempts').length"))
	require.Zero(t, evalJS[int](t, ctx, "document.querySelectorAll('template').length"), "no part left in a template")
	require.True(t, evalJS[bool](t, ctx, `document.querySelector('#log').textContent.split('\n').includes('second line')`))
	worker.stop(t)
}

func TestUIBrowserCrossSitePostIsRefused(t *testing.T) {
	dir, wd := newStoreDir(t), t.TempDir()
	srv := uiServer(t, dir, wd)
	id := submitBin(t, dir, wd, "--delay", "1h", "--", "true")
	port := strings.TrimPrefix(srv.url, "http://127.0.0.1:")
	_, err := strconv.Atoi(port)
	require.NoError(t, err)

	// A page of another site (localhost is not 127.0.0.1) that posts a
	// cancel to the dashboard as soon as it loads.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/ui/jobs/%s/cancel"><input name="csrf" value="guess"></form>
<script>document.getElementById('f').submit()</script>`, srv.url, id)
	}))
	defer evil.Close()
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)

	ctx := tab(t)
	signIn(t, ctx, srv.url)
	do(t, ctx, chromedp.Navigate(evilURL))
	waitJS(t, ctx, `location.port === `+strconv.Quote(port)+` && document.readyState === 'complete'`)
	body := evalJS[string](t, ctx, "document.body.textContent")
	require.Contains(t, body, "cross-site request refused")
	require.Equal(t, jobstore.StateQueued, getJob(t, dir, id).State, "the job was not canceled")
}

// TestUIScreenshotsForDocs writes docs/ui-overview.png and docs/ui-job.png,
// the README's pictures of the dashboard, from a store with a mix of jobs.
// It runs only when asked:
//
//	JOBDIR_UI_SCREENSHOTS=1 go test -run TestUIScreenshotsForDocs ./cmd/jobdir
func TestUIScreenshotsForDocs(t *testing.T) {
	if os.Getenv("JOBDIR_UI_SCREENSHOTS") == "" {
		t.Skip("set JOBDIR_UI_SCREENSHOTS=1 to write docs/ui-*.png")
	}
	dir, wd := newStoreDir(t), t.TempDir()
	srv := uiServer(t, dir, wd)
	var quick []string
	for i := range 12 {
		quick = append(quick, submitBin(t, dir, wd, "--key", fmt.Sprintf("invoice-%d", 1040+i), "--", "sh", "-c", "echo sent invoice"))
	}
	for i := range 3 {
		quick = append(quick, submitBin(t, dir, wd, "--key", fmt.Sprintf("sync-%d", i), "--max-attempts", "1", "--",
			"sh", "-c", "echo 'upstream said 503' >&2; exit 2"))
	}
	submitBin(t, dir, wd, "--key", "nightly-report", "--delay", "5m", "--", "make", "report")
	worker := start(t, jobdirCmd(dir, wd, "work", "--concurrency", "2", "-q"))
	for _, id := range quick {
		runBin(t, dir, wd, "wait", id)
	}
	build := submitBin(t, dir, wd, "--key", "build-42", "--timeout", "10m", "--", "sh", "-c",
		"echo 'compiling 12 packages'; echo 'ok   jobdir/jobstore 0.41s'; echo 'ok   jobdir/filestore 3.20s'; echo 'running the integration tests…'; exec sleep 300")
	other := submitBin(t, dir, wd, "--key", "build-43", "--", "sh", "-c", "exec sleep 300")

	ctx := tab(t)
	signIn(t, ctx, srv.url)
	waitJS(t, ctx, `document.querySelectorAll('#h-running ~ .scroll tbody tr').length === 2`)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "ui-overview.png"), png, 0o644))

	do(t, ctx, chromedp.Navigate(srv.url+"/ui/jobs/"+build), chromedp.WaitVisible("#log"))
	waitJS(t, ctx, `document.querySelector('#log').textContent.includes('integration tests')`)
	png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "ui-job.png"), png, 0o644))

	do(t, ctx, chromedp.Navigate(srv.url+"/ui/workers"), chromedp.WaitVisible("#workers"))
	png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "ui-workers.png"), png, 0o644))

	runBin(t, dir, wd, "queue", "pause", "emails")
	for i := range 3 {
		submitBin(t, dir, wd, "--queue", "emails", "--key", fmt.Sprintf("digest-%d", i), "--", "sh", "-c", "echo sent digest")
	}
	submitBin(t, dir, wd, "--queue", "reports", "--delay", "1h", "--", "make", "report")
	runBin(t, dir, wd, "queue", "limit", "reports", "2")
	runBin(t, dir, wd, "queue", "limit", "emails", "--per-partition", "1", "--rate", "100/1m")
	do(t, ctx, chromedp.Navigate(srv.url+"/ui/queues"), chromedp.WaitVisible("#queues"))
	png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "ui-queues.png"), png, 0o644))
	runBin(t, dir, wd, "schedule", "add", "nightly-report", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--max-attempts", "1", "--", "make", "report")
	runBin(t, dir, wd, "schedule", "add", "heartbeat", "--cron", "@every 1s", "--overlap", "skip", "--", "sh", "-c", "echo alive")
	runBin(t, dir, wd, "schedule", "add", "invoices", "--cron", "*/15 9-17 * * 1-5", "--tz", "America/New_York", "--catch-up", "all", "--", "./send-invoices.sh")
	runBin(t, dir, wd, "schedule", "pause", "invoices")
	time.Sleep(2 * time.Second) // a tick or two of heartbeat
	do(t, ctx, chromedp.Navigate(srv.url+"/ui/schedules"), chromedp.WaitVisible("#schedules"))
	png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "ui-schedules.png"), png, 0o644))
	runBin(t, dir, wd, "schedule", "rm", "heartbeat")
	runBin(t, dir, wd, "cancel", build)
	runBin(t, dir, wd, "cancel", other)
	worker.stop(t)
}

// TestServeMountsTheDashboard checks the wiring, without a browser: / goes
// to /ui/, the dashboard signs in with serve's token, --secure-cookie marks
// the cookie Secure, and the API is still served beside it.
func TestServeMountsTheDashboard(t *testing.T) {
	dir, wd := newStoreDir(t), t.TempDir()
	srv := startServer(t, dir, wd, uiToken, "--secure-cookie")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(srv.url + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Equal(t, "/ui/", resp.Header.Get("Location"))

	resp, err = client.PostForm(srv.url+"/ui/signin", map[string][]string{"token": {uiToken}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	cookie := resp.Header.Get("Set-Cookie")
	require.Contains(t, cookie, "; Secure")
	require.Contains(t, cookie, "HttpOnly")

	var stats jobstore.Stats
	require.Equal(t, http.StatusOK, call(t, "GET", srv.url+"/v1/stats", uiToken, nil, &stats))
	require.Equal(t, http.StatusUnauthorized, call(t, "GET", srv.url+"/v1/stats", "", nil, nil))
}

// axePath is axe-core's script, which .ci/run installs from npm into
// bin/node (the version the Makefile's AXE_VERSION names).
var axePath = filepath.Join("..", "..", "bin", "node", "node_modules", "axe-core", "axe.min.js")

// TestUIBrowserAccessibility runs axe-core's WCAG 2 A and AA rules on every
// page of the dashboard (the sign-in page, the overview, the jobs table,
// the pages of a running exec job with its log, of a failed job and of a
// job that is not there), at a desktop's width and a phone's, each in the
// light and the dark color scheme: none may report a violation. It is
// skipped without axe-core, and fails without it under CI=true.
func TestUIBrowserAccessibility(t *testing.T) {
	axe, err := os.ReadFile(axePath)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("axe-core is not installed, and CI=true: %v (npm install --prefix bin/node axe-core)", err)
		}
		t.Skipf("SKIPPED: NO axe-core: %v (npm install --prefix bin/node axe-core); the accessibility check did not run", err)
	}
	dir, wd := newStoreDir(t), t.TempDir()
	srv := uiServer(t, dir, wd)
	failed := submitBin(t, dir, wd, "--key", "sync-7", "--max-attempts", "1", "--tag", "team=crm", "--meta", "ticket=OPS-7", "--", "sh", "-c", "echo 'upstream said 503' >&2; exit 2")
	r := runBin(t, dir, wd, "work", "--exit-when-idle", "-q")
	require.Equal(t, 0, r.code, "%s", r)
	submitBin(t, dir, wd, "--key", "nightly", "--delay", "1h", "--", "make", "report")
	worker := start(t, jobdirCmd(dir, wd, "work", "--concurrency", "1", "-q"))
	running := submitBin(t, dir, wd, "--key", "build-42", "--", "sh", "-c", "echo compiling; exec sleep 300")
	runBin(t, dir, wd, "queue", "pause", "emails")
	submitBin(t, dir, wd, "--queue", "emails", "--", "sh", "-c", "echo sent")
	runBin(t, dir, wd, "schedule", "add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--", "make", "report")
	runBin(t, dir, wd, "schedule", "add", "probe", "--cron", "@every 1h", "--overlap", "skip", "--", "./probe.sh")
	runBin(t, dir, wd, "schedule", "pause", "probe")
	t.Cleanup(func() {
		runBin(t, dir, wd, "cancel", running)
		worker.stop(t)
	})

	ctx := tab(t)
	pages := []struct{ path, ready string }{
		{"/ui/jobs", "table.jobs"},
		{"/ui/", "#h-states"},
		{"/ui/jobs/" + running, "#log"},
		{"/ui/jobs/" + failed, "#last-error"},
		{"/ui/jobs/00000000000000000000000000", "#main"},
		{"/ui/workers", "#workers"},
		{"/ui/queues", "#queues"},
		{"/ui/schedules", "#schedules"},
	}
	for _, scheme := range []string{"light", "dark"} {
		for _, width := range []int64{1280, 390} {
			view := chromedp.EmulateViewport(width, 844)
			if width < 640 {
				view = chromedp.EmulateViewport(width, 844, chromedp.EmulateMobile)
			}
			media := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
					Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
				return err
			})
			do(t, ctx, view, media)
			// The sign-in page first, signed out; then the others.
			do(t, ctx, chromedp.Navigate(srv.url+"/ui/signin"), chromedp.WaitVisible("#token"))
			checkAxe(t, ctx, axe, fmt.Sprintf("/ui/signin (%s, %d px)", scheme, width))
			do(t, ctx, chromedp.SendKeys("#token", uiToken), chromedp.Click("#signin"), chromedp.WaitVisible("#h-states"))
			require.Equal(t, scheme == "dark", evalJS[bool](t, ctx, `matchMedia('(prefers-color-scheme: dark)').matches`))
			for _, p := range pages {
				do(t, ctx, chromedp.Navigate(srv.url+p.path), chromedp.WaitVisible(p.ready))
				checkAxe(t, ctx, axe, fmt.Sprintf("%s (%s, %d px)", p.path, scheme, width))
			}
			do(t, ctx, chromedp.Navigate(srv.url+"/ui/"), chromedp.WaitVisible("#signout"), chromedp.Click("#signout"), chromedp.WaitVisible("#token"))
		}
	}
}

// checkAxe runs axe-core (the script axe) on the page in ctx and fails the
// test with each violation it reports on page.
func checkAxe(t *testing.T, ctx context.Context, axe []byte, page string) {
	t.Helper()
	if !evalJS[bool](t, ctx, "typeof window.axe === 'object'") {
		evalJS[chromedp.Void](t, ctx, string(axe)+";undefined")
	}
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](`axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})
		.then(r => JSON.stringify(r.violations.map(v => ({id: v.id, help: v.help, nodes: v.nodes.map(n => n.target.join(' ') + ': ' + n.failureSummary)}))))`,
		chromedp.EvalAwaitPromise))
	require.NoError(t, err, "axe on %s", page)
	var violations []struct {
		ID, Help string
		Nodes    []string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &violations))
	for _, v := range violations {
		t.Errorf("%s: axe: %s (%s):\n  %s", page, v.ID, v.Help, strings.Join(v.Nodes, "\n  "))
	}
}

// TestUIBrowserActOnSelectedJobs: rows checked in the jobs table stay
// checked through the live updates, and the action on the selected jobs
// cancels those and no other; the delete of the selected jobs deletes the
// finished ones among them, with their logs, and no other.
func TestUIBrowserActOnSelectedJobs(t *testing.T) {
	dir, wd := newStoreDir(t), t.TempDir()
	srv := uiServer(t, dir, wd)
	var ids []string
	for range 3 {
		ids = append(ids, submitBin(t, dir, wd, "--delay", "1h", "--", "true"))
	}
	ctx := tab(t)
	signIn(t, ctx, srv.url)
	do(t, ctx, chromedp.Navigate(srv.url+"/ui/jobs"), chromedp.WaitVisible("table.jobs"))
	require.True(t, evalJS[bool](t, ctx, "document.querySelector('#selected-cancel').disabled"), "nothing selected yet")
	for _, id := range ids[:2] {
		do(t, ctx, chromedp.Click(fmt.Sprintf(`input.select[value="%s"]`, id)))
	}
	require.False(t, evalJS[bool](t, ctx, "document.querySelector('#selected-cancel').disabled"))
	polls := evalJS[int](t, ctx, "Number(document.body.dataset.polls || 0)")
	submitBin(t, dir, wd, "--", "true") // a change, so that the poll swaps the table
	waitJS(t, ctx, fmt.Sprintf("Number(document.body.dataset.polls || 0) >= %d && document.querySelectorAll('tbody tr').length === 4", polls+1))
	require.Equal(t, 2, evalJS[int](t, ctx, "document.querySelectorAll('input.select:checked').length"), "still selected after the swap")

	evalJS[chromedp.Void](t, ctx, "window.confirm = () => true")
	do(t, ctx, chromedp.Click("#selected-cancel"))
	waitJS(t, ctx, `document.querySelector('#status').textContent.includes('Canceled 2 jobs.')`)
	require.Equal(t, jobstore.StateCanceled, getJob(t, dir, ids[0]).State)
	require.Equal(t, jobstore.StateCanceled, getJob(t, dir, ids[1]).State)
	require.Equal(t, jobstore.StateQueued, getJob(t, dir, ids[2]).State)

	// Delete the selected finished jobs: of a canceled job (with a log)
	// and a queued one, only the canceled one goes, with its log.
	logFile := filepath.Join(dir, logsDirName, ids[0]+".log")
	require.NoError(t, os.MkdirAll(filepath.Dir(logFile), 0o700))
	require.NoError(t, os.WriteFile(logFile, []byte("output\n"), 0o600))
	evalJS[chromedp.Void](t, ctx, "document.querySelectorAll('input.select:checked').forEach(c => c.click())")
	for _, id := range []string{ids[0], ids[2]} {
		do(t, ctx, chromedp.Click(fmt.Sprintf(`input.select[value="%s"]`, id)))
	}
	evalJS[chromedp.Void](t, ctx, "window.confirm = (q) => { window.asked = q; return true }")
	do(t, ctx, chromedp.Click("#selected-delete"))
	waitJS(t, ctx, `document.querySelector('#status').textContent.includes('Deleted 1 jobs.')`)
	require.Equal(t, "Delete 1 selected finished jobs for good, with their logs?", evalJS[string](t, ctx, "window.asked"))
	r := runBin(t, dir, wd, "get", ids[0])
	require.Equal(t, exitError, r.code, "the deleted job is still there: %s", r)
	require.NoFileExists(t, logFile, "the deleted job's log is still there")
	require.Equal(t, jobstore.StateQueued, getJob(t, dir, ids[2]).State)
	require.Equal(t, jobstore.StateCanceled, getJob(t, dir, ids[1]).State, "a job that was not selected")
}
