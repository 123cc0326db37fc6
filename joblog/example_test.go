package joblog_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jobdir/jobdir/joblog"
)

// A job's log holds the program's output between jobdir's note lines; a
// RawWriter gives back the output alone.
func ExampleRawWriter() {
	dir, err := os.MkdirTemp("", "logs")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	logs := joblog.Dir{Path: dir}
	const id = "01JCXZ8ZQ4V6Y2W0M8R5T3N7PB"

	a, err := logs.Append(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Fprint(a, joblog.Note("attempt 1", a.AtLineStart()))
	fmt.Fprint(a, "hello\nno newline at the end")
	fmt.Fprint(a, joblog.Note("exit status 0", false))
	if err := a.Close(); err != nil {
		panic(err)
	}

	var whole, raw strings.Builder
	if _, err := logs.CopyFrom(ctx, &whole, id, 0); err != nil {
		panic(err)
	}
	r := &joblog.RawWriter{W: &raw}
	fmt.Fprint(r, whole.String())
	if err := r.Flush(); err != nil {
		panic(err)
	}
	fmt.Printf("%d note lines; the output: %q\n", strings.Count(whole.String(), joblog.NotePrefix), raw.String())
	// Output:
	// 2 note lines; the output: "hello\nno newline at the end"
}
