//go:build !unix

package filestore

// The store rests on flock(2), O_NOFOLLOW, rename(2) over a file another
// process has open and Unix permissions, which Windows (and any other
// system that is not Unix) lacks in that form: this package does not build
// there, and the line below says so first among the compiler's errors
// (this file's name sorts before every file that fails to build there).
// Supported: Linux; compiled but not tested: macOS and the other Unix
// systems. See Platforms in the jobdir repository's README.md.
const _ = filestore_builds_only_on_Linux_and_macOS_Windows_is_not_supported
