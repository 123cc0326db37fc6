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
