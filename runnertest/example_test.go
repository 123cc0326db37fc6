package runnertest_test

import (
	"context"
	"fmt"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/runner"
	"github.com/jobdir/jobdir/runnertest"
)

// resize is the payload of the jobs of kind "image.resize".
type resize struct {
	Width int `json:"width"`
}

func (resize) Kind() string { return "image.resize" }

func resizeImage(ctx context.Context, job jobstore.Job, r resize) (string, error) {
	if r.Width <= 0 {
		return "", runner.Permanent(fmt.Errorf("width %d: must be positive", r.Width))
	}
	return fmt.Sprintf("resized to %d", r.Width), nil
}

// A handler's outcome for a job, without a store or a runner: what the
// runner would record.
func ExampleWork() {
	ctx := context.Background() // in a test, t.Context()
	for _, w := range []int{0, 640} {
		job, err := runnertest.NewJob(resize{Width: w}) // in a test, runnertest.Job(t, ...)
		if err != nil {
			panic(err)
		}
		o := runnertest.Work(ctx, runner.TypedResult(resizeImage), job)
		fmt.Printf("error %q, permanent %v, result %q\n", o.Error, o.Permanent, o.Result)
	}
	// Output:
	// error "width 0: must be positive", permanent true, result ""
	// error "", permanent false, result "\"resized to 640\""
}
