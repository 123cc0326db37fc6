package main

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// unitsDir holds the systemd units of deploy/systemd.
const unitsDir = "../../deploy/systemd"

// unitBinary is the path of jobdir in the units' ExecStart= lines.
const unitBinary = "/usr/local/bin/jobdir"

// unitFiles are the units of deploy/systemd, and the instance of each
// template that systemd-analyze verify loads.
var unitFiles = map[string]string{
	"jobdir-work@.service": "jobdir-work@1.service",
	"jobdir-serve.service": "jobdir-serve.service",
	"jobdir-prune.service": "jobdir-prune.service",
	"jobdir-prune.timer":   "jobdir-prune.timer",
}

// systemdAnalyze returns the path of systemd-analyze, or skips the test.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("systemd units are checked on Linux")
	}
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the check of deploy/systemd needs systemd-analyze (Debian: apt-get install systemd), and CI must run it: %v", err)
		}
		t.Skip("SKIPPED: NO SYSTEMD-ANALYZE (Debian: apt-get install systemd): the units of deploy/systemd are not checked")
	}
	return p
}

// verifyUnits copies the units into a directory of their own with
// ExecStart= naming the jobdir built for the tests (systemd-analyze verify
// requires the program to exist), changed by edit if not nil, and returns
// what systemd-analyze verify printed and its error.
func verifyUnits(t *testing.T, analyze string, edit func(name, text string) string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	var args []string
	for name, instance := range unitFiles {
		b, err := os.ReadFile(filepath.Join(unitsDir, name))
		require.NoError(t, err)
		text := strings.ReplaceAll(string(b), unitBinary, jobdirBin)
		if edit != nil {
			text = edit(name, text)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
		args = append(args, filepath.Join(dir, instance))
	}
	cmd := exec.Command(analyze, append([]string{"verify", "--man=no"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestUnitsVerify: systemd-analyze verify finds nothing to say about the
// units of deploy/systemd. It exits 0 on many warnings (an unknown key, a
// value it cannot parse, both then ignored), so any output fails the test;
// the second case checks that such a warning is caught.
func TestUnitsVerify(t *testing.T) {
	analyze := systemdAnalyze(t)
	out, err := verifyUnits(t, analyze, nil)
	require.NoError(t, err, "systemd-analyze verify:\n%s", out)
	require.Empty(t, out, "systemd-analyze verify warns")
	t.Logf("systemd-analyze verify %s: no warning", strings.Join(slices.Sorted(maps.Keys(unitFiles)), " "))

	t.Run("a mistake is caught", func(t *testing.T) {
		out, err := verifyUnits(t, analyze, func(name, text string) string {
			if name == "jobdir-work@.service" {
				text = strings.Replace(text, "ProtectHome=yes", "ProtectHome=maybe", 1)
			}
			return text
		})
		require.NoError(t, err, "systemd-analyze verify exits 0 on a value it ignores")
		require.Contains(t, out, "maybe", "systemd-analyze verify says nothing of a value it cannot parse")
	})
}

// TestUnitsSysusers: the sysusers.d snippet makes the system user jobdir,
// whose home is the state directory of the units.
func TestUnitsSysusers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("systemd units are checked on Linux")
	}
	sysusers, err := exec.LookPath("systemd-sysusers")
	if err != nil {
		t.Skip("systemd-sysusers is not installed (Debian: apt-get install systemd)")
	}
	if os.Geteuid() != 0 {
		t.Skip("systemd-sysusers --root needs root to write a passwd file of its own")
	}
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, "etc"), 0o755))
	conf, err := filepath.Abs(filepath.Join(unitsDir, "jobdir.conf"))
	require.NoError(t, err)
	out, err := exec.Command(sysusers, "--root="+root, conf).CombinedOutput()
	require.NoError(t, err, "%s", out)
	passwd, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	require.NoError(t, err)
	var line string
	for l := range strings.Lines(string(passwd)) {
		if strings.HasPrefix(l, "jobdir:") {
			line = strings.TrimSpace(l)
		}
	}
	f := strings.Split(line, ":")
	require.Len(t, f, 7, "no user jobdir in %q", passwd)
	uid, err := strconv.Atoi(f[2])
	require.NoError(t, err)
	require.Less(t, uid, 1000, "jobdir is a system user")
	require.Equal(t, "/var/lib/jobdir", f[5], "its home is the units' StateDirectory=")
	group, err := os.ReadFile(filepath.Join(root, "etc", "group"))
	require.NoError(t, err)
	require.Contains(t, string(group), "jobdir:x:"+f[3]+":", "its group is jobdir")
}

// unit is the [Service] settings of a unit file, each key's values in order.
type unit map[string][]string

// readUnit reads the [Service] section of a unit of deploy/systemd.
func readUnit(t *testing.T, name string) unit {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(unitsDir, name))
	require.NoError(t, err)
	u := unit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = line
		case section == "[Service]":
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "%s: %q is not KEY=VALUE", name, line)
			u[k] = append(u[k], v)
		}
	}
	require.NoError(t, sc.Err())
	return u
}

// last is the value of key that counts, the last one, or "".
func (u unit) last(key string) string {
	if v := u[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// parseTimespan reads a systemd time span such as "30", "30s", "1min 30s"
// (a plain number is seconds).
func parseTimespan(t *testing.T, s string) time.Duration {
	t.Helper()
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second
	}
	r := strings.NewReplacer(" ", "", "min", "m", "sec", "s", "hr", "h")
	d, err := time.ParseDuration(r.Replace(s))
	require.NoError(t, err, "time span %q", s)
	return d
}

// commandGrace parses the ExecStart= of u as the jobdir command line it is
// and returns the shutdown and kill grace it gets: the flags' defaults
// unless the line sets them.
func commandGrace(t *testing.T, u unit) (shutdown, kill time.Duration) {
	t.Helper()
	argv := strings.Fields(u.last("ExecStart"))
	require.NotEmpty(t, argv)
	require.Equal(t, unitBinary, argv[0])
	a := &app{}
	cmd, rest, err := a.rootCommand().Find(argv[1:])
	require.NoError(t, err)
	require.NoError(t, cmd.ParseFlags(rest))
	get := func(name string) time.Duration {
		f := cmd.Flags().Lookup(name)
		require.NotNil(t, f, "jobdir %s has no --%s", cmd.Name(), name)
		return time.Duration(*f.Value.(*durationValue))
	}
	return get("shutdown-grace"), get("kill-grace")
}

// stopMargin is the time a stopping worker has, past its graces, to reap
// its jobs' supervisors and record the jobs queued again.
const stopMargin = 5 * time.Second

// TestUnitsStopTimeoutCoversGrace: systemd gives a stopping worker more
// than the shutdown grace and the kill grace that jobdir work gets (its
// flags' defaults, or the unit's own), and the server that and its HTTP
// shutdown too, so systemd's SIGKILL never cuts a graceful stop short; and
// the SIGTERM goes to jobdir alone (KillMode=mixed), which stops its jobs
// itself after the grace.
func TestUnitsStopTimeoutCoversGrace(t *testing.T) {
	tests := []struct {
		unit  string
		extra time.Duration // what the command does before its workers stop
	}{
		{"jobdir-work@.service", 0},
		{"jobdir-serve.service", httpShutdownTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.unit, func(t *testing.T) {
			u := readUnit(t, tt.unit)
			shutdown, kill := commandGrace(t, u)
			stop := parseTimespan(t, u.last("TimeoutStopSec"))
			need := tt.extra + shutdown + kill + stopMargin
			require.GreaterOrEqual(t, stop, need,
				"TimeoutStopSec=%s is shorter than the %s of a graceful stop (--shutdown-grace %s, --kill-grace %s)", stop, need, shutdown, kill)
			require.Equal(t, "mixed", u.last("KillMode"), "SIGTERM to jobdir alone, SIGKILL to the rest after it exits")
			require.Equal(t, "yes", u.last("Delegate"), "the worker makes a cgroup per job under its own")
		})
	}
	// The graces are the ones the packages document.
	shutdown, kill := commandGrace(t, readUnit(t, "jobdir-work@.service"))
	require.Equal(t, 10*time.Second, shutdown)
	require.Equal(t, 5*time.Second, kill)
}
