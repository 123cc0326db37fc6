//go:build !unix

package filestore

import "os"

const noFollow = 0

// canWrite returns nil if directory p exists; there is no cheap check of
// write permission here.
func canWrite(p string) error {
	_, err := os.Stat(p)
	return err
}
