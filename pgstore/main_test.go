package pgstore_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/jobdir/jobdir/internal/testproc"
)

func TestMain(m *testing.M) {
	testproc.MainRoles(nil, runChild)
	code := m.Run()
	dropSeeded()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
