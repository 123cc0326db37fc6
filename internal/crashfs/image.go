//go:build linux

package crashfs

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// Image is a file system's contents at one moment: a tree of inodes by
// number, which may name one file under several names (hard links, or a
// rename that a cut left half durable) and, after a cut, one directory
// under two names.
type Image struct {
	// Root is the number of the root directory.
	Root uint64
	// Nodes holds every inode reachable from Root, by number.
	Nodes map[uint64]*Node
}

// Node is one inode of an Image.
type Node struct {
	// Mode is the type (syscall.S_IFREG or S_IFDIR) and permission bits.
	Mode uint32
	// UID and GID own the inode.
	UID, GID uint32
	// Mtime is the time of the last change of the contents.
	Mtime time.Time
	// Data is a file's contents.
	Data []byte
	// Entries are a directory's names and the inodes they name.
	Entries map[string]uint64
}

// Lookup returns the node at the slash-separated path p below the root, or
// nil.
func (img *Image) Lookup(p string) *Node {
	n := img.Nodes[img.Root]
	for _, name := range splitPath(p) {
		if n == nil || n.Entries == nil {
			return nil
		}
		c, ok := n.Entries[name]
		if !ok {
			return nil
		}
		n = img.Nodes[c]
	}
	return n
}

func splitPath(p string) []string {
	var parts []string
	for p = filepath.Clean("/" + p); p != "/"; p = filepath.Dir(p) {
		parts = append(parts, filepath.Base(p))
	}
	slices.Reverse(parts)
	return parts
}

// Paths returns the path of every file and directory in the image, sorted,
// each directory ending in a slash; for test failures.
func (img *Image) Paths() []string {
	var out []string
	var walk func(ino uint64, p string, seen map[uint64]bool)
	walk = func(ino uint64, p string, seen map[uint64]bool) {
		n := img.Nodes[ino]
		if n.Entries == nil {
			out = append(out, p)
			return
		}
		if seen[ino] {
			return
		}
		seen[ino] = true
		out = append(out, p+"/")
		for _, name := range slices.Sorted(maps.Keys(n.Entries)) {
			walk(n.Entries[name], p+"/"+name, seen)
		}
		delete(seen, ino)
	}
	walk(img.Root, "", map[uint64]bool{})
	slices.Sort(out)
	return out
}

// Materialize writes the image into dir, a directory of the real file
// system that exists and is empty: each directory and file with its mode,
// owner (when this process may set it) and modification time; a file under
// several names becomes hard links, and a directory under two names (a
// rename a cut left half durable) a copy under each.
func (img *Image) Materialize(dir string) error {
	written := make(map[uint64]string)
	var walk func(ino uint64, p string, above map[uint64]bool) error
	walk = func(ino uint64, p string, above map[uint64]bool) error {
		n := img.Nodes[ino]
		if n.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			if first, ok := written[ino]; ok {
				return os.Link(first, p)
			}
			if err := os.WriteFile(p, n.Data, 0o600); err != nil {
				return err
			}
			written[ino] = p
			return setAttrs(p, n)
		}
		if above[ino] {
			return nil // a cycle of half-durable renames: cut it
		}
		above[ino] = true
		defer delete(above, ino)
		if p != dir {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
		}
		for _, name := range slices.Sorted(maps.Keys(n.Entries)) {
			if err := walk(n.Entries[name], filepath.Join(p, name), above); err != nil {
				return err
			}
		}
		return setAttrs(p, n)
	}
	if err := walk(img.Root, dir, map[uint64]bool{}); err != nil {
		return fmt.Errorf("crashfs: materialize: %w", err)
	}
	return nil
}

func setAttrs(p string, n *Node) error {
	if os.Geteuid() == 0 {
		if err := os.Lchown(p, int(n.UID), int(n.GID)); err != nil {
			return err
		}
	}
	// After the chown, which clears the setgid bit of a file.
	if err := syscall.Chmod(p, n.Mode&0o7777); err != nil {
		return &os.PathError{Op: "chmod", Path: p, Err: err}
	}
	if !n.Mtime.IsZero() {
		return os.Chtimes(p, n.Mtime, n.Mtime)
	}
	return nil
}
