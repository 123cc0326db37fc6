package filestore

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// readRegular reads the file at path whole, up to limit bytes and one more
// (so that the caller can tell a file larger than limit), with open(2),
// fstat(2), read(2) and close(2) on a bare descriptor: records and claim
// notes are read several times per job, and an *os.File costs three more
// system calls per open (the poller's registration, which a regular file
// refuses, and two fcntl(2)), a finalizer, and an io.ReadAll that starts
// at 512 bytes.
//
// A symbolic link at the last component is not followed: open(2) fails
// with ELOOP. Errors are *fs.PathError wrapping the errno, so
// fs.ErrNotExist and fs.ErrPermission match as they do for os.Open. A file
// that is not a regular one (a directory, a FIFO, a device) is not read:
// its type is returned, with no data and no error.
func readRegular(path string, limit int64) (data []byte, notRegular fs.FileMode, err error) {
	var fd int
	err = ignoringEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		return nil, 0, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if t := fileType(uint32(st.Mode)); t != 0 {
		return nil, t, nil
	}
	// Room for the whole file and one byte more, which a read fills only
	// if the file grew since the fstat; at least 512 bytes.
	size := min(max(st.Size, 511), limit) + 1
	buf := make([]byte, 0, size)
	for int64(len(buf)) <= limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		var n int
		err := ignoringEINTR(func() (err error) {
			n, err = unix.Read(fd, buf[len(buf):cap(buf)])
			return err
		})
		if err != nil {
			return nil, 0, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	return buf, 0, nil
}

// fileType returns the fs.FileMode type bits of a file of stat(2) mode m,
// or 0 for a regular file.
func fileType(m uint32) fs.FileMode {
	switch m & syscall.S_IFMT {
	case syscall.S_IFREG:
		return 0
	case syscall.S_IFDIR:
		return fs.ModeDir
	case syscall.S_IFLNK:
		return fs.ModeSymlink
	case syscall.S_IFIFO:
		return fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		return fs.ModeSocket
	case syscall.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		return fs.ModeDevice
	}
	return fs.ModeIrregular
}
