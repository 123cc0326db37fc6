package filestore

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadRegular: readRegular reads a regular file whole, up to its limit
// and one byte more, whatever the file's size against its 512-byte first
// read; it reports a link as ELOOP without following it, a missing file as
// fs.ErrNotExist, and the type of anything that is not a regular file
// without reading it.
func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n int) (string, []byte) {
		data := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p, data
	}
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 70000} {
		p, data := write("f", n)
		got, typ, err := readRegular(p, 1<<20)
		require.NoError(t, err, "%d bytes", n)
		require.Zero(t, typ)
		require.Equal(t, data, got, "%d bytes", n)
	}

	p, data := write("big", 10000)
	for _, limit := range []int64{0, 100, 511, 4095, 9999} {
		got, _, err := readRegular(p, limit)
		require.NoError(t, err)
		require.Equal(t, data[:limit+1], got, "limit %d: the limit and one byte more", limit)
	}
	got, _, err := readRegular(p, 10000)
	require.NoError(t, err)
	require.Equal(t, data, got, "a file of exactly the limit")

	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(p, link))
	_, _, err = readRegular(link, 1<<20)
	require.ErrorIs(t, err, syscall.ELOOP)
	require.ErrorContains(t, err, link)

	_, _, err = readRegular(filepath.Join(dir, "missing"), 1<<20)
	require.ErrorIs(t, err, fs.ErrNotExist)

	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o700))
	got, typ, err := readRegular(sub, 1<<20)
	require.NoError(t, err)
	require.Equal(t, fs.ModeDir, typ)
	require.Nil(t, got)

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	got, typ, err = readRegular(fifo, 1<<20)
	require.NoError(t, err, "a FIFO without a writer must not block the read")
	require.Equal(t, fs.ModeNamedPipe, typ)
	require.Nil(t, got)
}
