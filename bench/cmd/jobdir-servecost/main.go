// Command jobdir-servecost measures what hostile HTTP requests cost a
// `jobdir serve` process: its peak resident memory under the amplification
// requests of issue 12 (large list pages over 1 MiB payloads, concurrent
// 60 MiB batches, a kind filter that matches nothing) and the CPU and wall
// time of 1,000 GET /healthz calls on a store of 50,000 jobs.
//
// It treats the server as a black box: it starts the given jobdir binary
// with `serve`, talks to it over HTTP only, and reads the server's peak RSS
// (VmHWM) and CPU time from /proc. So the same command measures any two
// builds side by side, before and after a change:
//
//	go build -o /tmp/jobdir-new ./cmd/jobdir
//	cd bench && go run ./cmd/jobdir-servecost -jobdir /tmp/jobdir-new -dir /tmp/servecost
//
// Each scenario runs against a fresh server process, so each peak RSS is
// that scenario's alone. The stores are built once in -dir and reused by
// later runs (delete -dir to rebuild them). Linux only (it reads /proc).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// token is the bearer token the measured servers accept.
const token = "servecost-token-0123456789abcdef"

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "jobdir-servecost:", err)
		os.Exit(1)
	}
}

type config struct {
	bin       string
	dir       string
	bigJobs   int
	smallJobs int
	health    int
	only      string
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("jobdir-servecost", flag.ContinueOnError)
	var c config
	fs.StringVar(&c.bin, "jobdir", "", "the jobdir binary to measure (required)")
	fs.StringVar(&c.dir, "dir", filepath.Join(os.TempDir(), "jobdir-servecost"), "directory for the stores (kept between runs)")
	fs.IntVar(&c.bigJobs, "big-jobs", 1000, "jobs with 1 MiB payloads in the amplification store")
	fs.IntVar(&c.smallJobs, "small-jobs", 50000, "jobs with small payloads in the health store")
	fs.IntVar(&c.health, "health-calls", 1000, "GET /healthz calls per health scenario")
	fs.StringVar(&c.only, "only", "list1,list4,batch8,nomatch,health", "comma-separated scenarios to run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.bin == "" {
		return errors.New("-jobdir is required")
	}
	bin, err := filepath.Abs(c.bin)
	if err != nil {
		return err
	}
	c.bin = bin
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	tokenFile := filepath.Join(c.dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, s := range strings.Split(c.only, ",") {
		want[strings.TrimSpace(s)] = true
	}
	fmt.Fprintf(out, "binary: %s\n", c.bin)

	big := filepath.Join(c.dir, "big")
	if want["list1"] || want["list4"] || want["nomatch"] {
		if err := seed(ctx, c, big, c.bigJobs, 1<<20-64, 60); err != nil {
			return fmt.Errorf("seed big store: %w", err)
		}
	}
	if want["list1"] {
		if err := scenario(ctx, c, big, out, "list1", "1 x GET /v1/jobs?limit=1000 over 1 MiB payloads", func(base string) string {
			return summarize(parallel(1, func(int) result { return get(base + "/v1/jobs?limit=1000") }))
		}); err != nil {
			return err
		}
	}
	if want["list4"] {
		if err := scenario(ctx, c, big, out, "list4", "4 x GET /v1/jobs?limit=1000 at once over 1 MiB payloads", func(base string) string {
			return summarize(parallel(4, func(int) result { return get(base + "/v1/jobs?limit=1000") }))
		}); err != nil {
			return err
		}
	}
	if want["nomatch"] {
		if err := scenario(ctx, c, big, out, "nomatch", "GET /v1/jobs?kind=nomatch&limit=1, twice in a row", func(base string) string {
			a := get(base + "/v1/jobs?kind=nomatch&limit=1")
			b := get(base + "/v1/jobs?kind=nomatch&limit=1")
			return fmt.Sprintf("first %s; second %s", a, b)
		}); err != nil {
			return err
		}
	}
	if want["batch8"] {
		// On a store of its own, emptied each run: the batches add jobs.
		scratch := filepath.Join(c.dir, "batch")
		if err := os.RemoveAll(scratch); err != nil {
			return err
		}
		body := batchBody(60, 1<<20-64)
		if err := scenario(ctx, c, scratch, out, "batch8", fmt.Sprintf("8 x POST /v1/jobs/batch of %.1f MiB at once", float64(len(body))/(1<<20)), func(base string) string {
			return summarize(parallel(8, func(int) result { return post(base+"/v1/jobs/batch", body) }))
		}); err != nil {
			return err
		}
	}
	if want["health"] {
		small := filepath.Join(c.dir, "small")
		if err := seed(ctx, c, small, c.smallJobs, 16, 10000); err != nil {
			return fmt.Errorf("seed small store: %w", err)
		}
		for _, clients := range []int{1, 32} {
			name := fmt.Sprintf("health%d", clients)
			if err := scenario(ctx, c, small, out, name, fmt.Sprintf("%d x GET /healthz (no token) from %d clients, %d jobs in the store", c.health, clients, c.smallJobs), func(base string) string {
				per := c.health / clients
				rs := parallel(clients, func(int) result {
					var r result
					for range per {
						one := get(base + "/healthz")
						r.n++
						r.bytes += one.bytes
						if one.err != nil {
							r.err = one.err
						}
						r.status = one.status
					}
					return r
				})
				return summarize(rs)
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// scenario starts a server on dir, runs f against it, and prints f's
// summary with the wall time, the server's CPU time and its peak RSS.
func scenario(ctx context.Context, c config, dir string, out io.Writer, name, what string, f func(base string) string) error {
	srv, base, err := startServer(ctx, c, dir)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer srv.stop()
	cpu0, err := cpuTime(srv.pid())
	if err != nil {
		return err
	}
	start := time.Now()
	summary := f(base)
	wall := time.Since(start)
	cpu1, err := cpuTime(srv.pid())
	if err != nil {
		return err
	}
	hwm, err := peakRSS(srv.pid())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%-8s %s\n         wall %.2fs, server CPU %.2fs, server peak RSS %d MiB; %s\n",
		name, what, wall.Seconds(), (cpu1 - cpu0).Seconds(), hwm>>20, summary)
	return nil
}

type server struct {
	cmd *exec.Cmd
}

func (s *server) pid() int { return s.cmd.Process.Pid }

func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// startServer runs `jobdir serve` on dir and returns it with its base URL.
func startServer(ctx context.Context, c config, dir string) (*server, string, error) {
	cmd := exec.CommandContext(ctx, c.bin, "--dir", dir, "serve", "--addr", "127.0.0.1:0", "--token-file", filepath.Join(c.dir, "token"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	srv := &server{cmd: cmd}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if addr, ok := strings.CutPrefix(lines.Text(), "listening on "); ok {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return srv, strings.TrimSpace(addr), nil
		}
	}
	srv.stop()
	return nil, "", fmt.Errorf("server did not start: %s", stderr.String())
}

// seed fills the store in dir with n jobs of kind "noop" whose payloads are
// JSON strings of size bytes, per batches of batch, unless it holds them.
func seed(ctx context.Context, c config, dir string, n, size, batch int) error {
	marker := filepath.Join(dir, ".servecost-seeded")
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	srv, base, err := startServer(ctx, c, dir)
	if err != nil {
		return err
	}
	defer srv.stop()
	for done := 0; done < n; {
		k := min(batch, n-done)
		r := post(base+"/v1/jobs/batch", batchBody(k, size))
		if r.err != nil || r.status != http.StatusOK {
			return fmt.Errorf("batch: %s", r)
		}
		done += k
	}
	return os.WriteFile(marker, nil, 0o600)
}

// batchBody returns a batch submit body of n noop jobs with payloads of
// size bytes.
func batchBody(n, size int) []byte {
	payload := `"` + strings.Repeat("x", size-2) + `"`
	var b bytes.Buffer
	b.WriteString(`{"jobs":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"kind":"noop","payload":`)
		b.WriteString(payload)
		b.WriteByte('}')
	}
	b.WriteString("]}")
	return b.Bytes()
}

// result is what one or more requests got.
type result struct {
	n      int
	status int
	bytes  int64
	dur    time.Duration
	jobs   int
	err    error
}

func (r result) String() string {
	if r.err != nil {
		return fmt.Sprintf("status %d after %.2fs, %d bytes, error: %v", r.status, r.dur.Seconds(), r.bytes, r.err)
	}
	s := fmt.Sprintf("status %d in %.2fs, %d bytes", r.status, r.dur.Seconds(), r.bytes)
	if r.jobs > 0 {
		s += fmt.Sprintf(", %d jobs", r.jobs)
	}
	return s
}

var client = &http.Client{Timeout: 5 * time.Minute}

func get(url string) result               { return do(http.MethodGet, url, nil) }
func post(url string, body []byte) result { return do(http.MethodPost, url, body) }

func do(method, url string, body []byte) result {
	start := time.Now()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return result{n: 1, err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return result{n: 1, err: err, dur: time.Since(start)}
	}
	defer resp.Body.Close()
	var page struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	data, err := io.ReadAll(resp.Body)
	r := result{n: 1, status: resp.StatusCode, bytes: int64(len(data)), dur: time.Since(start), err: err}
	if err == nil && json.Unmarshal(data, &page) == nil {
		r.jobs = len(page.Jobs)
	}
	return r
}

// parallel runs f in n goroutines at once and returns their results.
func parallel(n int, f func(i int) result) []result {
	rs := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { rs[i] = f(i) })
	}
	wg.Wait()
	return rs
}

func summarize(rs []result) string {
	if len(rs) == 1 {
		return rs[0].String()
	}
	statuses := map[int]int{}
	var errs []string
	for _, r := range rs {
		statuses[r.status] += r.n
		if r.err != nil {
			errs = append(errs, r.err.Error())
		}
	}
	var parts []string
	for st, k := range statuses {
		parts = append(parts, fmt.Sprintf("%d x status %d", k, st))
	}
	s := strings.Join(parts, ", ")
	for i, r := range rs {
		if len(rs) <= 8 {
			s += fmt.Sprintf("\n           [%d] %s", i, r)
		}
	}
	if len(errs) > 0 {
		s += fmt.Sprintf("\n           %d errors, first: %s", len(errs), errs[0])
	}
	return s
}

// peakRSS returns the VmHWM of process pid in bytes.
func peakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// cpuTime returns the user plus system CPU time of process pid.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	rest := string(data[bytes.LastIndexByte(data, ')')+2:])
	f := strings.Fields(rest)
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / hz, nil
}
