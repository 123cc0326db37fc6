package fsfault

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestErrorMatchesErrnoAndErrInjected(t *testing.T) {
	err := Error(Rename, syscall.ENOSPC)
	require.ErrorIs(t, err, ErrInjected)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NotErrorIs(t, err, syscall.EIO)
	wrapped := &fs.PathError{Op: "rename", Path: "/x", Err: err}
	require.ErrorIs(t, wrapped, ErrInjected)
	require.True(t, errors.Is(wrapped, syscall.ENOSPC))
	require.Contains(t, err.Error(), "no space left on device")
}

func TestCheck(t *testing.T) {
	var none *Injector
	require.NoError(t, none.Check(Write, "/x"))
	require.NoError(t, (&Injector{}).Check(Write, "/x"))
	var seen []Op
	i := &Injector{Fail: func(op Op, path string) error {
		seen = append(seen, op)
		if op == SyncDir {
			return Error(op, syscall.EIO)
		}
		return nil
	}}
	require.NoError(t, i.Check(Write, "/x"))
	require.ErrorIs(t, i.Check(SyncDir, "/d"), syscall.EIO)
	require.Equal(t, []Op{Write, SyncDir}, seen)
}
