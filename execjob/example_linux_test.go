//go:build linux

package execjob_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jobdir/jobdir/execjob"
	"github.com/jobdir/jobdir/jobstore"
)

// A runner calls Handler.Work with each claimed exec job; here the job is
// built by hand to show what one attempt does.
func ExampleHandler() {
	logDir, err := os.MkdirTemp("", "execjob-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(logDir)

	spec, err := execjob.NewSpec(execjob.Payload{
		Argv: []string{"sh", "-c", `echo "attempt $JOBDIR_ATTEMPT"; exit 2`},
		Dir:  "/",
	})
	if err != nil {
		panic(err)
	}
	job := jobstore.NewJob(spec, time.Now())
	job.Attempt = 1

	h := execjob.Handler{LogDir: logDir}
	_, err = h.Work(context.Background(), job)
	fmt.Println(err)
	// Output:
	// exit status 2; output ends with:
	// attempt 1
}
