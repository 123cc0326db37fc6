package joblog_test

import (
	"testing"
	"time"

	"github.com/jobdir/jobdir/joblog"
	"github.com/jobdir/jobdir/joblog/logstest"
	"github.com/jobdir/jobdir/jobstore"
)

func TestDirLogs(t *testing.T) {
	logstest.Run(t, joblog.Dir{Path: t.TempDir()}, func(*testing.T) string { return jobstore.NewID(time.Now()) })
}
