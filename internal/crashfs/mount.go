//go:build linux

package crashfs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Available returns nil if this process can mount a crashfs, or why not:
// mounting needs root and /dev/fuse. Tests skip with its message.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("crashfs: mounting a FUSE file system without fusermount needs root")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("crashfs: no usable /dev/fuse: %w", err)
	}
	_ = f.Close()
	return nil
}

// Mount is a crashfs mounted on a directory.
type Mount struct {
	// Dir is the mount point.
	Dir string
	// FS is the model it serves.
	FS     *FS
	server *fuse.Server
}

// Mount serves f on the directory dir, which must exist, until Unmount.
func (f *FS) Mount(dir string) (*Mount, error) {
	zero := time.Duration(0)
	root := &node{fsys: f, ino: rootIno}
	server, err := fs.Mount(dir, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            "crashfs",
			Name:              "crashfs",
			DisableXAttrs:     true,
			// File locks stay with the kernel (EnableLocks false), which
			// keeps flock(2) locally as for a local file system.
			EnableLocks: false,
			// The mount is used by the other processes of the machine.
			AllowOther: true,
		},
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
	})
	if err != nil {
		return nil, fmt.Errorf("crashfs: mount %s: %w", dir, err)
	}
	return &Mount{Dir: dir, FS: f, server: server}, nil
}

// Unmount cuts the file system (if it is not cut yet, so that nothing is
// made durable on the way out) and unmounts it; processes that still use
// it must be gone. It is idempotent.
func (m *Mount) Unmount() error {
	m.FS.Cut()
	if m.server == nil {
		return nil
	}
	err := m.server.Unmount()
	if err != nil {
		// Still busy: detach it, so that the test can go on.
		if derr := syscall.Unmount(m.Dir, syscall.MNT_DETACH); derr != nil {
			return fmt.Errorf("crashfs: unmount %s: %w", m.Dir, err)
		}
		go m.server.Wait()
	}
	m.server = nil
	return nil
}
