//go:build !unix

package filestore

import "io/fs"

// inode returns 0: inode numbers are not available here, so Stats rereads
// every record.
func inode(fs.FileInfo) uint64 { return 0 }
