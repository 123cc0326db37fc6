// Package multiproc holds the runner's tests with real worker processes
// sharing a filestore directory: every job runs once however many
// processes drain a backlog, a cancel from another process reaches a
// handler, and SIGTERM lets a running handler finish. They live apart from
// package runner's own tests so that those depend on no store but memstore.
// The children are started through internal/testproc, whose package doc
// says where the other multi-process tests live.
package multiproc
