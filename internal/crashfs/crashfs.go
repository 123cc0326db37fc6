//go:build linux

package crashfs

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"syscall"
	"time"
)

// rootIno is the inode number of the root directory, FUSE's own.
const rootIno = 1

// FS is the model: every inode's current and durable contents, the count
// of operations and the cut. It is safe for concurrent use.
type FS struct {
	mu      sync.Mutex
	inodes  map[uint64]*inode
	nextIno uint64
	ops     int      // operations counted so far
	log     []string // what each counted operation was, by number - 1
	limit   int      // operations allowed before the cut; < 0: no cut armed
	cut     bool
	cutOp   string // the operation the cut stopped, "" if none
}

// inode is one file or directory. Its durable fields are what a power cut
// leaves.
type inode struct {
	ino     uint64
	mode    uint32 // S_IFREG or S_IFDIR, with the permission bits
	uid     uint32
	gid     uint32
	nlink   uint32
	mtime   time.Time
	data    []byte            // a file's contents
	entries map[string]uint64 // a directory's entries

	durMode    uint32
	durUID     uint32
	durGID     uint32
	durMtime   time.Time
	durData    []byte
	durEntries map[string]uint64
}

func (n *inode) isDir() bool { return n.mode&syscall.S_IFMT == syscall.S_IFDIR }

// New returns a file system whose current and durable contents are img; a
// nil img is an empty root directory (mode 0755, owned by root).
func New(img *Image) *FS {
	f := &FS{inodes: make(map[uint64]*inode), limit: -1}
	if img == nil {
		img = &Image{Root: rootIno, Nodes: map[uint64]*Node{rootIno: {Mode: syscall.S_IFDIR | 0o755, Entries: map[string]uint64{}}}}
	}
	// Number the inodes afresh, the root first, so that the root is
	// rootIno whatever the image calls it.
	renum := map[uint64]uint64{img.Root: rootIno}
	f.nextIno = rootIno + 1
	for _, ino := range slices.Sorted(maps.Keys(img.Nodes)) {
		if _, ok := renum[ino]; !ok {
			renum[ino] = f.nextIno
			f.nextIno++
		}
	}
	for old, nd := range img.Nodes {
		n := &inode{ino: renum[old], mode: nd.Mode, uid: nd.UID, gid: nd.GID, mtime: nd.Mtime}
		if n.isDir() {
			n.entries = make(map[string]uint64, len(nd.Entries))
			for name, c := range nd.Entries {
				n.entries[name] = renum[c]
			}
		} else {
			n.data = slices.Clone(nd.Data)
		}
		n.syncData()
		n.syncEntries()
		f.inodes[n.ino] = n
	}
	for _, n := range f.inodes {
		if n.isDir() {
			n.nlink = 2
			for _, c := range n.entries {
				if ch := f.inodes[c]; !ch.isDir() {
					ch.nlink++
				}
			}
		}
	}
	return f
}

// syncData makes n's data and attributes durable, as fsync(2) does.
func (n *inode) syncData() {
	n.durMode, n.durUID, n.durGID, n.durMtime = n.mode, n.uid, n.gid, n.mtime
	if !n.isDir() {
		n.durData = slices.Clone(n.data)
	}
}

// syncEntries makes a directory's entries durable, as fsync(2) of the
// directory does, with its attributes.
func (n *inode) syncEntries() {
	n.durMode, n.durUID, n.durGID, n.durMtime = n.mode, n.uid, n.gid, n.mtime
	if n.isDir() {
		n.durEntries = maps.Clone(n.entries)
	}
}

// newInode adds an inode whose durable state is its state at creation with
// no data and no entries: what a power cut leaves of a file or directory
// whose entry was made durable but that was never fsynced itself.
func (f *FS) newInode(mode, uid, gid uint32) *inode {
	n := &inode{ino: f.nextIno, mode: mode, uid: uid, gid: gid, nlink: 1, mtime: time.Now()}
	f.nextIno++
	n.durMode, n.durUID, n.durGID, n.durMtime = n.mode, n.uid, n.gid, n.mtime
	if n.isDir() {
		n.nlink = 2
		n.entries, n.durEntries = map[string]uint64{}, map[string]uint64{}
	}
	f.inodes[n.ino] = n
	return n
}

// begin starts a request, with f.mu held: it returns EIO once the file
// system is cut, and for an operation that changes something (what is not
// "") counts it, cutting instead when the armed cut is due.
func (f *FS) begin(what string) syscall.Errno {
	if f.cut {
		return syscall.EIO
	}
	if what == "" {
		return 0
	}
	if f.limit >= 0 && f.ops >= f.limit {
		f.cut, f.cutOp = true, what
		return syscall.EIO
	}
	f.ops++
	f.log = append(f.log, what)
	return 0
}

// Ops returns how many operations that change the file system or make
// something durable it has served.
func (f *FS) Ops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// Log returns a description of each operation counted so far, in order:
// Log()[i] is operation i+1.
func (f *FS) Log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// CutAfter arms a cut: the file system serves n more counted operations
// (n >= 0) and then is cut at the next, which fails with EIO, as does every
// request after it. It replaces a cut armed before; it does nothing once
// the file system is cut.
func (f *FS) CutAfter(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = f.ops + n
}

// Cut cuts the file system now: every request from now on fails with EIO.
// It is idempotent.
func (f *FS) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = true
}

// IsCut reports whether the file system is cut, and the operation the cut
// stopped ("" if it was cut by Cut, between operations).
func (f *FS) IsCut() (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cut, f.cutOp
}

// Durable returns the image a power cut now would leave: what the durable
// entries reach from the root, with each inode's durable contents.
func (f *FS) Durable() *Image { return f.image(true) }

// Current returns the image of what the file system holds now, as if
// everything had been made durable (a clean shutdown).
func (f *FS) Current() *Image { return f.image(false) }

func (f *FS) image(durable bool) *Image {
	f.mu.Lock()
	defer f.mu.Unlock()
	img := &Image{Root: rootIno, Nodes: make(map[uint64]*Node)}
	todo := []uint64{rootIno}
	for len(todo) > 0 {
		ino := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if _, seen := img.Nodes[ino]; seen {
			continue
		}
		n := f.inodes[ino]
		nd := &Node{Mode: n.mode, UID: n.uid, GID: n.gid, Mtime: n.mtime}
		data, entries := n.data, n.entries
		if durable {
			nd.Mode, nd.UID, nd.GID, nd.Mtime = n.durMode, n.durUID, n.durGID, n.durMtime
			data, entries = n.durData, n.durEntries
		}
		if n.isDir() {
			nd.Entries = make(map[string]uint64, len(entries))
			for name, c := range entries {
				if _, ok := f.inodes[c]; ok {
					nd.Entries[name] = c
					todo = append(todo, c)
				}
			}
		} else {
			nd.Data = slices.Clone(data)
		}
		img.Nodes[ino] = nd
	}
	return img
}

// dirOf returns the directory inode ino, with f.mu held.
func (f *FS) dirOf(ino uint64) (*inode, syscall.Errno) {
	n := f.inodes[ino]
	if n == nil {
		return nil, syscall.ESTALE
	}
	if !n.isDir() {
		return nil, syscall.ENOTDIR
	}
	return n, 0
}

// drop takes one name away from the inode c, with f.mu held. The inode
// stays in the table: a durable entry may still name it.
func (f *FS) drop(c *inode) {
	if !c.isDir() && c.nlink > 0 {
		c.nlink--
	}
}

// removeEntry removes name from dir, as unlink(2) (dir false) or rmdir(2)
// (dir true) do.
func (f *FS) removeEntry(parent uint64, name string, dir bool) syscall.Errno {
	p, errno := f.dirOf(parent)
	if errno != 0 {
		return errno
	}
	c, ok := p.entries[name]
	if !ok {
		return syscall.ENOENT
	}
	ch := f.inodes[c]
	switch {
	case dir && !ch.isDir():
		return syscall.ENOTDIR
	case !dir && ch.isDir():
		return syscall.EISDIR
	case dir && len(ch.entries) > 0:
		return syscall.ENOTEMPTY
	}
	delete(p.entries, name)
	p.mtime = time.Now()
	f.drop(ch)
	return 0
}

// rename moves an entry as rename(2) and renameat2(2) with
// RENAME_NOREPLACE do.
func (f *FS) rename(from uint64, name string, to uint64, newName string, flags uint32) syscall.Errno {
	const noReplace, exchange = 1, 2
	if flags&exchange != 0 || flags&^noReplace != 0 {
		return syscall.EINVAL
	}
	src, errno := f.dirOf(from)
	if errno != 0 {
		return errno
	}
	dst, errno := f.dirOf(to)
	if errno != 0 {
		return errno
	}
	c, ok := src.entries[name]
	if !ok {
		return syscall.ENOENT
	}
	ch := f.inodes[c]
	if old, ok := dst.entries[newName]; ok {
		if old == c {
			return 0 // the same inode: rename(2) does nothing
		}
		if flags&noReplace != 0 {
			return syscall.EEXIST
		}
		o := f.inodes[old]
		switch {
		case ch.isDir() && !o.isDir():
			return syscall.ENOTDIR
		case !ch.isDir() && o.isDir():
			return syscall.EISDIR
		case o.isDir() && len(o.entries) > 0:
			return syscall.ENOTEMPTY
		}
		f.drop(o)
	}
	if ch.isDir() && f.inside(to, c) {
		return syscall.EINVAL
	}
	delete(src.entries, name)
	dst.entries[newName] = c
	src.mtime, dst.mtime = time.Now(), time.Now()
	return 0
}

// inside reports whether directory ino is dir or below it, with f.mu held.
func (f *FS) inside(ino, dir uint64) bool {
	if ino == dir {
		return true
	}
	n := f.inodes[dir]
	for _, c := range n.entries {
		if ch := f.inodes[c]; ch.isDir() && f.inside(ino, c) {
			return true
		}
	}
	return false
}

// String describes the file system's counters, for test failures.
func (f *FS) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("crashfs: %d operations, %d inodes, cut %v", f.ops, len(f.inodes), f.cut)
}
