package filestore

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/fsfault"
	"github.com/jobdir/jobdir/jobstore"
)

// TestOptionsFaults shows that Options.Faults sees the file operations of
// the store and that the error it injects reaches the caller, testable
// with errors.Is for both the errno and fsfault.ErrInjected.
func TestOptionsFaults(t *testing.T) {
	var mu sync.Mutex
	seen := map[fsfault.Op]int{}
	var failRename bool
	inj := &fsfault.Injector{Fail: func(op fsfault.Op, path string) error {
		mu.Lock()
		defer mu.Unlock()
		seen[op]++
		if failRename && op == fsfault.Rename {
			return fsfault.Error(op, syscall.ENOSPC)
		}
		return nil
	}}
	s, err := Open(t.Context(), t.TempDir(), &Options{Faults: inj.Func()})
	require.NoError(t, err)
	defer s.Close()
	_, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.NoError(t, err)
	mu.Lock()
	require.Positive(t, seen[fsfault.SyncDir]+seen[fsfault.Link]+seen[fsfault.Rename]+seen[fsfault.Write], "ops seen: %v", seen)
	failRename = true
	mu.Unlock()

	_, _, err = s.Submit(t.Context(), jobstore.Spec{Kind: "k"})
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorIs(t, err, fsfault.ErrInjected)
}

// TestFaultsDocNamesEveryOp: the doc of Options.Faults names every
// operation the store asks it about (the fsfault.Op constants), so that a
// test written from the doc can fail each one.
func TestFaultsDocNamesEveryOp(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../internal/fsfault/fsfault.go", nil, 0)
	require.NoError(t, err)
	var ops []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, sp := range g.Specs {
			for _, v := range sp.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					ops = append(ops, lit.Value)
				}
			}
		}
	}
	require.NotEmpty(t, ops)
	src, err := os.ReadFile("options.go")
	require.NoError(t, err)
	doc := string(src)
	doc = doc[strings.Index(doc, "// Faults makes"):strings.Index(doc, "Faults func(")]
	for _, op := range ops {
		require.Contains(t, doc, op, "Options.Faults' doc does not name %s", op)
	}
}
