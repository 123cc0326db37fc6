package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// IsStore reports whether dir holds a store: a FORMAT file (of this store
// or of another program, which Open then refuses with ErrNotStore), or the
// records of the old single-process store, which Open migrates. A missing
// dir holds no store. IsStore only reads; it is safe for concurrent use and
// while other processes use the store.
func IsStore(dir string) (bool, error) {
	_, err := os.Lstat(filepath.Join(dir, formatFile))
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("filestore: probe %s: %w", dir, err)
	}
	has, err := hasLegacyFiles(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("filestore: probe %s: %w", dir, err)
	}
	return has, nil
}

// OtherFiles returns the names of up to n entries of dir, a directory that
// IsStore says holds no store, other than the temporary files Open writes
// while it creates a store there, which another process may be doing at
// that moment. A caller that wants to create a store only where it does not
// take over other files checks that there are none. A missing dir has none.
func OtherFiles(dir string, n int) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("filestore: probe %s: %w", dir, err)
	}
	var names []string
	for _, e := range ents {
		if len(names) == n {
			break
		}
		if !strings.HasPrefix(e.Name(), "."+formatFile) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
