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
// or of another program, which Open then refuses with ErrNotStore), the
// creation lock of a store whose creation has begun (another process is
// creating it, or died doing so, and the next Open finishes it), or the
// records of the old single-process store, which Open migrates. A missing
// dir holds no store. IsStore only reads; it is safe for concurrent use and
// while other processes use the store.
func IsStore(dir string) (bool, error) {
	for _, name := range []string{formatFile, createLockFile} {
		_, err := os.Lstat(filepath.Join(dir, name))
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, fs.ErrNotExist):
			return false, fmt.Errorf("filestore: probe %s: %w", dir, err)
		}
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
// IsStore says holds no store, that are not a store's: neither the
// temporary files of a FORMAT being written nor a lost+found directory
// (the root of a new volume has one). A caller that wants to create a
// store only where it does not take over other files checks that there
// are none. A missing dir has none, and so has one that has become a store
// since IsStore looked: Open makes the creation lock before any other
// entry of a new store, so OtherFiles looks for it again, after listing,
// when it found any entry, and returns none if it is there
// (TestE2EProcessesCreateOneStore in cmd/jobdir: processes starting at
// once on a new directory).
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
		if !strings.HasPrefix(e.Name(), "."+formatFile) && !(e.Name() == "lost+found" && e.IsDir()) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	if is, err := IsStore(dir); err != nil || is {
		return nil, err
	}
	return names, nil
}
