// Package crashfs is a file system for power-cut tests: an in-memory file
// system, served through FUSE (github.com/hanwen/go-fuse/v2), that keeps for
// every file what it holds now and what a power cut would leave of it, and
// that can be cut (the machine dies) at any operation.
//
// # What it models
//
// Every inode has current contents and durable contents; every directory
// has a current and a durable set of entries. What is current is what
// processes see; what is durable is what a machine that lost its power
// would find when it boots. Only two calls make anything durable:
//
//   - fsync(2) or fdatasync(2) of a file makes its current data and
//     attributes (mode, owner) durable;
//   - fsync(2) of a directory makes its current set of entries durable,
//     each naming an inode (and the directory's own attributes).
//
// Nothing else does: not close(2), not rename(2), not sync(2) or syncfs(2),
// which never reach a FUSE daemon (the kernel has nothing of this file
// system's to write back when writes bypass its cache, so syncfs returns
// success having made nothing durable, as it does on any FUSE file system
// whose daemon buffers). After a cut the durable image is what the durable
// entries reach from the root: an inode reachable only through entries
// that were never made durable is lost, even if its data was fsynced (a new
// file in a directory that was not fsynced); a file whose entry is durable
// but whose data was never fsynced is empty. A rename whose destination
// directory was fsynced but whose source was not leaves the inode under
// both names after a cut, and likewise a hard link; a removal that was not
// made durable comes back. These are outcomes POSIX allows and real file
// systems produce; a store that relies on more than fsync promises fails
// here. This goes past LazyFS, which models lost file data but passes
// directory operations straight through to the file system below.
//
// # Cutting
//
// Every operation that changes the file system or makes something durable
// (create, mkdir, write, truncate, chmod, unlink, rmdir, rename, link,
// fsync) is counted, in the order the daemon receives it, and logged.
// [FS.CutAfter] arms a cut at an operation; [FS.Cut] cuts at once. From the
// cut on, every request fails with EIO, reads too, so the processes using
// the mount see the machine die, and [FS.Durable] returns the image a
// reboot would find. [Image.Materialize] writes an image into a directory
// of the real file system, where the store can be opened again; [New]
// mounts a fresh file system whose current and durable contents are an
// image.
//
// File locks (flock(2)) are left to the kernel, which keeps them locally
// when the daemon does not ask for them (go-fuse's MountOptions.EnableLocks
// is false): they work between the processes of one machine, as on a local
// file system. Attribute and entry caches are off (timeouts of zero) and
// every file is opened with direct I/O, so that every request reaches the
// model and none is answered from the kernel's caches after a cut.
//
// # Caveats
//
// Linux only, and mounting needs root (the mount is made with mount(2)
// directly, without fusermount) and /dev/fuse; [Available] says whether a
// mount can be made here and why not. Symbolic links, special files,
// extended attributes and byte-range locks are not supported. Permissions
// are not checked: tests run as root. The process that serves the file
// system must not be the one that is cut: run the program under test in a
// child process, so that it sees the cut as EIO while the test keeps
// serving and reading the image.
package crashfs
