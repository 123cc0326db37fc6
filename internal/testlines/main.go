// Testlines turns the output of "go test -json" into a few lines a person
// can follow: one when a package's tests start, one when they end, the
// whole output of every test and package that failed, and, while packages
// run without a word, a line every half minute naming them. It exits 1 if a
// test, a package or a build failed, and 0 otherwise.
//
// Usage:
//
//	go test -json ./... | go run ./internal/testlines
//
// Lines on its input that are not JSON (the go command's own messages) are
// printed as they come. Use it with "set -o pipefail" so that a failure of
// go test that leaves no event still fails the pipeline.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// quietFor is how long the output may stay silent while packages run
// before a line says which ones still do.
const quietFor = 30 * time.Second

func main() {
	t := time.NewTicker(quietFor)
	defer t.Stop()
	if !filter(os.Stdin, os.Stdout, t.C) {
		os.Exit(1)
	}
}

// event is one record of "go test -json" (cmd/test2json).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output and build-fail
}

// progress is the state of one run of the filter.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	running map[string]time.Time        // package → when its tests started
	output  map[string]*strings.Builder // package or package+test → output so far
	quiet   bool                        // nothing printed since the last tick
	failed  bool
}

// filter copies the events read from r to w as described in the package
// doc, and reports whether everything passed. On each tick, if nothing was
// printed since the previous one, it names the packages still running.
func filter(r io.Reader, w io.Writer, tick <-chan time.Time) bool {
	p := &progress{w: w, running: map[string]time.Time{}, output: map[string]*strings.Builder{}}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case now := <-tick:
				p.tick(now)
			}
		}
	}()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	for sc.Scan() {
		p.line(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		p.printf("testlines: reading go test's output: %v\n", err)
		p.failed = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for pkg := range p.running {
		// go test ended (killed, or a -timeout panic it did not report as
		// an event) before this package did.
		fmt.Fprintf(w, "FAIL  %s (no result)\n", pkg)
		if b := p.output[pkg]; b != nil {
			fmt.Fprint(w, b.String())
		}
		p.failed = true
	}
	return !p.failed
}

func (p *progress) printf(format string, args ...any) {
	fmt.Fprintf(p.w, format, args...)
	p.quiet = false
}

func (p *progress) buffer(key string) *strings.Builder {
	b := p.output[key]
	if b == nil {
		b = &strings.Builder{}
		p.output[key] = b
	}
	return b
}

func (p *progress) line(l []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ev event
	if len(l) == 0 || l[0] != '{' || json.Unmarshal(l, &ev) != nil {
		p.printf("%s\n", l)
		return
	}
	key := ev.Package
	if ev.Test != "" {
		key += "\x00" + ev.Test
	}
	switch ev.Action {
	case "start":
		p.running[ev.Package] = ev.Time
		p.printf("start %s\n", ev.Package)
	case "output":
		p.buffer(key).WriteString(ev.Output)
	case "build-output":
		p.printf("%s", ev.Output)
	case "build-fail":
		p.printf("FAIL  %s [build failed]\n", ev.ImportPath)
		p.failed = true
	case "pass", "skip":
		if ev.Test != "" {
			delete(p.output, key)
			return
		}
		delete(p.running, ev.Package)
		if ev.Action == "skip" {
			p.printf("-     %s [no tests]\n", ev.Package)
		} else {
			p.printf("ok    %s %.1fs\n", ev.Package, ev.Elapsed)
		}
		p.forget(ev.Package)
	case "fail":
		p.failed = true
		if ev.Test != "" {
			p.printf("%s", p.buffer(key).String())
			delete(p.output, key)
			return
		}
		delete(p.running, ev.Package)
		p.printf("%s", p.buffer(key).String())
		p.printf("FAIL  %s %.1fs\n", ev.Package, ev.Elapsed)
		p.forget(ev.Package)
	}
}

// forget drops what is kept of a package that has ended.
func (p *progress) forget(pkg string) {
	for k := range p.output {
		if k == pkg || strings.HasPrefix(k, pkg+"\x00") {
			delete(p.output, k)
		}
	}
}

func (p *progress) tick(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.quiet || len(p.running) == 0 {
		p.quiet = true
		return
	}
	var names []string
	for pkg, start := range p.running {
		names = append(names, fmt.Sprintf("%s (%s)", pkg, now.Sub(start).Round(time.Second)))
	}
	slices.Sort(names)
	fmt.Fprintf(p.w, "      still running: %s\n", strings.Join(names, ", "))
}
