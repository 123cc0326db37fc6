package runner

import (
	"context"
	"errors"
	"os"
	"runtime/debug"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// registerTimeout bounds the registration of the worker at Run.
const registerTimeout = 10 * time.Second

// register lists the runner as a live worker of kinds, if its store keeps a
// list of workers (jobstore.WorkerRegistry), and returns what unlists it. A
// registration that fails is logged, and the runner runs unlisted: the
// list is for people, and claiming does not depend on it.
func (r *Runner) register(ctx context.Context, kinds []string) func() {
	reg, ok := r.store.(jobstore.WorkerRegistry)
	if !ok {
		return func() {}
	}
	host, _ := os.Hostname()
	info := jobstore.WorkerInfo{
		ID:          r.s.worker,
		Host:        sanitizeName(host, 256),
		PID:         os.Getpid(),
		StartedAt:   time.Now(),
		Kinds:       kinds,
		Queues:      r.s.queues,
		Concurrency: r.s.concurrency,
		Version:     r.s.version,
	}
	if info.Version == "" {
		info.Version = moduleVersion()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), registerTimeout)
	defer cancel()
	unregister, err := reg.RegisterWorker(ctx, info)
	if err != nil {
		msg := "cannot list this worker among the store's live workers; it runs unlisted"
		if errors.Is(err, jobstore.ErrWorkerExists) {
			msg = "another live worker has this worker name; give each runner its own (Options.Worker); this one runs unlisted"
		}
		r.s.log.Warn(msg, "worker", r.s.worker, "err", err)
		return func() {}
	}
	return func() {
		if err := unregister(); err != nil {
			r.s.log.Warn("cannot unlist this worker; it goes when its process ends", "worker", r.s.worker, "err", err)
		}
	}
}

// moduleVersion returns the main module's version from the build
// information, or "" for a development build.
func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok || info.Main.Version == "(devel)" {
		return ""
	}
	return sanitizeName(info.Main.Version, 256)
}
