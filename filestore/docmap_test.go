package filestore

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocMapNamesEveryFile: the map "Where things are" in doc.go names
// every source file of the package, and only files that exist.
func TestDocMapNamesEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	_, m, ok := strings.Cut(string(doc), "// Where things are")
	require.True(t, ok, "doc.go has no map")
	named := regexp.MustCompile(`[a-z_]+\.go\b`).FindAllString(m, -1)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var src []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") && f != "doc.go" {
			src = append(src, f)
		}
	}
	for _, f := range src {
		require.Contains(t, named, f, "doc.go's map does not name %s", f)
	}
	for _, f := range named {
		require.True(t, slices.Contains(src, f), "doc.go's map names %s, which is not a source file", f)
	}
}
