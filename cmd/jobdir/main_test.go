package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/filestore"
	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/internal/testproc"
	"github.com/jobdir/jobdir/jobstore"
)

// jobdirBin is the jobdir binary the end-to-end tests run, built once by
// TestMain.
var jobdirBin string

func TestMain(m *testing.M) {
	testproc.Main(map[string]testproc.Func{"dial": dialChild, "open-store": openStoreChild})
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "jobdir-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	jobdirBin = filepath.Join(tmp, "jobdir")
	// Built without -race even under go test -race: the in-process tests
	// cover the command's code with the race detector, and a race-enabled
	// binary starts ten times slower, which the many short-lived processes
	// of the end-to-end tests would pay for.
	build := exec.Command(goTool(), "build", "-o", jobdirBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build jobdir:", err)
		return 1
	}
	code := m.Run()
	stopBrowser()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// goTool returns the go command: the one in PATH, else the one of the
// GOROOT that built this test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(build.Default.GOROOT, "bin", "go")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// result is what one jobdir command did.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// storeArgs returns the flag that selects the store dir: --store for a
// URL, --dir for a directory.
func storeArgs(dir string) []string {
	if strings.Contains(dir, "://") {
		return []string{"--store", dir}
	}
	return []string{"--dir", dir}
}

// jd runs jobdir in-process on the store dir (a directory, or a store URL)
// with args.
func jd(t *testing.T, dir string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	if dir != "" {
		args = append(storeArgs(dir), args...)
	}
	code := run(t.Context(), args, strings.NewReader(""), &out, &errb)
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// jdOK runs jobdir and requires exit status 0.
func jdOK(t *testing.T, dir string, args ...string) result {
	t.Helper()
	r := jd(t, dir, args...)
	require.Equal(t, 0, r.code, "jobdir %s\n%s", strings.Join(args, " "), r)
	return r
}

// submit submits argv and returns the new job's ID.
func submit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	r := jdOK(t, dir, append([]string{"submit"}, args...)...)
	id := strings.TrimSpace(r.stdout)
	require.NoError(t, jobstore.ValidateID(id), "submit printed %q", r.stdout)
	require.Equal(t, id+"\n", r.stdout, "submit prints the ID alone")
	return id
}

// getJob returns the job as get --json prints it.
func getJob(t *testing.T, dir, id string) jobstore.Job {
	t.Helper()
	j := wireJob(t, jdOK(t, dir, "get", "--json", id).stdout)
	return j
}

// wireJob decodes out, a job as a --json printed it, strictly as the HTTP
// API's form of a job (httpapi.Job: no field it lacks, nothing after it),
// and returns the job it describes.
func wireJob(t *testing.T, out string) jobstore.Job {
	t.Helper()
	var w httpapi.Job
	decodeStrict(t, out, &w)
	j, err := w.ToJob()
	require.NoError(t, err)
	return j
}

// wireJobs is wireJob for a JSON array of jobs.
func wireJobs(t *testing.T, out string) []jobstore.Job {
	t.Helper()
	var ws []httpapi.Job
	decodeStrict(t, out, &ws)
	jobs := make([]jobstore.Job, len(ws))
	for i, w := range ws {
		var err error
		jobs[i], err = w.ToJob()
		require.NoError(t, err)
	}
	return jobs
}

// decodeStrict decodes the one JSON value out holds into v, refusing
// fields v has no place for.
func decodeStrict(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), "%s", out)
	require.False(t, dec.More(), "more than one JSON value in %s", out)
}

// onFileAndPostgres runs test on a new file store and on a new store in
// PostgreSQL, as parallel subtests "file" and "postgres".
func onFileAndPostgres(t *testing.T, test func(t *testing.T, store string)) {
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		test(t, newStoreDir(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		test(t, pgStore(t))
	})
}

// newStoreDir returns the directory of a new, empty store.
func newStoreDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "store")
	st, err := filestore.Open(t.Context(), dir, &filestore.Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	return dir
}
