package storetest

import (
	"os"
	"regexp"
	"slices"
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
