// Package multiproc holds the runner's tests with real worker processes
// sharing a filestore directory. They live apart from package runner's own
// tests so that those depend on no store but memstore.
package multiproc
