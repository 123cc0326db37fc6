package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal starts a graceful stop; a second one ends
		// the process at once, the leases of its jobs released by its
		// death.
		<-sigs
		cancel()
		dieBy((<-sigs).(syscall.Signal))
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// dieBy ends this process at once as sig would by its default action, so
// that its parent sees a death by sig (which a shell reports as exit status
// 128+sig). PID 1 of a PID namespace cannot die so: the kernel drops every
// signal it sends itself whose action is the default, and Go's runtime then
// exits with status 2. So PID 1, as jobdir is in a container, exits with
// status 128+sig instead, which is what its container reports either way.
func dieBy(sig syscall.Signal) {
	if os.Getpid() != 1 {
		signal.Reset(sig)
		_ = syscall.Kill(os.Getpid(), sig)
		// The signal is delivered at once to a thread that has it
		// unblocked; should it not be, the exit below is the same to a
		// parent that reads only the status.
		time.Sleep(time.Second)
	}
	os.Exit(128 + int(sig))
}
