//go:build linux

package crashfs

import (
	"context"
	"maps"
	"path"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is go-fuse's view of one inode of the model. go-fuse keeps a tree of
// nodes as a cache of names; the model alone answers every lookup.
type node struct {
	fs.Inode
	fsys *FS
	ino  uint64
}

// handle is an open file: the flags it was opened with.
type handle struct{ flags uint32 }

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeReader     = (*node)(nil)
	_ fs.NodeWriter     = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeFlusher    = (*node)(nil)
	_ fs.NodeReleaser   = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeOpendirer  = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.NodeAccesser   = (*node)(nil)
	_ fs.NodeMknoder    = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeAllocater  = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
)

// where names the node for the operation log.
func (n *node) where(name string) string {
	p := "/" + n.Path(nil)
	if name != "" {
		p = path.Join(p, name)
	}
	return p
}

// child returns go-fuse's node for the model's inode c.
func (n *node) child(ctx context.Context, c *inode, out *fuse.EntryOut) *fs.Inode {
	fillAttr(c, &out.Attr)
	return n.NewInode(ctx, &node{fsys: n.fsys, ino: c.ino}, fs.StableAttr{Mode: c.mode & syscall.S_IFMT, Ino: c.ino})
}

func fillAttr(c *inode, a *fuse.Attr) {
	a.Ino = c.ino
	a.Mode = c.mode
	a.Nlink = c.nlink
	a.Uid, a.Gid = c.uid, c.gid
	a.Size = uint64(len(c.data))
	if c.isDir() {
		a.Size = 4096
	}
	a.Blksize = 4096
	a.Blocks = (a.Size + 511) / 512
	a.SetTimes(nil, &c.mtime, &c.mtime)
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(""); errno != 0 {
		return nil, errno
	}
	p, errno := f.dirOf(n.ino)
	if errno != 0 {
		return nil, errno
	}
	c, ok := p.entries[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	return n.child(ctx, f.inodes[c], out), 0
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(""); errno != 0 {
		return errno
	}
	fillAttr(f.inodes[n.ino], &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	what := "setattr " + n.where("")
	if sz, ok := in.GetSize(); ok {
		what = "truncate " + n.where("") + " " + itoa(sz)
	} else if m, ok := in.GetMode(); ok {
		what = "chmod " + n.where("") + " " + otoa(m&0o7777)
	}
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(what); errno != 0 {
		return errno
	}
	c := f.inodes[n.ino]
	if m, ok := in.GetMode(); ok {
		c.mode = c.mode&syscall.S_IFMT | m&0o7777
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok {
		c.uid = uid
	}
	if gok {
		c.gid = gid
	}
	if sz, ok := in.GetSize(); ok {
		if c.isDir() {
			return syscall.EISDIR
		}
		c.data = resize(c.data, int(sz))
		c.mtime = time.Now()
	}
	if mt, ok := in.GetMTime(); ok {
		c.mtime = mt
	}
	fillAttr(c, &out.Attr)
	return 0
}

func resize(b []byte, n int) []byte {
	if n <= len(b) {
		return b[:n]
	}
	return append(b, make([]byte, n-len(b))...)
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	what := ""
	if flags&syscall.O_TRUNC != 0 {
		what = "truncate " + n.where("") + " 0"
	}
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(what); errno != 0 {
		return nil, 0, errno
	}
	c := f.inodes[n.ino]
	if flags&syscall.O_TRUNC != 0 && !c.isDir() {
		c.data = c.data[:0]
		c.mtime = time.Now()
	}
	return &handle{flags: flags}, fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f := n.fsys
	what := "create " + n.where(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(what); errno != 0 {
		return nil, nil, 0, errno
	}
	p, errno := f.dirOf(n.ino)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if c, ok := p.entries[name]; ok {
		if flags&syscall.O_EXCL != 0 {
			return nil, nil, 0, syscall.EEXIST
		}
		ch := f.inodes[c]
		if ch.isDir() {
			return nil, nil, 0, syscall.EISDIR
		}
		if flags&syscall.O_TRUNC != 0 {
			ch.data = ch.data[:0]
		}
		return n.child(ctx, ch, out), &handle{flags: flags}, fuse.FOPEN_DIRECT_IO, 0
	}
	uid, gid := callerIDs(ctx)
	perm := mode & 0o7777
	if p.mode&syscall.S_ISGID != 0 {
		gid = p.gid
	}
	c := f.newInode(syscall.S_IFREG|perm, uid, gid)
	p.entries[name] = c.ino
	p.mtime = time.Now()
	return n.child(ctx, c, out), &handle{flags: flags}, fuse.FOPEN_DIRECT_IO, 0
}

func callerIDs(ctx context.Context) (uint32, uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(""); errno != 0 {
		return nil, errno
	}
	data := f.inodes[n.ino].data
	if off >= int64(len(data)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), int64(len(data)))
	return fuse.ReadResultData(slices.Clone(data[off:end])), 0
}

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f := n.fsys
	what := "write " + n.where("") + " " + itoa(uint64(len(data))) + "@" + itoa(uint64(off))
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(what); errno != 0 {
		return 0, errno
	}
	c := f.inodes[n.ino]
	if h, ok := fh.(*handle); ok && h.flags&syscall.O_APPEND != 0 {
		off = int64(len(c.data))
	}
	if end := int(off) + len(data); end > len(c.data) {
		c.data = resize(c.data, end)
	}
	copy(c.data[off:], data)
	c.mtime = time.Now()
	return uint32(len(data)), 0
}

// Fsync makes a file's data and attributes durable, or a directory's
// entries (FsyncDir comes here too).
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	f := n.fsys
	what := "fsync " + n.where("")
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.inodes[n.ino]
	if c.isDir() {
		what = "fsync-dir " + n.where("")
	}
	if errno := f.begin(what); errno != 0 {
		return errno
	}
	if c.isDir() {
		c.syncEntries()
	} else {
		c.syncData()
	}
	return 0
}

func (n *node) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.begin("")
}

func (n *node) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.fsys
	what := "mkdir " + n.where(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(what); errno != 0 {
		return nil, errno
	}
	p, errno := f.dirOf(n.ino)
	if errno != 0 {
		return nil, errno
	}
	if _, ok := p.entries[name]; ok {
		return nil, syscall.EEXIST
	}
	uid, gid := callerIDs(ctx)
	perm := mode & 0o7777
	if p.mode&syscall.S_ISGID != 0 {
		gid = p.gid
		perm |= syscall.S_ISGID
	}
	c := f.newInode(syscall.S_IFDIR|perm, uid, gid)
	p.entries[name] = c.ino
	p.mtime = time.Now()
	return n.child(ctx, c, out), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	f := n.fsys
	what := "unlink " + n.where(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(what); errno != 0 {
		return errno
	}
	return f.removeEntry(n.ino, name, false)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	f := n.fsys
	what := "rmdir " + n.where(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(what); errno != 0 {
		return errno
	}
	return f.removeEntry(n.ino, name, true)
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	f := n.fsys
	what := "rename " + n.where(name) + " " + np.where(newName)
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(what); errno != 0 {
		return errno
	}
	return f.rename(n.ino, name, np.ino, newName, flags)
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	f := n.fsys
	what := "link " + t.where("") + " " + n.where(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(what); errno != 0 {
		return nil, errno
	}
	p, errno := f.dirOf(n.ino)
	if errno != 0 {
		return nil, errno
	}
	c := f.inodes[t.ino]
	if c.isDir() {
		return nil, syscall.EPERM
	}
	if _, ok := p.entries[name]; ok {
		return nil, syscall.EEXIST
	}
	p.entries[name] = c.ino
	p.mtime = time.Now()
	c.nlink++
	return n.child(ctx, c, out), 0
}

func (n *node) Opendir(ctx context.Context) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.begin("")
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(""); errno != 0 {
		return nil, errno
	}
	p, errno := f.dirOf(n.ino)
	if errno != 0 {
		return nil, errno
	}
	var list []fuse.DirEntry
	for _, name := range slices.Sorted(maps.Keys(p.entries)) {
		c := f.inodes[p.entries[name]]
		list = append(list, fuse.DirEntry{Name: name, Ino: c.ino, Mode: c.mode & syscall.S_IFMT})
	}
	return fs.NewListDirStream(list), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(""); errno != 0 {
		return errno
	}
	out.Bsize, out.Frsize = 4096, 4096
	out.Blocks, out.Bfree, out.Bavail = 1<<20, 1<<19, 1<<19
	out.Files, out.Ffree = 1<<20, 1<<20-uint64(len(f.inodes))
	out.NameLen = 255
	return 0
}

func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.begin("")
}

// What the model does not support fails as a file system without it would.

func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) { return nil, syscall.EINVAL }

func (n *node) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	return syscall.EOPNOTSUPP
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
func otoa(n uint32) string { return "0" + strconv.FormatUint(uint64(n), 8) }
