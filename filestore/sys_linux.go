//go:build linux

// Platform code for Linux, where the store is supported and tested: the
// statfs(2) check that refuses network and userspace filesystems, the
// file systems where syncfs(2) reaches the disk, and syncfs(2) itself.

package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Filesystem magic numbers from statfs(2).
const (
	magicNFS     = 0x6969
	magicSMB2    = 0xfe534d42
	magicCIFS    = 0xff534d42
	magicFUSE    = 0x65735546
	magicCeph    = 0x00c36400
	magicOverlay = 0x794c7630
	magicExt4    = 0xef53 // ext2, ext3 and ext4 share it
	magicXFS     = 0x58465342
	magicBtrfs   = 0x9123683e
	magicTmpfs   = 0x01021994
)

// fsInfoOf is fileOps.FSInfo: statfs(2) and stat(2) of dir.
func fsInfoOf(dir string) (fsInfo, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fsInfo{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	var fi unix.Stat_t
	if err := unix.Stat(dir, &fi); err != nil {
		return fsInfo{}, fmt.Errorf("stat %s: %w", dir, err)
	}
	var u unix.Utsname
	kernel := ""
	if err := unix.Uname(&u); err == nil {
		kernel = unix.ByteSliceToString(u.Release[:])
	}
	return fsInfo{Type: int64(st.Type), BlockDev: unix.Major(uint64(fi.Dev)) != 0, Kernel: kernel}, nil
}

// syncFSErrorsKernel is the first Linux release whose syncfs(2) reports
// every error of the writeback it waits for: from 5.8 a syncfs returns
// the file system's write errors since the descriptor was opened, and
// from 5.17 also an error of the file system's own sync (a failed journal
// commit), which older kernels dropped.
var syncFSErrorsKernel = [2]int{5, 17}

// kernelReportsSyncFSErrors says whether the kernel release (uname -r,
// such as "6.1.0-18-amd64") is syncFSErrorsKernel or later. A release it
// cannot read is taken for an older one.
func kernelReportsSyncFSErrors(release string) bool {
	major, rest, ok := strings.Cut(release, ".")
	if !ok {
		return false
	}
	minor := rest
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = rest[:i]
	}
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > syncFSErrorsKernel[0] || ma == syncFSErrorsKernel[0] && mi >= syncFSErrorsKernel[1]
}

// syncFSReaches says whether one syncfs(2) of the file system fi
// describes is known to make every file and directory entry written on it
// durable, and names the file system for messages. Only file systems whose
// syncfs is the kernel's own writeback of a block device qualify: ext4 and
// xfs on a block device (a loop device is one), and btrfs, which lives
// only on block devices but reports an anonymous device. tmpfs qualifies
// too, trivially: nothing on it survives a power cut, and a syncfs there
// costs nothing. Everything else fsyncs each file: a FUSE daemon never
// sees a syncfs (the kernel does not pass it on), and network and stacked
// file systems (NFS, overlayfs) give no such promise either. And a syncfs
// carries durability only where it reports the errors of what it wrote:
// on Linux 5.17 and later (kernelReportsSyncFSErrors); on an older kernel
// the disk file systems fsync each file too. TestSyncFSReaches is the
// table.
func syncFSReaches(fi fsInfo) (bool, string) {
	name, ok := "", false
	switch uint32(fi.Type) {
	case magicExt4:
		name, ok = "ext4", fi.BlockDev
	case magicXFS:
		name, ok = "xfs", fi.BlockDev
	case magicBtrfs:
		name, ok = "btrfs", true
	case magicTmpfs:
		return true, "tmpfs"
	}
	if name != "" {
		if ok && !kernelReportsSyncFSErrors(fi.Kernel) {
			kernel := fi.Kernel
			if kernel == "" {
				kernel = "an unknown version"
			}
			return false, fmt.Sprintf("%s on Linux %s (a syncfs(2) reports every write error from Linux %d.%d on)",
				name, kernel, syncFSErrorsKernel[0], syncFSErrorsKernel[1])
		}
		return ok, name
	}
	if name, _ := fsKind(fi.Type); name != "" {
		return false, name
	}
	return false, fmt.Sprintf("a file system of type %#x", uint32(fi.Type))
}

// fsKind names the filesystem of a statfs f_type and says whether the
// store refuses it by default.
func fsKind(fsType int64) (name string, unsafe bool) {
	switch uint32(fsType) {
	case magicNFS:
		return "NFS", true
	case magicSMB2:
		return "SMB2", true
	case magicCIFS:
		return "CIFS", true
	case magicFUSE:
		return "FUSE", true
	case magicCeph:
		return "Ceph", true
	case magicOverlay:
		return "overlayfs", false
	}
	return "", false
}

// checkFilesystem refuses filesystems where flock, rename and inotify do
// not hold across clients, and warns on overlayfs.
func (s *Store) checkFilesystem(context.Context) error {
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	name, unsafe := fsKind(int64(st.Type))
	if !unsafe {
		if name == "overlayfs" {
			s.log.Warn("filestore: the store is on overlayfs (a container's writable layer?): inotify events may be missed and data is lost with the container; mount a volume instead", "dir", s.dir)
		}
		return nil
	}
	if s.opts.AllowUnsafeFilesystem {
		s.log.Warn("filestore: opening on an unsafe filesystem as Options.AllowUnsafeFilesystem asks: safe for one process on one machine only, and a change survives a power cut only if the filesystem makes each fsync reach the disk", "dir", s.dir, "fs", name)
		return nil
	}
	return fmt.Errorf("%w: %s is on %s, where file locks, atomic renames and change notifications do not hold across clients, so two processes could run one job; use a local filesystem, or set Options.AllowUnsafeFilesystem if only one process on one machine will ever use it. "+
		"Even then, whether a change survives a power cut is up to %s: the store fsyncs each file and directory there, never syncfs(2), but cannot tell whether an fsync reaches the disk",
		ErrUnsupportedFilesystem, s.dir, name, name)
}

// fsSync is one syncfs(2) of the file system that holds a directory.
type fsSync struct{ f *os.File }

// openSyncFS opens dir for a later syncfs(2). Open it before writing the
// files the sync must cover: syncfs reports the writeback errors of the
// file system that happen after the descriptor was opened (Linux 5.8 and
// later), so an error in writing them back is not missed.
func openSyncFS(dir string) (syncer, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return fsSync{f}, nil
}

// Sync writes back every dirty file of the file system and waits for it,
// then flushes the disk's cache.
func (s fsSync) Sync() error { return unix.Syncfs(int(s.f.Fd())) }

func (s fsSync) Close() error { return s.f.Close() }

// fsyncFD flushes the file fd to the disk, as (*os.File).Sync does.
func fsyncFD(fd int) error { return unix.Fsync(fd) }

// fsetxattr sets the extended attribute name of the open file fd to value.
func fsetxattr(fd int, name string, value []byte) error {
	return ignoringEINTR(func() error { return unix.Fsetxattr(fd, name, value, 0) })
}

// fdatasync flushes fd's data (and only the metadata needed to read it).
func fdatasync(fd int) error { return unix.Fdatasync(fd) }

// fremovexattr removes the extended attribute name of the open file fd; a
// missing one is no error.
func fremovexattr(fd int, name string) error {
	err := ignoringEINTR(func() error { return unix.Fremovexattr(fd, name) })
	if errors.Is(err, unix.ENODATA) {
		return nil
	}
	return err
}

// lgetxattr reads the extended attribute name of the file at path, never
// following a link, into buf, and returns its length.
func lgetxattr(path, name string, buf []byte) (int, error) {
	var n int
	err := ignoringEINTR(func() (err error) {
		n, err = unix.Lgetxattr(path, name, buf)
		return err
	})
	return n, err
}

// openUnnamed opens a new file without a name in the directory dfd
// (O_TMPFILE), for writing, with mode perm less the umask. ok=false, with
// the error, says the file system has no such files (EOPNOTSUPP; EISDIR
// from a kernel that does not know the flag).
func openUnnamed(dfd int, perm uint32) (fd int, ok bool, err error) {
	fd, err = unix.Openat(dfd, ".", unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, perm)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
		return -1, false, err
	}
	return fd, true, err
}

// linkUnnamed gives the file fd (opened by openUnnamed) the name name in
// the directory dfd: with AT_EMPTY_PATH, which kernels from 6.10 allow the
// process that opened the file and older ones a process with
// CAP_DAC_READ_SEARCH, or else through /proc/self/fd, which any process
// may link from. The first walks no path: through /proc a link resolved
// /proc/self/fd/<fd> too, a fifth of the naming's CPU in a batch. A
// process that finds AT_EMPTY_PATH refused goes through /proc from then on
// (emptyPathLinks). ok=false, with the error, says neither way is open to
// this process (no /proc of its PID namespace, and AT_EMPTY_PATH refused).
func linkUnnamed(fd, dfd int, name string) (ok bool, err error) {
	tried := emptyPathLinks.Load() >= 0
	if tried {
		err = unix.Linkat(fd, "", dfd, name, unix.AT_EMPTY_PATH)
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EPERM) {
			emptyPathLinks.Store(1)
			return true, err
		}
		// Refused: the flag needs a capability this process lacks
		// (ENOENT: the kernel took the empty path as a name), or a
		// security module said no; or dfd is a directory removed since
		// it was opened, which the way through /proc tells apart.
	}
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dfd, name, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.ENOENT) {
		// No /proc/self/fd/<fd> (fd is open, so /proc is not this
		// process's), or no dfd: nothing learnt about AT_EMPTY_PATH.
		return false, err
	}
	if tried {
		// dfd is there, so AT_EMPTY_PATH was refused.
		emptyPathLinks.Store(-1)
	}
	return true, err
}

// emptyPathLinks says how linkUnnamed names a file: 0 until it has tried
// AT_EMPTY_PATH, 1 once that worked, -1 once it was refused (then through
// /proc/self/fd).
var emptyPathLinks atomic.Int32
