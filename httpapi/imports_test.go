package httpapi_test

import (
	"go/build"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/runner"
)

// A Server takes a runner's metrics as runner.Options.Metrics.
var _ runner.Metrics = (*httpapi.Server)(nil)

// TestImportsNeitherRunnerNorExec: httpapi serves a jobstore.Client and
// depends on no package that runs jobs: runner metrics reach it through
// runner.Options.Metrics (a Server is a runner.Metrics), so the package graph
// stays downward.
func TestImportsNeitherRunnerNorExec(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	require.NoError(t, err)
	require.Contains(t, pkg.Imports, "github.com/jobdir/jobdir/jobstore", "the check reads the imports")
	for _, p := range []string{"github.com/jobdir/jobdir/runner", "github.com/jobdir/jobdir/execjob"} {
		require.False(t, slices.Contains(pkg.Imports, p), "httpapi imports %s", p)
	}
}
