// Package fsfault lets this module's tests make a filestore's file
// operations fail, as a failing or full disk would, from outside package
// filestore: filestore.Options.Faults takes an [Injector]. The torture
// run's child processes use it to run their stores with EIO and ENOSPC on
// a fraction of their writes, renames and fsyncs.
//
// It is internal so that no program outside this module can inject
// faults into a store: the option exists for tests alone.
package fsfault

import (
	"errors"
	"fmt"
	"syscall"
)

// Op names a file operation that changes a store's directory.
type Op string

// The operations an Injector is asked about, before each is done.
const (
	// Write replaces a file atomically: a temporary file, written and
	// (unless the store skips fsyncs) fsynced, then renamed over it.
	Write Op = "write"
	// WriteTemp writes a new temporary file.
	WriteTemp Op = "write-temp"
	// Link makes a hard link; Rename renames; Remove removes a file.
	Link   Op = "link"
	Rename Op = "rename"
	Remove Op = "remove"
	// Overwrite rewrites a file in place.
	Overwrite Op = "overwrite"
	// SetXattr sets an extended attribute of a file (a claim's note).
	SetXattr Op = "setxattr"
	// JournalWrite writes into a submission journal; JournalSync makes it
	// durable (fdatasync).
	JournalWrite Op = "journal-write"
	JournalSync  Op = "journal-sync"
	// SyncDir fsyncs a directory after its entries changed: a failure
	// there reports an error for a change that was made.
	SyncDir Op = "sync-dir"
	// SyncFile fsyncs a file already in place (renamed or linked before
	// its data was flushed): like SyncDir, a failure there reports an
	// error for a change that was made.
	SyncFile Op = "sync-file"
	// SyncFS opens a file system for syncfs(2), and SyncFSFlush is the
	// syncfs itself.
	SyncFS      Op = "syncfs"
	SyncFSFlush Op = "syncfs-flush"
	// Mkdir creates a directory.
	Mkdir Op = "mkdir"
)

// Injector decides which file operations of a store fail. Its methods are
// called from every goroutine of the store at once.
type Injector struct {
	// Fail is asked before each operation op on path; a non-nil error
	// makes the operation fail with it, without being done (except
	// SyncDir and SyncFile, whose change was made before). Nil fails
	// nothing.
	Fail func(op Op, path string) error
}

// Check returns the error op on path fails with, if any.
func (i *Injector) Check(op Op, path string) error {
	if i == nil || i.Fail == nil {
		return nil
	}
	return i.Fail(op, path)
}

// Func returns i as a function of the operation's name, the form
// filestore.Options.Faults takes.
func (i *Injector) Func() func(op, path string) error {
	return func(op, path string) error { return i.Check(Op(op), path) }
}

// ErrInjected is matched, with errors.Is, by every error Error returns.
var ErrInjected = errors.New("injected file-system fault")

// Error returns the error that an injected failure of op reports: it
// matches both errno (syscall.EIO, syscall.ENOSPC) and ErrInjected.
func Error(op Op, errno syscall.Errno) error {
	return &injected{op: op, errno: errno}
}

type injected struct {
	op    Op
	errno syscall.Errno
}

func (e *injected) Error() string {
	return fmt.Sprintf("%s (injected at %s)", e.errno.Error(), e.op)
}

func (e *injected) Is(target error) bool { return target == ErrInjected }

func (e *injected) Unwrap() error { return e.errno }
