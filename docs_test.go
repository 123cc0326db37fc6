package jobdir_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGuaranteesNameRealTests keeps docs/guarantees.md honest: every test,
// fuzz test or example it names must exist somewhere in the module.
func TestGuaranteesNameRealTests(t *testing.T) {
	doc, err := os.ReadFile("docs/guarantees.md")
	require.NoError(t, err)
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`((?:Test|Fuzz|Example)\\w+)`").FindAllStringSubmatch(string(doc), -1) {
		named[m[1]] = true
	}
	require.NotEmpty(t, named)

	defined := map[string]bool{}
	funcRE := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Example)\w+)\(`)
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcRE.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	for name := range named {
		require.True(t, defined[name], "docs/guarantees.md names %s, which no test file defines", name)
	}
}

// TestFirstHourDocsAndDemo keeps three fixes of a newcomer's first hour:
// make demo says that it builds before the build's silent minute; the
// jobstore package's doc names all three stores; and docs/operations.md
// gives the dashboard's cost from docs/ui.md's measurement, to which it
// links, not a figure of its own.
func TestFirstHourDocsAndDemo(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^demo:.*\n\t(.*)\n\t(.*)\n`).FindSubmatch(mk)
	require.NotNil(t, m, "the Makefile has a demo target")
	require.Regexp(t, `^@echo ".*build`, string(m[1]), "make demo says it builds first")
	require.Contains(t, string(m[2]), " build -o bin/jobdir", "and then builds")

	doc, err := os.ReadFile("jobstore/doc.go")
	require.NoError(t, err)
	for _, store := range []string{"memstore", "filestore", "pgstore"} {
		require.Contains(t, string(doc), store, "the jobstore package doc names %s", store)
	}

	ops, err := os.ReadFile("docs/operations.md")
	require.NoError(t, err)
	ui, err := os.ReadFile("docs/ui.md")
	require.NoError(t, err)
	require.Contains(t, string(ops), "(ui.md#cost-and-what-was-measured)", "operations.md points to the measurement")
	require.Contains(t, string(ui), "\n## Cost, and what was measured\n")
	require.NotContains(t, string(ops), "0.5-2 s", "the old, unmeasured figure")
	// The figures operations.md quotes are ui.md's: a job's page under a
	// millisecond, the jobs table about 5 ms, the slowest file store pages
	// 65 to 80 ms of CPU.
	require.Contains(t, string(ops), "65-80 ms of CPU")
	for _, row := range []string{"| overview page (`/ui/`) | 63 | 65 |", "| jobs table, failed jobs | 79 | 77 |", "| jobs table, newest first (`/ui/jobs`) | 4.5 | 5.0 |"} {
		require.Contains(t, string(ui), row)
	}
}
