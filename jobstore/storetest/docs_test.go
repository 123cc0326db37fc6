package storetest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocsNameEverySubtest keeps the table in docs/state-machine.md that
// says which subtest proves which rule in step with the suite: every subtest
// is named there, and every name there is a subtest.
func TestDocsNameEverySubtest(t *testing.T) {
	doc, err := os.ReadFile("../../docs/state-machine.md")
	require.NoError(t, err)
	var named []string
	for _, m := range regexp.MustCompile("`([A-Z][A-Za-z]*/[A-Z][A-Za-z]*)`").FindAllStringSubmatch(string(doc), -1) {
		named = append(named, m[1])
	}
	var suite []string
	for _, g := range groups {
		for _, tc := range g.tests {
			suite = append(suite, g.name+"/"+tc.name)
		}
	}
	slices.Sort(named)
	named = slices.Compact(named)
	require.ElementsMatch(t, suite, named, "docs/state-machine.md and the suite name different subtests")
}

// TestGroupFiles: the cases of each group are in the file named for it, or
// in the one doc.go lists for it.
func TestGroupFiles(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	_, m, ok := strings.Cut(string(doc), "// Where the cases are")
	require.True(t, ok, "doc.go says nowhere where the cases are")
	listed := map[string]string{}
	for _, l := range regexp.MustCompile(`(?m)^//\t([A-Za-z]+)\s+([a-z]+\.go)$`).FindAllStringSubmatch(m, -1) {
		listed[l[1]] = l[2]
	}
	// Which file declares each group's list of cases.
	declared := map[string]string{}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	decl := regexp.MustCompile(`(?m)^var ([a-zA-Z]+Tests) = \[\]test\{`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, d := range decl.FindAllStringSubmatch(string(src), -1) {
			declared[d[1]] = f
		}
	}
	src, err := os.ReadFile("storetest.go")
	require.NoError(t, err)
	entries := regexp.MustCompile(`\{"([A-Za-z]+)", ([a-zA-Z]+Tests)\}`).FindAllStringSubmatch(string(src), -1)
	require.Len(t, entries, len(groups))
	for _, e := range entries {
		want := strings.ToLower(e[1]) + ".go"
		if f, ok := listed[e[1]]; ok {
			want = f
		}
		require.Equal(t, want, declared[e[2]], "the cases of group %s", e[1])
	}
}
