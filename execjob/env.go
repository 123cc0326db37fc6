package execjob

import (
	"context"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobdir/jobdir/execjob/internal/supervise"
)

// CleanEnvVars are the only variables of the worker's environment that a
// program gets when Handler.CleanEnv is set.
var CleanEnvVars = []string{"PATH", "HOME", "LANG", "TZ", "USER"}

// withheld reports whether a variable of the worker's environment is kept
// from programs: the worker's own configuration and secrets (every
// JOBDIR_ variable but JOBDIR_DIR, such as JOBDIR_TOKEN), the supervisor's
// (JOBDIR_EXECJOB_), and systemd's notification and socket-activation
// variables, which would let a job speak for its worker's service.
func withheld(name string) bool {
	switch {
	case name == "JOBDIR_DIR":
		return false
	case strings.HasPrefix(name, "JOBDIR_"):
		return true
	case name == "NOTIFY_SOCKET", strings.HasPrefix(name, "LISTEN_"), strings.HasPrefix(name, "WATCHDOG_"):
		return true
	}
	return false
}

// programEnv builds the environment of a program: the worker's variables
// (worker, as os.Environ) that are not withheld, or only CleanEnvVars if
// clean; then the payload's entries, which override them (except the
// supervisor's variables, which they cannot set); then the attempt's trace
// context (traced, see traceEnv), the job's ID and attempt, which nothing
// overrides.
func programEnv(worker []string, clean bool, payload, traced []string, id string, attempt int) []string {
	vars := make(map[string]string)
	var order []string
	set := func(kv string) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return
		}
		if _, seen := vars[k]; !seen {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, kv := range worker {
		k, _, _ := strings.Cut(kv, "=")
		if clean {
			if !isCleanVar(k) {
				continue
			}
		} else if withheld(k) {
			continue
		}
		set(kv)
	}
	for _, kv := range payload {
		if strings.HasPrefix(kv, supervise.EnvPrefix) {
			continue
		}
		set(kv)
	}
	for _, kv := range traced {
		set(kv)
	}
	set(EnvJobID + "=" + id)
	set(EnvAttempt + "=" + strconv.Itoa(attempt))
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env
}

func isCleanVar(k string) bool {
	for _, c := range CleanEnvVars {
		if k == c {
			return true
		}
	}
	return false
}

// traceEnv returns TRACEPARENT and TRACESTATE, the W3C trace context of
// the span in ctx (the attempt's, when the runner traces its attempts, as
// jobdir work --otel does), as variables of a program's environment, so
// that the spans the program makes are the attempt's children; none when
// ctx holds no span.
func traceEnv(ctx context.Context) []string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	var env []string
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := c.Get(k); v != "" {
			env = append(env, strings.ToUpper(k)+"="+v)
		}
	}
	return env
}
